"""Which GPU work an event sync waits for: the stream its event was recorded on.

``cudaEventSynchronize`` blocks its thread until the event's last record has run, and that
record sits on one stream. A training loop that takes its batch from an input pipeline with
streams of its own (DALI: its executor threads record an event after the batch's copy, and the
loop's ``feed`` waits for it) blocks on that pipeline's stream, not on its own work: its queue
keeps running. Read as a wait for the loop's work, such a call drains the loop's queue in the
time model's replay every step, and the replay predicts a saving for syncs that cost next to
nothing (docs/detectors.md, "Measurements behind the code").

CUPTI records each event sync (``CUPTI_ACTIVITY_KIND_SYNCHRONIZATION``, ``syncType`` event
synchronize) and each event record (``CUPTI_ACTIVITY_KIND_CUDA_EVENT``, with its ``streamId``);
both carry ``eventSyncId``, which names one record: the join gives the stream a sync waited on.
Exports without those tables or columns (nsys before 2024, CPU captures) answer nothing, and
every sync keeps the reading it had.
"""

from __future__ import annotations

import numpy as np

from analysis import trace as T
from analysis.detect.view._arrays import few_unique, member
from analysis.detect.view._gpu import Activity
from analysis.detect.view._reads import per_process_corr, trace_cache

__all__ = ["foreign_event_syncs", "loop_streams"]

SYNCS = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
EVENTS = "CUPTI_ACTIVITY_KIND_CUDA_EVENT"
#: CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE where an export lacks the enum table.
_EVENT_SYNCHRONIZE = 1


def _event_sync_type(trace: T.Trace) -> int:
    table = "ENUM_CUPTI_SYNC_TYPE"
    if not trace.has(table):
        return _EVENT_SYNCHRONIZE
    rows = trace.query(f"SELECT id, name FROM {table}")[1]
    ids = [int(i) for i, name in rows if str(name).endswith("EVENT_SYNCHRONIZE")]
    return ids[0] if ids else _EVENT_SYNCHRONIZE


def _awaited_streams(trace: T.Trace) -> tuple[np.ndarray, np.ndarray]:
    """(correlation ids of event syncs, the stream each one's event was recorded on), sorted by
    correlation id; a sync whose record is not in the export, or matches records on several
    streams, is left out. Cached per trace."""
    cache = trace_cache(trace)
    if "awaited_streams" in cache:
        return cache["awaited_streams"]
    out = np.zeros(0, np.int64), np.zeros(0, np.int64)
    if all(trace.has(t, c) for t in (SYNCS, EVENTS) for c in ("eventSyncId", "eventId")):
        corr = "y.correlationId"
        if per_process_corr(trace):  # as the calls read them (``_reads.scoped_corr``)
            corr += " + (((y.globalPid >> 24) & 16777215) << 32)"
        sql = f"""SELECT {corr}, MIN(e.streamId), MAX(e.streamId) FROM {SYNCS} AS y
                  JOIN {EVENTS} AS e ON e.eventSyncId = y.eventSyncId AND e.eventId = y.eventId
                  AND e.globalPid = y.globalPid
                  WHERE y.syncType = :kind GROUP BY 1"""
        rows = trace.query(sql, {"kind": _event_sync_type(trace)})[1]
        arr = np.array(rows, dtype=np.int64).reshape(-1, 3)
        one = arr[:, 1] == arr[:, 2]
        order = np.argsort(arr[one, 0], kind="stable")
        out = arr[one, 0][order], arr[one, 1][order]
    cache["awaited_streams"] = out
    return out


def foreign_event_syncs(trace: T.Trace, corr: np.ndarray, streams: np.ndarray) -> np.ndarray:
    """Per call (by correlation id ``corr``): whether it is an event sync whose event was
    recorded on a stream outside ``streams`` (the loop's): a wait for another pipeline's work,
    which leaves the loop's queue running."""
    keys, awaited = _awaited_streams(trace)
    corr = np.asarray(corr, np.int64)
    if keys.size == 0 or corr.size == 0:
        return np.zeros(corr.size, bool)
    pos = np.clip(np.searchsorted(keys, corr), 0, keys.size - 1)
    found = keys[pos] == corr
    return found & ~np.isin(awaited[pos], np.asarray(streams, np.int64))


def loop_streams(act: Activity, corr: np.ndarray) -> np.ndarray:
    """The streams the GPU items launched by the calls ``corr`` (the loop's) run on."""
    return few_unique(act.stream[member(act.corr, np.asarray(corr, np.int64))]).astype(np.int64)
