"""The loop thread's file writes in the window: checkpoints, activation dumps and log lines.

A save on the training thread writes one chunk after another (``write``, ``writev``,
``pwrite64``, ``fwrite``, ``fsync``), with the pickling, checksumming and device-to-host copies
of what it writes in the short gaps between them. The writes chained while the gap from one to
the next is at most ``blocking_io.run_gap_ms`` form one *write run*, from its first call's
start to its last call's end: the stretch the loop spends saving. Shared by the blocking_io
detector, the time model (its ``io`` cause) and the input evidence (a stretch that writes is
not input work). A save written by another thread (an async checkpoint) leaves the loop its
staging and its waits for the writer: :func:`offloaded_saves`.
"""

from __future__ import annotations

import numpy as np

from analysis import trace as T
from analysis.detect.config import DiagnosisConfig
from analysis.detect.view._api import base_name_in
from analysis.detect.view._arrays import process_of
from analysis.detect.view._gpu import DTOH, KIND_MEMCPY, Activity, busy
from analysis.detect.view._intervals import gaps, overlap_each, union
from analysis.detect.view._osrt import osrt_ids, thread_osrt
from analysis.detect.view._reads import (
    WINDOW,
    _end_back,
    _end_column,
    id_list,
    name_ids,
    trace_cache,
)
from analysis.detect.view._window import Steady

__all__ = [
    "HOST_ALLOC",
    "near_writes",
    "offloaded_saves",
    "other_writes",
    "write_calls",
    "write_runs",
]


def write_calls(
    trace: T.Trace, cfg: DiagnosisConfig, st: Steady, tid: int
) -> dict[str, np.ndarray]:
    """The thread's write-side OS-runtime calls (``host.write_calls``) overlapping the window,
    sorted by start (start, end, name)."""
    ids = name_ids(trace, list(cfg.host.write_calls))
    if not ids or not trace.has("OSRT_API"):
        z = np.zeros(0, np.int64)
        return {"start": z, "end": z, "name": z}
    rows = thread_osrt(trace, st, int(tid), osrt_ids(trace, cfg.host))
    keep = np.isin(rows["name"], ids)
    order = np.argsort(rows["start"][keep], kind="stable")
    return {k: v[keep][order] for k, v in rows.items()}


def write_runs(
    trace: T.Trace, cfg: DiagnosisConfig, st: Steady, tid: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """The thread's write runs in the window (see the module's docstring), as sorted,
    disjoint starts and ends (ns); empty without OS-runtime calls or a thread."""
    empty = np.zeros(0, np.int64), np.zeros(0, np.int64)
    if tid is None:
        return empty
    key = ("write_runs", st.lo, st.hi, int(tid), repr(cfg.host), repr(cfg.blocking_io))
    cache = trace_cache(trace)
    if key not in cache:
        rows = write_calls(trace, cfg, st, int(tid))
        s, e = rows["start"], np.maximum(rows["end"], rows["start"])
        if s.size == 0:
            cache[key] = empty
        else:
            run_end = np.maximum.accumulate(e)
            cut = np.flatnonzero(s[1:] - run_end[:-1] > int(cfg.blocking_io.run_gap_ms * 1e6))
            first = np.concatenate([[0], cut + 1])
            last = np.concatenate([cut, [s.size - 1]])
            cache[key] = (s[first].astype(np.int64), run_end[last].astype(np.int64))
    return cache[key]


def near_writes(
    trace: T.Trace, cfg: DiagnosisConfig, st: Steady, tid: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """The write runs, each from ``blocking_io.lead_ms`` before it (the copy and the opening
    of the file a save makes first), as a disjoint union."""
    ws, we = write_runs(trace, cfg, st, tid)
    if ws.size == 0:
        return ws, we
    return union(ws - int(cfg.blocking_io.lead_ms * 1e6), we)


#: Host-memory allocations a save's stager makes on the loop thread (pinned buffers).
HOST_ALLOC = (
    *("cudaHostAlloc", "cudaMallocHost", "cudaHostRegister"),
    *("cuMemHostAlloc", "cuMemAllocHost", "cuMemHostRegister"),
)
#: Waits in which the loop thread sleeps until another thread of its process wakes it.
_WAITS = ("sem_wait", "sem_timedwait", "sem_clockwait", "pthread_cond_wait", "futex")


def other_writes(trace: T.Trace, cfg: DiagnosisConfig, st: Steady, tid: int) -> np.ndarray:
    """Ends (ns, sorted) of the write-side calls that the other threads of ``tid``'s process
    make in the window: a writer thread's."""
    ids = name_ids(trace, list(cfg.host.write_calls))
    if not ids or not trace.has("OSRT_API"):
        return np.zeros(0, np.int64)
    pid = process_of(tid)
    cols = {"start": "t.start", "end": _end_column(trace, "OSRT_API")}
    where = (
        f"{WINDOW} AND t.nameId IN ({id_list(ids)}) AND t.globalTid != {int(tid)}"
        f" AND ((t.globalTid >> 24) & 16777215) = {pid}"
    )
    rows = T.int_columns(trace, "OSRT_API", cols, where, {"lo": st.lo, "hi": st.hi})
    return np.sort(_end_back(trace, "OSRT_API", rows)["end"])


def offloaded_saves(
    trace: T.Trace,
    cfg: DiagnosisConfig,
    st: Steady,
    tid: int | None,
    act: Activity,
    calls: dict[str, np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """The loop thread's part of saves written by another thread of its process (an async
    checkpoint): its blocking device-to-host copies to pageable memory (the stager's copy of
    the state dict), its pinned-host allocations, and its waits that another thread's write
    wakes (the next save waiting for the last one's writer) while the GPU idles; chained while
    ``blocking_io.run_gap_ms`` apart, kept where the stretch stages ``min_stage_mb`` or waits
    on the writer and a write of another thread ends in it or after it, before the next
    stretch ends. Empty where no other thread writes. Sorted, disjoint starts and ends (ns)."""
    empty = np.zeros(0, np.int64), np.zeros(0, np.int64)
    if tid is None or not trace.has("OSRT_API"):
        return empty
    key = ("offloaded_saves", st.lo, st.hi, int(tid), repr(cfg.host), repr(cfg.blocking_io))
    cache = trace_cache(trace)
    if key not in cache:
        cache[key] = _offloaded(trace, cfg, st, int(tid), act, calls)
    return cache[key]


def _offloaded(trace, cfg, st, tid, act, calls) -> tuple[np.ndarray, np.ndarray]:
    empty = np.zeros(0, np.int64), np.zeros(0, np.int64)
    wends = other_writes(trace, cfg, st, tid)
    if wends.size == 0:
        return empty
    th = cfg.blocking_io
    mine = calls["tid"] == tid
    # the loop's staging copies: its calls whose items are pageable device-to-host copies
    d2h = (act.kind == KIND_MEMCPY) & (act.direction == DTOH) & act.pageable
    corr, nbytes = act.corr[d2h], act.nbytes[d2h]
    has = np.isin(calls["corr"], corr) & mine
    order = np.argsort(corr, kind="stable")
    pos = np.searchsorted(corr[order], calls["corr"][has])
    staged = nbytes[order][np.minimum(pos, max(order.size - 1, 0))] if order.size else pos
    alloc = mine & base_name_in(trace, calls["name"], HOST_ALLOC)
    s = np.concatenate([calls["start"][has], calls["start"][alloc]])
    e = np.concatenate([calls["end"][has], calls["end"][alloc]])
    b = np.concatenate([staged, np.zeros(int(alloc.sum()), np.int64)])
    ws, we = _writer_waits(trace, cfg, st, tid, act, wends)
    s, e = np.concatenate([s, ws]), np.concatenate([e, we])
    b = np.concatenate([b, np.full(ws.size, -1, np.int64)])  # -1: a wait on the writer
    if s.size == 0:
        return empty
    o = np.argsort(s, kind="stable")
    s, e, b = s[o], np.maximum(e[o], s[o]), b[o]
    run_end = np.maximum.accumulate(e)
    cut = np.flatnonzero(s[1:] - run_end[:-1] > int(th.run_gap_ms * 1e6))
    first, last = np.concatenate([[0], cut + 1]), np.concatenate([cut, [s.size - 1]])
    rs, re_ = s[first], run_end[last]
    seg = np.repeat(np.arange(first.size), last - first + 1)
    mb = np.bincount(seg, weights=np.maximum(b, 0), minlength=first.size) / 1e6
    waited = np.bincount(seg, weights=b < 0, minlength=first.size) > 0
    nxt = np.append(re_[1:], st.hi)  # a late writer writes in the next save's wait for it
    written = np.searchsorted(wends, rs, side="right") < np.searchsorted(wends, nxt, "right")
    keep = ((mb >= th.min_stage_mb) | waited) & written
    return rs[keep].astype(np.int64), re_[keep].astype(np.int64)


def _writer_waits(trace, cfg, st, tid, act, wends) -> tuple[np.ndarray, np.ndarray]:
    """The loop thread's waits that a write of another thread ends (one ends inside the wait,
    at most ``blocking_io.wake_ms`` before it returns) while the GPU idles for at least
    ``host.stretch_ms`` of it."""
    ids = name_ids(trace, [*_WAITS, *cfg.host.blocked_calls])
    rows = (
        thread_osrt(trace, st, tid, sorted(set(osrt_ids(trace, cfg.host)) | set(ids)))
        if ids
        else None
    )
    if rows is None or rows["start"].size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    on = np.isin(rows["name"], ids)
    s, e = rows["start"][on], rows["end"][on]
    wake = int(cfg.blocking_io.wake_ms * 1e6)
    k = np.searchsorted(wends, e, side="right") - 1  # the last write ending before it returns
    w = wends[np.maximum(k, 0)]
    woken = (k >= 0) & (w >= s) & (e - w <= wake)
    bs, be = busy(trace, st, act)
    gs, ge = gaps(bs, be, st.lo, st.hi)
    idle = overlap_each(s, e, gs, ge) >= int(cfg.host.stretch_ms * 1e6)
    keep = woken & idle
    return s[keep].astype(np.int64), e[keep].astype(np.int64)
