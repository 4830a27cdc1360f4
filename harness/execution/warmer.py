"""Compiler-cache warm-ups in the background (``harness.warm_compile``).

A variant whose set-up compiles (``Variant.compiles``: torch.compile) pays a cold compile once
per machine (about a minute per variant on a datacenter GPU: docs/measurement.md), in its first
timing run's set-up, on the run's critical path. Here a separate process
(``harness.execution.worker`` with ``warm_only``) builds and sets up that variant ahead of time, which fills the shared Inductor and Triton caches
(``TORCHINDUCTOR_CACHE_DIR``, ``TRITON_CACHE_DIR``), so the real runs find them warm. It runs at
the lowest CPU priority (SCHED_IDLE), ``harness.warm_parallel`` variants at a time, and is paused
(SIGSTOP to its process group) whenever a worker warms up or measures, so no measured phase runs
beside it. The runner does not start a variant's first worker before its warm-up has ended.
A warm-up spends most of its time paused, so one warm-up after the other holds a scenario's
second compiled variant back; two at a time halve that timeline (docs/measurement.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.execution.execute import pause_group, stop_group


@dataclass
class WarmTarget:
    """One variant whose compiler cache is filled."""

    scenario: str
    variant: str
    status: str = "queued"
    """queued, running, ok, failed or stopped."""
    returncode: int | None = None
    wall_s: float = 0.0
    """From its start to its end, paused time included."""
    paused_s: float = 0.0
    """Time it spent paused while workers measured."""
    started_at: float | None = None
    ended_at: float | None = None
    """Its process's start and end (epoch seconds)."""
    pauses: list[tuple[float, float]] = field(default_factory=list)
    """Each pause's start and end (epoch seconds): what ran beside the workers' measurements."""

    @property
    def key(self) -> tuple[str, str]:
        return (self.scenario, self.variant)


@dataclass
class _Running:
    """A warm-up process now running (or paused)."""

    target: WarmTarget
    proc: Any
    where: Path
    t0: float = field(default_factory=time.perf_counter)
    paused_at: float | None = None


class CompileWarmer:
    """Runs the warm-ups of ``targets``, ``parallel`` at a time, in order.

    ``start(scenario, variant)`` launches one warm-up process and returns it together with its
    folder (for the error message); ``say`` prints a line. A warm-up running longer than
    ``timeout_s`` (paused time included) is stopped, and its variant compiles in its first run.
    """

    def __init__(
        self,
        targets: list[tuple[str, str]],
        start: Callable[[str, str], tuple[Any, Path]],
        say: Callable[[str], None],
        timeout_s: float = 900.0,
        parallel: int = 1,
    ) -> None:
        self.targets = [WarmTarget(s, v) for s, v in targets]
        self.timeout_s = timeout_s
        self.parallel = parallel
        self._start = start
        self._say = say
        self._running: list[_Running] = []

    def pending(self, scenario: str, variant: str) -> bool:
        """Whether the variant's warm-up has not ended yet (its first worker waits)."""
        return any(t.key == (scenario, variant) and t.status in ("queued", "running")
                   for t in self.targets)  # fmt: skip

    def tick(self, measuring: bool) -> None:
        """Pause while a worker measures; otherwise go on, reap, start the next warm-ups."""
        self._reap()
        for run in list(self._running):
            if time.perf_counter() - run.t0 > self.timeout_s:
                self._stop(run)
                self._say(
                    f"the compiler-cache warm-up of {self._name(run.target)} ran past "
                    f"{self.timeout_s:g} s and was stopped; its first timing run compiles instead"
                )
        for run in self._running:
            self._pause(run, measuring)
        if measuring:
            return
        while len(self._running) < self.parallel:
            nxt = next((t for t in self.targets if t.status == "queued"), None)
            if nxt is None:
                return
            try:
                proc, where = self._start(nxt.scenario, nxt.variant)
            except OSError as exc:
                nxt.status = "failed"
                self._say(f"could not start the compiler-cache warm-up of {self._name(nxt)}: {exc}")
                continue
            self._running.append(_Running(nxt, proc, where))
            nxt.status, nxt.started_at = "running", time.time()
            self._say(
                f"warming the compiler cache for {self._name(nxt)} in the background "
                "(lowest CPU priority, paused while a worker measures)"
            )

    @staticmethod
    def _pause(run: _Running, pause: bool) -> None:
        if pause and run.paused_at is None:
            pause_group(run.proc, True)
            run.paused_at = time.time()
        elif not pause and run.paused_at is not None:
            pause_group(run.proc, False)
            CompileWarmer._end_pause(run)

    @staticmethod
    def _end_pause(run: _Running) -> None:
        """Book the pause that ends now."""
        if run.paused_at is None:
            return
        now = time.time()
        run.target.paused_s += now - run.paused_at
        run.target.pauses.append((run.paused_at, now))
        run.paused_at = None

    def _reap(self) -> None:
        for run in list(self._running):
            rc = run.proc.poll()
            if rc is None:
                continue
            target = run.target
            self._end_pause(run)  # it cannot end while stopped; keep the books right anyway
            target.ended_at = time.time()
            target.returncode = rc
            target.wall_s = time.perf_counter() - run.t0
            target.status = "ok" if rc == 0 else "failed"
            self._running.remove(run)
            if rc == 0:
                self._say(
                    f"compiler cache for {self._name(target)} filled in {target.wall_s:.0f} s "
                    f"({target.paused_s:.0f} s of it paused)"
                )
            else:
                self._say(
                    f"the compiler-cache warm-up of {self._name(target)} failed (exit code "
                    f"{rc}; see {run.where / 'stderr.log'}); its first timing run compiles "
                    "instead"
                )

    def _stop(self, run: _Running) -> None:
        self._end_pause(run)
        stop_group(run.proc, run.where)
        run.target.status = "stopped"
        run.target.wall_s = time.perf_counter() - run.t0
        run.target.ended_at = time.time()
        self._running.remove(run)

    def close(self) -> None:
        """Stop the warm-ups still running (the run ends or stops)."""
        for run in list(self._running):
            self._stop(run)

    def summary(self) -> list[dict[str, Any]]:
        """One record per target, for wall_time.json."""
        return [
            {
                "scenario": t.scenario,
                "variant": t.variant,
                "status": t.status,
                "returncode": t.returncode,
                "wall_s": t.wall_s,
                "paused_s": t.paused_s,
                "started_at": t.started_at,
                "ended_at": t.ended_at,
                "pauses": [list(p) for p in t.pauses],
            }
            for t in self.targets
        ]

    @staticmethod
    def _name(target: WarmTarget) -> str:
        return f"{target.scenario}/{target.variant}"
