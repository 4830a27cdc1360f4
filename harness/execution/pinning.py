"""Where a sliced round's workers run: the launching threads on one core, the rest on a shared set.

Why: a lent guest's speed changes within seconds, and not on every core at once. The variants
of a sliced round take turns, so pinning every variant's step loop (the thread that launches
the GPU work) to the same core makes each pair of neighbouring slices meet the same core in
the same state; their helper threads and loader processes share the other cores, so they never
take the loop's core from it. Linux only (``os.sched_setaffinity``); elsewhere nothing is
pinned.

The parent chooses (:func:`cpu_plan`), each worker applies it to itself
(:func:`pin_worker`): every thread and child process to the helper set, then its loop thread
to the loop core. A thread created later by the loop thread inherits the loop core, so the
worker applies it again after its warm-up (:func:`repin`), which catches loader processes the
first steps start.
"""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CpuPlan", "cpu_plan", "pin_worker", "repin", "threads_of"]

#: With ``pin=auto``, pin only where the machine has at least this many CPUs: on a 2-core box
#: one core for every loop and one for every helper would slow both for no gain.
AUTO_MIN_CPUS = 4


@dataclass(frozen=True)
class CpuPlan:
    """The loop core and the helpers' shared set (CPU numbers)."""

    loop: int
    helpers: tuple[int, ...]

    def record(self) -> dict[str, object]:
        return {"loop": self.loop, "helpers": list(self.helpers)}


def cpu_plan(mode: str, allowed: set[int] | None = None) -> CpuPlan | None:
    """The plan for ``harness.timing.pin`` (``on``, ``off``, ``auto``: on with at least
    :data:`AUTO_MIN_CPUS` CPUs): the highest allowed CPU for the loops (CPU 0 takes most
    interrupts), the others for helpers; None when nothing is pinned (off, one CPU, not
    Linux)."""
    if mode not in ("on", "off", "auto"):
        raise ValueError(f"harness.timing.pin must be on, off or auto, got {mode!r}")
    if mode == "off" or not hasattr(os, "sched_getaffinity"):
        return None
    cpus = sorted(allowed if allowed is not None else os.sched_getaffinity(0))
    if len(cpus) < 2 or (mode == "auto" and len(cpus) < AUTO_MIN_CPUS):
        return None
    return CpuPlan(loop=cpus[-1], helpers=tuple(cpus[:-1]))


def threads_of(pid: int | str = "self") -> list[int]:
    """The thread ids of a process (empty where there is no /proc)."""
    try:
        return [int(p.name) for p in Path(f"/proc/{pid}/task").iterdir() if p.name.isdigit()]
    except OSError:
        return []


def _children(pid: int | str = "self") -> list[int]:
    """Child processes of every thread of ``pid`` (``/proc/<pid>/task/<tid>/children``)."""
    out: list[int] = []
    for tid in threads_of(pid):
        with contextlib.suppress(OSError, ValueError):
            text = Path(f"/proc/{pid}/task/{tid}/children").read_text()
            out += [int(x) for x in text.split()]
    return out


def _descendants() -> list[int]:
    found, todo = [], _children()
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += _children(pid)
    return found


def _set(tid: int, cpus: tuple[int, ...] | list[int]) -> bool:
    try:
        os.sched_setaffinity(tid, cpus)
    except OSError:  # the thread ended meanwhile, or the CPU is not ours
        return False
    return True


def pin_worker(plan: CpuPlan, loop_tid: int | None = None) -> dict[str, int]:
    """Every thread of this process but the loop thread, and every thread of its child
    processes, to the helper set; the loop thread (default: the caller) to the loop core.
    How many threads each got (for result.json)."""
    loop = threading.get_native_id() if loop_tid is None else loop_tid
    helpers = 0
    for tid in threads_of():
        if tid != loop:
            helpers += _set(tid, plan.helpers)
    children = 0
    for pid in _descendants():
        for tid in threads_of(pid):
            children += _set(tid, plan.helpers)
    _set(loop, (plan.loop,))
    return {"helper_threads": helpers, "child_threads": children}


def repin(plan: CpuPlan | None, known: set[int]) -> set[int]:
    """Pin again when this process has threads it did not have at the last pinning
    (``known``), e.g. a loader's pin-memory thread started by the first steps; the threads
    now. Cheap when nothing changed: one listing of /proc/self/task."""
    now = set(threads_of())
    if plan is not None and now - known:
        pin_worker(plan)
    return now
