"""Compiler-cache warm-ups in the background (``harness.warm_compile``).

A variant whose set-up compiles (``Variant.compiles``: torch.compile) pays a cold compile once
per machine: about a minute per variant on the H100, in its first timing run's set-up, on the
run's critical path. Here a separate process (``harness.worker`` with ``warm_only``) builds and
sets up that variant ahead of time, which fills the shared Inductor and Triton caches
(``TORCHINDUCTOR_CACHE_DIR``, ``TRITON_CACHE_DIR``), so the real runs find them warm. It runs at
the lowest CPU priority (SCHED_IDLE), one variant at a time, and is paused (SIGSTOP to its
process group) whenever a worker warms up or measures, so no measured phase runs beside it.
The runner does not start a variant's first worker before its warm-up has ended.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.execute import pause_group, stop_group


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


class CompileWarmer:
    """Runs the warm-ups of ``targets`` one after another.

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
    ) -> None:
        self.targets = [WarmTarget(s, v) for s, v in targets]
        self.timeout_s = timeout_s
        self._start = start
        self._say = say
        self._proc: Any = None
        self._where = Path()
        self._current: WarmTarget | None = None
        self._t0 = 0.0
        self._paused_at: float | None = None

    def pending(self, scenario: str, variant: str) -> bool:
        """Whether the variant's warm-up has not ended yet (its first worker waits)."""
        return any(t.key == (scenario, variant) and t.status in ("queued", "running")
                   for t in self.targets)  # fmt: skip

    def tick(self, measuring: bool) -> None:
        """Pause while a worker measures; otherwise go on, reap, start the next warm-up."""
        self._reap()
        if self._proc is not None and time.perf_counter() - self._t0 > self.timeout_s:
            name = self._name(self._current) if self._current else "?"
            self.close()
            self._say(
                f"the compiler-cache warm-up of {name} ran past {self.timeout_s:g} s and was "
                "stopped; its first timing run compiles instead"
            )
            return
        if self._proc is not None:
            self._pause(measuring)
            return
        if measuring:
            return
        nxt = next((t for t in self.targets if t.status == "queued"), None)
        if nxt is None:
            return
        try:
            self._proc, self._where = self._start(nxt.scenario, nxt.variant)
        except OSError as exc:
            nxt.status = "failed"
            self._say(f"could not start the compiler-cache warm-up of {self._name(nxt)}: {exc}")
            return
        nxt.status, self._current, self._t0 = "running", nxt, time.perf_counter()
        nxt.started_at = time.time()
        self._say(
            f"warming the compiler cache for {self._name(nxt)} in the background "
            "(lowest CPU priority, paused while a worker measures)"
        )

    def _pause(self, pause: bool) -> None:
        if pause and self._paused_at is None:
            pause_group(self._proc, True)
            self._paused_at = time.time()
        elif not pause and self._paused_at is not None:
            pause_group(self._proc, False)
            self._end_pause()

    def _end_pause(self) -> None:
        """Book the pause that ends now."""
        if self._paused_at is None or self._current is None:
            return
        now = time.time()
        self._current.paused_s += now - self._paused_at
        self._current.pauses.append((self._paused_at, now))
        self._paused_at = None

    def _reap(self) -> None:
        if self._proc is None:
            return
        rc = self._proc.poll()
        if rc is None:
            return
        target = self._current
        assert target is not None
        self._end_pause()  # it cannot end while stopped; keep the books right anyway
        target.ended_at = time.time()
        target.returncode = rc
        target.wall_s = time.perf_counter() - self._t0
        target.status = "ok" if rc == 0 else "failed"
        if rc == 0:
            self._say(
                f"compiler cache for {self._name(target)} filled in {target.wall_s:.0f} s "
                f"({target.paused_s:.0f} s of it paused)"
            )
        else:
            self._say(
                f"the compiler-cache warm-up of {self._name(target)} failed (exit code {rc}; "
                f"see {self._where / 'stderr.log'}); its first timing run compiles instead"
            )
        self._proc, self._current = None, None

    def close(self) -> None:
        """Stop a warm-up still running (the run ends or stops)."""
        if self._proc is None:
            return
        self._end_pause()
        stop_group(self._proc, self._where)
        assert self._current is not None
        self._current.status = "stopped"
        self._current.wall_s = time.perf_counter() - self._t0
        self._current.ended_at = time.time()
        self._proc, self._current = None, None

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
