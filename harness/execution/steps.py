"""A worker's step loops: the warm-up, and the back-to-back measured window with its length.

The sliced round's window is :mod:`harness.execution.turns`; both run the workload's steps
inside NVTX ``step`` ranges, and both take the steady step time from the warm-up's second half.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from harness.core import runfolder as rf
from harness.core import schedwait
from harness.execution.kineto import Capture

__all__ = ["MIN_WARMUP_STEPS", "measure_window", "warm_up", "warmup_done", "window_steps"]

#: The fewest warm-up steps a time-capped warm-up keeps (harness.max_warmup_s).
MIN_WARMUP_STEPS = 4

#: A context that does nothing (the window without the PyTorch Profiler's ranges).
NULL = contextlib.nullcontext()

#: Printed (stdout, flushed) as the measured window starts: tests wait for it to signal a run
#: while a worker is inside its window, and a log shows how far a killed worker got.
WINDOW_MARKER = "harness-worker: window starts:"


def warmup_done(
    budget_s: float | None, steps_done: int, elapsed_s: float, min_steps: int = MIN_WARMUP_STEPS
) -> bool:
    """End the warm-up early: only with a budget, past it, and after ``min_steps``."""
    return budget_s is not None and steps_done >= min_steps and elapsed_s > budget_s


def window_steps(steps: int, est_step_s: float, max_window_s: float | None, min_steps: int) -> int:
    """Measured steps: the size's ``steps``, or fewer when they would run past
    ``max_window_s`` (slow baselines, e.g. 1.3 s steps), but never fewer than ``min_steps``."""
    if max_window_s is None or est_step_s <= 0 or steps * est_step_s <= max_window_s:
        return steps
    return max(min(min_steps, steps), int(max_window_s / est_step_s))


def warm_up(
    workload: Any,
    planned: int,
    sync: Any,
    budget_s: float | None,
    min_steps: int = MIN_WARMUP_STEPS,
) -> tuple[int, float, float]:
    """Run the warm-up: (steps run, seconds, steady step seconds from its second half).
    ``budget_s``: end it early once past (None for distributed ranks, which must run the same
    steps: each one holds collectives)."""
    import bottlenecks as markers

    # Start together: a rank that set up faster must not count its wait at the first barrier
    # as step time (the window's length is planned from the warm-up).
    sync()
    t0 = time.perf_counter()
    ends: list[float] = []
    for i in range(planned):
        with markers.phase(markers.STEP):
            workload.step(i)
        ends.append(time.perf_counter())
        if warmup_done(budget_s, len(ends), ends[-1] - t0, min_steps):
            break
    sync()
    t_end = time.perf_counter()
    warmup = len(ends)
    # Steady-state step time from the second half of the warm-up (the first steps carry
    # one-off costs: cuDNN autotuning, allocator growth, compilation).
    mid = warmup // 2
    t_mid = ends[mid - 1] if mid else t0
    return warmup, t_end - t0, (t_end - t_mid) / max(1, warmup - mid)


def measure_window(
    spec: Any,
    workload: Any,
    torch: Any,
    first: int,
    n: int,
    on_gpu: bool,
    sync: Any,
    say: Any,
    capture: Capture | None = None,
) -> tuple[list[float], list[float], float, float, dict[str, Any] | None]:
    """The measured window of ``n`` steps: (step ms, host ms per step, window seconds, seconds
    cudaProfilerStop took, its threads' CPU and run-queue wait: :mod:`harness.core.schedwait`).
    On a GPU, step times come from CUDA events and the window is the cudaProfilerApi range;
    under nsys the stop returns only once nsys has taken the capture (seconds:
    ``capture_stop_s``). A kineto unit's ``capture`` (the PyTorch Profiler) starts before the
    window and is written after it (:mod:`harness.execution.kineto`). ``say``: the worker's
    progress."""
    import bottlenecks as markers

    nvtx_ops = torch.autograd.profiler.emit_nvtx() if spec.emit_nvtx else contextlib.nullcontext()
    host_ms: list[float] = []
    events = [torch.cuda.Event(enable_timing=True) for _ in range(n + 1)] if on_gpu else []
    if on_gpu:
        torch.cuda.profiler.start()
        # nsys's first steps of a capture run slow: they are captured but not measured, and
        # the window's NVTX range starts after them
        for j in range(spec.capture_lead_steps):
            workload.step(first + j)
        if spec.capture_lead_steps:
            sync()
        first += spec.capture_lead_steps
    if capture is not None:
        first = capture.start(workload, first, n, sync)
    in_trace = capture.window() if capture is not None else NULL
    workload.start_window()
    say(rf.WorkerState.WINDOW)
    print(f"{WINDOW_MARKER} {n} steps after {first} warm-up steps", flush=True)
    threads_before = schedwait.snapshot()  # each thread's CPU and run-queue wait so far
    with nvtx_ops, markers.phase(markers.MEASURE), in_trace:
        w0 = time.perf_counter()
        if on_gpu:
            events[0].record()
        for j in range(n):
            s0 = time.perf_counter()
            with markers.phase(markers.STEP), capture.step_range() if capture else NULL:
                workload.step(first + j)
            if on_gpu:
                events[j + 1].record()
            host_ms.append((time.perf_counter() - s0) * 1e3)
            if capture is not None and j < n - 1:
                capture.step()  # the last step's range ends when the profiler stops
        sync()
        window_s = time.perf_counter() - w0
    sched = schedwait.window_record(threads_before, schedwait.snapshot(), n, window_s)
    say(rf.WorkerState.STOPPING)
    if capture is not None:
        capture.finish()
    if not on_gpu:
        return host_ms, host_ms, window_s, 0.0, sched
    t_stop = time.perf_counter()
    torch.cuda.profiler.stop()
    stop_s = time.perf_counter() - t_stop
    step_ms = [events[j].elapsed_time(events[j + 1]) for j in range(n)]
    return step_ms, host_ms, window_s, stop_s, sched
