"""The worker's side of a sliced round: set up and held, it runs only what the parent sends.

Why: on a host whose speed changes within seconds, a ratio of two windows timed one after the
other measures the host as much as the variants. In a sliced round the variants' processes
are all live and set up at once, and they take turns: the parent sends each one a slice of a
few steps (about 0.1 s, whole periods of its periodic work), in ABBA order, so that each pair
of neighbouring slices meets one state of the host (:mod:`harness.execution.slicing`). Only
one slice runs at a time: a slice ends with its GPU work synchronised, and the parent stops
every other worker's process group while one runs (:mod:`harness.execution.gate` has the
protocol).

What a worker records here is what a back-to-back window records (per-step times, the host
probes before and after, its threads' CPU and run-queue wait), plus where each slice began and
ended (``slices``, on the machine's monotonic clock, comparable between processes) so that
what slicing costs can be read from result.json (docs/measurement.md).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.core import runfolder as rf
from harness.core import schedwait
from harness.execution.gate import Channel
from harness.execution.pinning import CpuPlan, pin_worker, repin
from harness.execution.steps import WINDOW_MARKER

__all__ = ["SlicedWindow", "Turns", "run_turns"]

#: How often a worker waiting for its next command checks that the parent is still there.
CHECK_S = 1.0


@dataclass
class SlicedWindow:
    """What a sliced round measured of this worker."""

    warmup_steps: int = 0
    warmup_s: float = 0.0
    est_step_s: float = 0.0
    probe_before: dict[str, float] | None = None
    probe_after: dict[str, float] | None = None
    probe_s: float = 0.0
    step_ms: list[float] = field(default_factory=list)
    host_ms: list[float] = field(default_factory=list)
    window_s: float = 0.0
    """The slices' summed wall time (each from its first step to its synchronised end)."""
    sched: dict[str, Any] | None = None
    slice_steps: list[int] = field(default_factory=list)
    slice_start_s: list[float] = field(default_factory=list)
    slice_end_s: list[float] = field(default_factory=list)
    slice_probes: list[dict[str, Any]] = field(default_factory=list)
    """Per slice where probed (harness.timing.slice_probes): ``{"before": .., "after": ..}``."""
    held_s: float = 0.0
    """Seconds spent waiting for commands (turns of the others, the parent's hand-over)."""
    pinned: dict[str, Any] | None = None
    plan: dict[str, Any] | None = None
    """The round's plan as the parent sent it with the first slice (cycles, slice steps)."""
    warmup_started_at: float | None = None

    def slices_record(self) -> dict[str, Any]:
        """result.json's ``slices``: each slice's steps and its start and end (seconds on
        ``time.monotonic``, one clock for every process of the machine)."""
        return {
            "steps": self.slice_steps,
            "start_s": self.slice_start_s,
            "end_s": self.slice_end_s,
            **({"probes": self.slice_probes} if self.slice_probes else {}),
            "pinned": self.pinned,
            "plan": self.plan,
        }


@dataclass
class Turns:
    """What the command loop runs: the worker's own pieces, handed in by
    :func:`harness.execution.worker.run` (this module imports neither torch nor the worker)."""

    channel: Channel
    workload: Any
    torch: Any
    on_gpu: bool
    sync: Callable[[], None]
    warm_up: Callable[[], tuple[int, float, float]]
    """Runs the warm-up: (steps, seconds, steady step seconds)."""
    probe: Callable[[], dict[str, float] | None]
    window_steps: Callable[[float], int]
    """The steps a back-to-back window would measure, from the steady step seconds."""
    say: Callable[[rf.WorkerState], None]
    parent_alive: Callable[[], bool]
    timeout_s: float
    cpus: CpuPlan | None = None
    slice_probe: Callable[[], dict[str, float]] | None = None
    """Run right before and right after each slice, outside its steps (None: no probes)."""


def run_turns(turns: Turns) -> SlicedWindow:
    """Answer the parent's commands until it says ``end`` (module docstring); raises
    RuntimeError when the parent is gone or sends nothing for ``timeout_s``."""
    out = SlicedWindow()
    if turns.cpus is not None:
        out.pinned = {**turns.cpus.record(), **pin_worker(turns.cpus)}
    known = repin(None, set())
    first_step = 0
    threads_before: dict[int, Any] | None = None
    while True:
        t_wait = time.perf_counter()
        msg = _next(turns)
        out.held_s += time.perf_counter() - t_wait
        op = msg.get("op")
        if op == "warmup":
            first_step = _warmup(turns, out)
            known = repin(turns.cpus, known)
            turns.channel.send(
                {"ok": True, "steps": out.warmup_steps, "warmup_s": out.warmup_s,
                 "est_step_s": out.est_step_s,
                 "window_steps": turns.window_steps(out.est_step_s),
                 "period_steps": int(getattr(turns.workload, "period_steps", 1) or 1)}
            )  # fmt: skip
        elif op == "slice":
            if threads_before is None:  # the window starts with the first slice
                turns.workload.start_window()
                turns.say(rf.WorkerState.WINDOW)
                print(f"{WINDOW_MARKER} in slices after {first_step} warm-up steps", flush=True)
                threads_before = schedwait.snapshot()
            known = repin(turns.cpus, known)
            out.plan = msg.get("plan") or out.plan
            wall = _slice(turns, out, first_step, int(msg["steps"]))
            first_step += int(msg["steps"])
            turns.channel.send({"ok": True, "wall_s": wall})
        elif op == "end":
            _end(turns, out, threads_before)
            return out
        else:
            raise RuntimeError(f"the parent sent an unknown command: {msg!r}")


def _next(turns: Turns) -> dict[str, Any]:
    """The next command; RuntimeError once the parent is gone or after ``timeout_s``."""
    t0 = time.monotonic()
    while True:
        msg = turns.channel.recv(CHECK_S)
        if msg is not None:
            return msg
        if not turns.parent_alive():
            raise RuntimeError("the harness that held this worker is gone")
        if time.monotonic() - t0 > turns.timeout_s:
            raise RuntimeError(f"no command from the harness for {turns.timeout_s:g} s")


def _warmup(turns: Turns, out: SlicedWindow) -> int:
    """The warm-up and the host probe before the window; the next step's index."""
    turns.say(rf.WorkerState.WARMUP)
    out.warmup_started_at = time.time()
    out.warmup_steps, out.warmup_s, out.est_step_s = turns.warm_up()
    t_probe = time.perf_counter()
    out.probe_before = turns.probe()
    out.probe_s += time.perf_counter() - t_probe
    return out.warmup_steps


def _slice(turns: Turns, out: SlicedWindow, first: int, n: int) -> float:
    """``n`` measured steps from step index ``first``, synchronised at the end; their wall."""
    import bottlenecks as markers

    torch = turns.torch
    events = [torch.cuda.Event(enable_timing=True) for _ in range(n + 1)] if turns.on_gpu else []
    host: list[float] = []
    before = turns.slice_probe() if turns.slice_probe is not None else None
    start = time.monotonic()
    w0 = time.perf_counter()
    if turns.on_gpu:
        events[0].record()
    for j in range(n):
        s0 = time.perf_counter()
        with markers.phase(markers.STEP):
            turns.workload.step(first + j)
        if turns.on_gpu:
            events[j + 1].record()
        host.append((time.perf_counter() - s0) * 1e3)
    turns.sync()
    wall = time.perf_counter() - w0
    end = time.monotonic()
    if turns.slice_probe is not None:
        out.slice_probes.append({"before": before, "after": turns.slice_probe()})
    steps = [events[j].elapsed_time(events[j + 1]) for j in range(n)] if turns.on_gpu else host
    out.step_ms += steps
    out.host_ms += host
    out.window_s += wall
    out.slice_steps.append(n)
    out.slice_start_s.append(start)
    out.slice_end_s.append(end)
    return wall


def _end(turns: Turns, out: SlicedWindow, threads_before: dict[int, Any] | None) -> None:
    """The window's end: its threads' counters, the host probe after it, the answer."""
    if threads_before is not None:
        out.sched = schedwait.window_record(
            threads_before, schedwait.snapshot(), len(out.step_ms), out.window_s
        )
    turns.say(rf.WorkerState.STOPPING)
    t_probe = time.perf_counter()
    out.probe_after = turns.probe()
    out.probe_s += time.perf_counter() - t_probe
    turns.channel.send({"ok": True, "steps": len(out.step_ms), "pid": os.getpid()})
