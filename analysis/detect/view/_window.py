"""The steady-state window the detectors judge, and the thread that runs the loop.

In order: the harness' ``measure`` range with its ``step`` ranges; else repeating iterations
found in the GPU work or NVTX ranges (:mod:`analysis.detect._steady`); else the span of the
activity minus a start-up share. The loop thread is the one launching most kernels (unless
its process's main thread launches nearly as many).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from analysis import trace as T
from analysis.detect.config import WindowThresholds
from analysis.detect.view import _bursts as B
from analysis.detect.view import _periods as P
from analysis.detect.view import _steady as S
from analysis.detect.view._api import category_ids
from analysis.detect.view._arrays import process_of
from analysis.detect.view._reads import (
    GPU_TABLES,
    KERNEL,
    RUNTIME,
    WINDOW,
    _scalar,
    has_gpu,
    id_list,
    trace_cache,
)

__all__ = [
    "CONTEXT_TABLES",
    "GPU_ACTIVITY_LOST",
    "NO_STEADY_STATE",
    "Steady",
    "activity_span",
    "gpu_activity_lost",
    "launcher_tids",
    "loop_thread",
    "no_steady_state",
    "process_main_thread",
    "steady",
]


@dataclass(frozen=True)
class Steady:
    """The steady-state window the detectors judge, and what a "step" is in it.

    mode ``nvtx``: the harness' ``measure`` range with its ``step`` ranges (``n_steps`` of them on
    ``step_tid``, ``step_ns`` their summed duration). mode ``activity``: no step ranges (an
    arbitrary report), so the window is the GPU activity (or all activity) minus a start-up share,
    ``n_steps`` is None and rates are per second.
    """

    lo: int
    hi: int
    mode: str
    n_steps: int | None
    step_ns: int
    step_tid: int | None
    note: str
    min_call_ns: int = 0
    """Shorter CUDA API calls of no role (not launch, sync, copy, set, alloc) are not read."""
    edges: np.ndarray | None = field(default=None, compare=False, repr=False)
    """Mode ``iterations``: the found iterations' edges (ns, n + 1 of them); None otherwise."""
    edges_on_host: bool = False
    """Whether ``edges`` are host times (NVTX ranges) rather than GPU item starts."""
    untrusted: str | None = None
    """Mode ``activity`` on a GPU report: why the GPU work found repeating was not taken as
    the loop (:func:`analysis.detect._steady.gpu_search`); None when nothing repeated."""

    @property
    def span_ns(self) -> int:
        return max(1, self.hi - self.lo)

    @property
    def per_step(self) -> bool:
        return self.n_steps is not None and self.n_steps > 0

    def rate(self, name: str, count: float) -> tuple[str, float]:
        """``(<name>_per_step, count / steps)`` with steps, else ``(<name>_per_s, count / s)``."""
        if self.per_step:
            return f"{name}_per_step", float(count) / float(self.n_steps)  # type: ignore[arg-type]
        return f"{name}_per_s", float(count) / (self.span_ns / 1e9)


def activity_span(trace: T.Trace) -> tuple[int, int] | None:
    """First start and last end over every activity table (what nsys captured at all)."""
    lo: list[int] = []
    hi: list[int] = []
    for table in T.ACTIVITY_TABLES:
        if trace.has(table):
            a, b = _scalar(trace, f'SELECT MIN(start), MAX("end") FROM {table}')
            if a is not None:
                lo.append(int(a))
                hi.append(int(b if b is not None else a))
    return (min(lo), max(hi)) if lo else None


def steady(trace: T.Trace, window: WindowThresholds) -> Steady:
    """The steady-state window (cached per trace and settings)."""
    key = ("steady", repr(window))  # every window setting decides the window
    cache = trace_cache(trace)
    if key in cache:
        return cache[key]
    result, untrusted = None, None
    if window.use_nvtx:
        result = _suite_window(trace)
    if result is None:
        result, untrusted = _iteration_window(trace, window)
    if result is None:
        result = replace(
            _activity_window(trace, float(window.startup_skip_share)), untrusted=untrusted
        )
    cache[key] = result = replace(result, min_call_ns=int(window.min_call_ns))
    return result


def _suite_window(trace: T.Trace) -> Steady | None:
    """The harness' own window: `measure` with its `step` ranges, or None."""
    steps = T.step_ranges(trace)
    steps = steps[steps["end_ns"].notna()]
    if steps.empty:
        return None
    lo, hi = T.window(trace)
    inside = steps[(steps["start_ns"] >= lo) & (steps["end_ns"] <= hi)]
    if inside.empty:
        return None
    tid = int(inside["global_tid"].value_counts().index[0])
    mine = inside[inside["global_tid"] == tid]
    return Steady(
        lo, hi, "nvtx", len(mine), int(mine["duration_ns"].sum()), tid,
        f"NVTX window: {len(mine)} step ranges inside `measure`",
    )  # fmt: skip


def _iteration_window(trace: T.Trace, window: WindowThresholds) -> tuple[Steady | None, str | None]:
    """Repeating iterations found in the GPU work (else in NVTX ranges of any name); without
    them, why the GPU work that repeats is not the loop (None: nothing repeats)."""
    if not window.find_iterations:
        return None, None
    it, untrusted = S.gpu_search(trace, window) if has_gpu(trace) else (None, None)
    rhythm = None
    if has_gpu(trace):  # a loop that varies: its rhythm, where it spans more than the repeats
        rhythm = B.burst_iterations(trace, window)
        if rhythm is not None and (
            it is None or _span(rhythm) >= window.prefer_bursts_span * _span(it)
        ):
            it = rhythm
    it = it or S.nvtx_iterations(trace, window)
    if it is None:
        return None, untrusted
    tids = launcher_tids(trace, int(it.starts[0]), int(it.starts[-1]), most_first=True)
    if not it.on_host and tids.size:  # whole periods of the loop's periodic writes
        counted = rhythm.starts if has_gpu(trace) and rhythm is not None else it.starts
        it = P.whole_periods(trace, window, it, counted, int(tids[0]))
    lo, hi = int(it.starts[0]), int(it.starts[-1])
    whole = activity_span(trace)
    share = (hi - lo) / max(1, whole[1] - whole[0]) if whole else 1.0
    return Steady(
        lo, hi, "iterations", it.n, hi - lo, int(tids[0]) if tids.size else it.tid,
        f"steady state: {it.n} iterations of {it.source}, after "
        f"{it.skipped_ns / 1e9:.2f} s of start-up ({share:.0%} of the capture)",
        edges=it.starts, edges_on_host=it.on_host,
    ), None  # fmt: skip


def _span(it: S.Iterations) -> int:
    return int(it.starts[-1] - it.starts[0])


def _activity_window(trace: T.Trace, skip: float) -> Steady:
    """Last resort: the span of GPU activity (else of all activity) minus a start-up share."""
    span = None
    how = "all activity"
    if trace.has(KERNEL):
        a, b = _scalar(trace, f'SELECT MIN(start), MAX("end") FROM {KERNEL}')
        if a is not None:
            span, how = (int(a), int(b)), "first to last kernel"
    span = span or activity_span(trace)
    if span is None:
        raise T.TraceError(trace.path, "no recorded activity to take a window from")
    lo = span[0] + int(skip * (span[1] - span[0]))
    return Steady(
        lo, span[1], "activity", None, max(1, span[1] - lo), None,
        f"no NVTX steps and no repeating work: window = {how} minus the first {skip:.0%} "
        "(start-up); rates per second",
    )  # fmt: skip


#: Why a GPU report whose repeating work cannot be the loop is not judged (every class says it).
NO_STEADY_STATE = (
    "no steady state to judge: the report has no suite `step` ranges and no repeating NVTX "
    "range, and the GPU work that repeats cannot be the loop (the best, {why}), so the only "
    "window left, the span of GPU activity, would be mostly start-up (weight upload, "
    "autotuning, compilation); capture the loop alone (nsys --capture-range with "
    "cudaProfilerStart/Stop) or run more steps, or judge that span anyway with "
    "diagnosis.window.find_iterations=false"
)


def no_steady_state(trace: T.Trace, window: WindowThresholds) -> str | None:
    """:data:`NO_STEADY_STATE` when the window fell back to the span of GPU activity although
    GPU work repeats, only not as a loop would (a weight upload's copies, a side stream's
    memsets in an autotuning phase), else None: a verdict on that span would read the
    compiler's or autotuner's work as the loop's. Where nothing repeats at all (a capture of a
    few steps) the span stays the last resort."""
    st = steady(trace, window)
    if st.mode != "activity" or st.untrusted is None:
        return None
    return NO_STEADY_STATE.format(why=st.untrusted)


def launcher_tids(trace: T.Trace, lo: int, hi: int, *, most_first: bool = False) -> np.ndarray:
    """Threads that make kernel launch calls overlapping [lo, hi] (``most_first``: ordered by
    how many they make, the main training thread first)."""
    if not trace.has(RUNTIME):
        return np.zeros(0, np.int64)
    sql = f"""SELECT t.globalTid, COUNT(*) AS n FROM {RUNTIME} AS t WHERE {WINDOW}
              AND t.nameId IN ({id_list(category_ids(trace, "launch"))})
              GROUP BY t.globalTid ORDER BY n DESC"""
    rows = [r for r in trace.query(sql, {"lo": lo, "hi": hi})[1] if r[0] is not None]
    tids = np.array([r[0] for r in rows], dtype=np.int64)
    if not most_first or tids.size == 0:  # none: every launch came before the window
        return np.sort(tids)
    first = loop_thread(tids, np.array([r[1] for r in rows], dtype=np.int64))
    return np.concatenate([[first], tids[tids != first]]).astype(np.int64)


def loop_thread(tids: np.ndarray, counts: np.ndarray) -> int:
    """Which of the launching threads ``tids`` (``counts`` launches each) runs the loop: the one
    launching most, unless its process's main thread launches at least a tenth as much. PyTorch's
    autograd thread can launch more than the loop's own thread (a large backward)."""
    top = int(tids[np.argmax(counts)])
    own = process_main_thread(top)
    mine = counts[tids == own]
    return own if mine.size and mine[0] >= 0.1 * counts.max() else top


def process_main_thread(gtid: int) -> int:
    """The main thread of ``gtid``'s process: nsys's global thread id holds the process id in
    bits 24-47 and the thread id in bits 0-23, and Linux gives a main thread tid == pid."""
    pid = process_of(gtid)
    return (gtid & ~0xFFFFFF) | pid


#: Why a report with CUDA API calls but no GPU activity cannot be judged (every class says it).
GPU_ACTIVITY_LOST = (
    "the report holds CUDA API calls but no kernel, copy, memset or graph activity: CUPTI never "
    "flushed its activity buffers, which usually means the process was killed (a timeout, a "
    "SIGTERM) or left through os._exit before the end; let it end normally, or stop the "
    "capture through a capture range (cudaProfilerStop, nsys --capture-range)"
)


#: Tables nsys fills once the program has created a CUDA context (not on device queries alone).
CONTEXT_TABLES = ("TARGET_INFO_CUDA_CONTEXT_INFO", "TARGET_INFO_CUDA_STREAM")


def gpu_activity_lost(trace: T.Trace) -> str | None:
    """:data:`GPU_ACTIVITY_LOST` when the report has CUDA API rows and no GPU activity rows,
    and the program did use the GPU (a launch or copy call was recorded, or it created a CUDA
    context), else None: judging such a report would read the host's launches against an empty
    GPU. A killed process loses the API records of its launches too, so a created context is the
    sign that stays. A CPU-only program that merely asked the driver about the devices
    (``torch.cuda.is_available()``) on a GPU machine has neither, and is judged as a CPU report."""

    def rows(table: str) -> bool:
        return trace.has(table) and bool(trace.query(f"SELECT 1 FROM {table} LIMIT 1")[1])

    if not rows(RUNTIME) or any(rows(t) for t in GPU_TABLES):
        return None
    if any(rows(t) for t in CONTEXT_TABLES):
        return GPU_ACTIVITY_LOST
    ids = category_ids(trace, "launch", "memcpy", "memset")
    found = (
        ids
        and trace.query(
            f"SELECT 1 FROM {RUNTIME} WHERE nameId IN ({','.join(map(str, ids))}) LIMIT 1"
        )[1]
    )
    return GPU_ACTIVITY_LOST if found else None
