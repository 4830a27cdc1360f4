"""How long a worker's threads waited for a core during its measured window (Linux schedstat).

Why: on a shared host a thread can be slow for two reasons a step time cannot tell apart: it
was asleep (on the GIL, on its peer rank, on a lock: what a bottleneck class names), or it was
runnable and no core was free (CPU oversubscription: another process, a fix's own pool
process, a busy loop beside the run). The kernel counts the second apart, per thread:
``/proc/self/task/<tid>/schedstat`` holds three numbers, the thread's time on a CPU (ns), its
time runnable but waiting on a run queue (ns), and its time slices. The worker reads every
thread's counters right before and right after its window (:func:`snapshot`, a few tens of
microseconds a thread) and records the difference (:func:`window_record`) as result.json's
``sched``:

- ``loop_*``: the thread that runs the step loop (the one that took the snapshots);
- ``threads_*``: every thread of the process together (threads that ended inside the window
  are not counted; a thread that started inside it counts from its start).

Read here, with no other harness module, so that the worker (which records it), the tables
(:mod:`harness.execution.collect`) and the judge (:mod:`harness.core.results`) share one
reader. The judge (:mod:`harness.judge.truth`) sets a variant's extra loop wait against its measured
gap to the removal. Where the kernel keeps no schedstat (not Linux, ``CONFIG_SCHEDSTATS``
off), nothing is recorded and nothing is judged by it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

__all__ = [
    "RECORD_KEYS",
    "TIMING_COLUMNS",
    "ThreadTimes",
    "loop_wait_ms_per_step",
    "per_step",
    "read_thread",
    "snapshot",
    "timing_columns",
    "window_record",
]

#: Where the kernel lists this process's threads.
TASK_DIR = Path("/proc/self/task")

#: result.json's ``sched`` keys (ms over the window; ``threads``: how many were counted).
RECORD_KEYS = (
    "loop_cpu_ms",
    "loop_runqueue_wait_ms",
    "threads_cpu_ms",
    "threads_runqueue_wait_ms",
    "threads",
    "steps",
    "window_s",
)


class ThreadTimes(NamedTuple):
    """One thread's schedstat counters (ns since it started)."""

    cpu_ns: int
    """Time on a CPU."""
    wait_ns: int
    """Time runnable, waiting on a run queue for a CPU."""


def read_thread(tid: int, task_dir: Path = TASK_DIR) -> ThreadTimes | None:
    """A thread's counters, or None when it is gone or the kernel keeps none."""
    try:
        fields = (task_dir / str(tid) / "schedstat").read_text().split()
        return ThreadTimes(int(fields[0]), int(fields[1]))
    except (OSError, ValueError, IndexError):
        return None


def snapshot(task_dir: Path = TASK_DIR) -> dict[int, ThreadTimes]:
    """Every thread's counters by thread id ({} where there is no schedstat)."""
    try:
        tids = [int(p.name) for p in task_dir.iterdir() if p.name.isdigit()]
    except OSError:
        return {}
    out = {}
    for tid in tids:
        times = read_thread(tid, task_dir)
        if times is not None:
            out[tid] = times
    return out


def window_record(
    before: Mapping[int, ThreadTimes],
    after: Mapping[int, ThreadTimes],
    steps: int,
    window_s: float,
    loop_tid: int | None = None,
) -> dict[str, Any] | None:
    """result.json's ``sched`` (:data:`RECORD_KEYS`) from two snapshots around a window of
    ``steps`` steps; ``loop_tid``: the step loop's thread (default: the calling thread). None
    when the loop thread is missing from either snapshot (no schedstat)."""
    tid = threading.get_native_id() if loop_tid is None else loop_tid
    if tid not in before or tid not in after:
        return None

    def ms(ns: int) -> float:
        return ns / 1e6

    zero = ThreadTimes(0, 0)
    deltas = [(t.cpu_ns - before.get(k, zero).cpu_ns, t.wait_ns - before.get(k, zero).wait_ns)
              for k, t in after.items()]  # fmt: skip
    return {
        "loop_cpu_ms": ms(after[tid].cpu_ns - before[tid].cpu_ns),
        "loop_runqueue_wait_ms": ms(after[tid].wait_ns - before[tid].wait_ns),
        "threads_cpu_ms": ms(sum(c for c, _ in deltas)),
        "threads_runqueue_wait_ms": ms(sum(w for _, w in deltas)),
        "threads": len(deltas),
        "steps": int(steps),
        "window_s": float(window_s),
    }


# -- per step and per window: the tables' columns ------------------------------------------------

#: timings.csv's columns (and the keys of :func:`per_step`): per step in ms, and as a share of
#: the window (``threads_runqueue_wait_share`` can exceed 1: several threads waiting at once).
TIMING_COLUMNS = (
    "loop_runqueue_wait_ms_per_step",
    "loop_runqueue_wait_share",
    "loop_cpu_ms_per_step",
    "threads_runqueue_wait_ms_per_step",
    "threads_runqueue_wait_share",
    "threads_cpu_ms_per_step",
)


def per_step(record: Any) -> dict[str, float] | None:
    """:data:`TIMING_COLUMNS` of one ``sched`` record; None when it is missing or empty."""
    if not isinstance(record, Mapping) or not record.get("steps"):
        return None
    try:
        steps, window_ms = int(record["steps"]), 1e3 * float(record["window_s"])
        out = {}
        for who in ("loop", "threads"):
            wait, cpu = float(record[f"{who}_runqueue_wait_ms"]), float(record[f"{who}_cpu_ms"])
            out[f"{who}_runqueue_wait_ms_per_step"] = wait / steps
            out[f"{who}_runqueue_wait_share"] = wait / window_ms if window_ms > 0 else None
            out[f"{who}_cpu_ms_per_step"] = cpu / steps
    except (KeyError, TypeError, ValueError):
        return None
    return out


def _rank_records(result: Mapping[str, Any]) -> list[Any]:
    """Each rank's ``sched`` (``timing.ranks``), else the process's own."""
    ranks: Sequence[Any] = (result.get("timing") or {}).get("ranks") or []
    records = [r.get("sched") for r in ranks if isinstance(r, Mapping) and r.get("sched")]
    return records or [result.get("sched")]


def timing_columns(result: Mapping[str, Any]) -> dict[str, float | None]:
    """A worker's timings.csv columns (:data:`TIMING_COLUMNS`) from its result.json: for a
    distributed worker, the most any rank measured (the rank that waited longest)."""
    rows = [r for r in map(per_step, _rank_records(result)) if r is not None]
    out: dict[str, float | None] = dict.fromkeys(TIMING_COLUMNS)
    for col in TIMING_COLUMNS:
        values = [r[col] for r in rows if r.get(col) is not None]
        out[col] = max(values) if values else None
    return out


def loop_wait_ms_per_step(result: Mapping[str, Any]) -> float | None:
    """The step loop's run-queue wait per step (ms; the most of any rank), or None."""
    return timing_columns(result)["loop_runqueue_wait_ms_per_step"]
