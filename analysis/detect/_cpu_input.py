"""Input work on a CPU capture's training thread, read from the OS runtime alone.

A CPU capture (nsys 2022.4 on a box without a GPU: NVTX and OS-runtime calls only) has no CUDA
calls to cut the training thread's time into host stretches, and a user's own script names no
range. What it does show is the thread's OS-runtime calls: loading a batch on the training
thread opens and reads one file after another, with the decoding and augmenting of each item
in the short gaps between them; waiting for loader workers is a poll, receive or semaphore
wait on their queue. Forward, backward and optimiser make none of those calls. So the input
work is the union of *input runs*: the thread's file and queue-wait calls, chained while the
gap from one to the next is at most ``cpu_input_gap_ms`` (the work on one item read), each run
from its first call's start to its last call's end.

The thread is the step thread where the window has one; else the repeating NVTX range's thread
(:func:`analysis.detect._steady.nvtx_iterations`); else, in a capture with no NVTX at all, the
main thread of the process whose OS-runtime calls start first (the one nsys launched, whose
forked loader workers start later).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis import trace as T
from analysis.detect import view as V
from analysis.detect.config import DataStallThresholds


@dataclass(frozen=True)
class CpuInput:
    """The input runs of one thread in the window (ns, clipped to it)."""

    tid: int
    starts: np.ndarray
    ends: np.ndarray
    reads: int
    """File calls (open, read) of the thread in the window."""
    waits: int
    """Queue waits (poll, receive, semaphore) of the thread in the window."""

    @property
    def ns(self) -> int:
        return V.length(self.starts, self.ends)


def training_thread(trace: T.Trace, st: V.Steady) -> int | None:
    """The thread that runs the loop on a capture without CUDA calls, or None."""
    if st.step_tid is not None:
        return int(st.step_tid)
    if not trace.has("OSRT_API"):
        return None
    sql = "SELECT globalTid, MIN(start) FROM OSRT_API GROUP BY globalTid"
    rows = [(int(t), int(s)) for t, s in trace.query(sql)[1] if t is not None]
    mains = [(s, t) for t, s in rows if V.process_main_thread(t) == t]
    return min(mains)[1] if mains else None


def input_runs(view: V.TraceView, st: V.Steady, th: DataStallThresholds, tid: int) -> CpuInput:
    """The thread's input runs in the window (see the module's docstring): the file calls of
    the view's ``host.file_calls``, the queue waits of ``th.cpu_wait_calls``."""
    trace = view.trace
    file_ids = V.name_ids(trace, list(view.config.host.file_calls))
    wait_ids = V.name_ids(trace, list(th.cpu_wait_calls))
    every = sorted(set(file_ids) | set(wait_ids))
    empty = np.zeros(0, np.int64)
    if not every or not trace.has("OSRT_API"):
        return CpuInput(tid, empty, empty, 0, 0)
    rows = V.thread_osrt(trace, st, tid, every)
    s = np.clip(rows["start"], st.lo, st.hi)
    e = np.clip(rows["end"], st.lo, st.hi)
    if s.size and not bool((s[1:] >= s[:-1]).all()):
        order = np.argsort(s, kind="stable")
        s, e, rows = s[order], e[order], {k: v[order] for k, v in rows.items()}
    reads = int(np.isin(rows["name"], file_ids).sum())
    if s.size == 0:
        return CpuInput(tid, empty, empty, reads, 0)
    run_end = np.maximum.accumulate(e)
    gap_ns = int(th.cpu_input_gap_ms * 1e6)
    cut = np.flatnonzero(s[1:] - run_end[:-1] > gap_ns)  # the last call of each run but one
    first = np.concatenate([[0], cut + 1])
    last = np.concatenate([cut, [s.size - 1]])
    return CpuInput(tid, s[first], run_end[last], reads, int(s.size) - reads)
