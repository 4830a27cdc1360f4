"""The loop thread's file writes in the window: checkpoints, activation dumps and log lines.

A save on the training thread writes one chunk after another (``write``, ``writev``,
``pwrite64``, ``fwrite``, ``fsync``), with the pickling, checksumming and device-to-host copies
of what it writes in the short gaps between them. The writes chained while the gap from one to
the next is at most ``blocking_io.run_gap_ms`` form one *write run*, from its first call's
start to its last call's end: the stretch the loop spends saving. Shared by the blocking_io
detector, the time model (its ``io`` cause) and the input evidence (a stretch that writes is
not input work).
"""

from __future__ import annotations

import numpy as np

from analysis import trace as T
from analysis.detect.config import DiagnosisConfig
from analysis.detect.view._host import osrt_ids
from analysis.detect.view._intervals import union
from analysis.detect.view._osrt import thread_osrt
from analysis.detect.view._reads import name_ids, trace_cache
from analysis.detect.view._window import Steady

__all__ = ["near_writes", "write_calls", "write_runs"]


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
