"""Replay a finished run's profiled workers under the run loop's launch rules, on a clock of its
own: ``python -m scripts.replay_lanes RUN_DIR``.

Each profiled unit keeps its recorded durations (timings.csv: launch to set-up end, warm-up and
window, cudaProfilerStop, the rest to its exit) and goes through the real
:class:`harness.execution.runloop.RunLoop` and :meth:`TracedServers.may_start_beside` (sessions
of :class:`ProfileServers` around stand-in servers), so only the rule differs between rows. The
span is the union of the workers' lifetimes, launch to exit.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pandas as pd

from harness.core.runfolder import Status, Unit, WorkerState
from harness.execution import runloop
from harness.execution.execute import Outcome
from harness.execution.profiling import ProfileServers
from harness.execution.runloop import Live, RunLoop
from harness.execution.servers import TracedServers

S = WorkerState


@dataclass
class Work:
    """A profiled unit's durations (seconds): set-up (launch to held), warm-up and window,
    cudaProfilerStop, then to its exit."""

    unit: Unit
    setup: float
    measure: float
    stop: float
    rest: float
    times: dict[str, float] = field(default_factory=dict)
    """launch, go (gate opened), exit: on the replay's clock."""

    def state(self, t: float) -> WorkerState | None:
        go = self.times.get("go")
        if go is None:
            return S.SETUP if t < self.times["launch"] + self.setup else S.HELD
        marks = [(self.measure, S.WINDOW), (self.stop, S.STOPPING), (self.rest, S.TEARDOWN)]
        for length, state in marks:
            go += length
            if t < go:
                return state
        return None


class Clock:
    """``time`` for the run loop: sleeping moves it on."""

    now = 0.0

    def perf_counter(self) -> float:
        return self.now

    time = perf_counter

    def sleep(self, s: float) -> None:
        self.now += s


class _Live(Live):
    def refresh(self) -> None:
        state = self.proc.state(runloop.time.perf_counter())
        if state is not None and state != self.state:
            self.state, self.since = state, runloop.time.perf_counter()

    def open_gate(self) -> None:
        self.held_s = self.held_now()
        self.proc.times["go"] = runloop.time.perf_counter()
        self.opened = True

    def poll(self) -> Outcome | None:
        if self.proc.state(runloop.time.perf_counter()) is not None:
            return None
        self.proc.times["exit"] = runloop.time.perf_counter()
        return Outcome(Status.OK, "", 0, 0.0)


class Host:
    """The run loop's host for the replay: forks from the real sessions' choice and records
    every fork from a session whose worker had not returned from cudaProfilerStop."""

    def __init__(self, work: list[Work], lanes: int, alone: set[str], run_dir: Path) -> None:
        settings = SimpleNamespace(server_mode=lambda name: True)
        self.traced = TracedServers(settings, print, None)  # type: ignore[arg-type]
        pool = ProfileServers(lambda b, log: SimpleNamespace(close=lambda **k: 0, alive=False),
                              lambda u: run_dir / u.variant, run_dir, 60.0, lanes)  # fmt: skip
        self.traced.pool = pool
        for name in dict.fromkeys(w.unit.scenario for w in work):
            pool.start(name, min(lanes, sum(w.unit.scenario == name for w in work)))
        pool.ready()
        self.work = {w.unit: w for w in work}
        self.alone, self.live, self.unsafe = alone, {}, []  # type: ignore[var-annotated]

    def launch(self, unit: Unit) -> Live:
        pool = self.traced.pool
        assert pool is not None
        session, _ = pool.server(unit.scenario)
        assert session is not None
        for u in session.running:  # a sibling inside (or before the end of) its capture
            if self.live[u].state != S.TEARDOWN:
                self.unsafe.append((unit, u))
        pool.forked(session, unit)
        self.traced.forked_from[unit] = session
        w = self.work[unit]
        w.times["launch"] = now = runloop.time.perf_counter()
        self.live[unit] = item = _Live(unit, w, Path(), 1e9, t0=now, launched_at=now,
                                       oom_watch=None, quiet_stop=True)  # type: ignore[arg-type]  # fmt: skip
        return item

    def may_overlap(self, current: Live, unit: Unit) -> bool:
        return self.traced.may_start_beside(current, unit)

    def ended(self, unit: Unit, outcome: Outcome, live: Live | None) -> list[Unit]:
        self.traced.ended(unit, ok=True)
        return []

    def scenario_done(self, scenario: str) -> None:
        return None

    def ready(self, unit: Unit) -> bool:
        return True

    may_measure = ready

    def sets_up_together(self, unit: Unit) -> bool:
        return unit.scenario not in self.alone

    def tick(self, live: list[Live], measuring: bool) -> None:
        return None

    def round_ended(self, scenario: str, phase: str, queue: list[Unit]) -> tuple[int, list[Unit]]:
        return 0, []


@contextlib.contextmanager
def clock() -> Iterator[Clock]:
    """The run loop on a clock of its own for the block."""
    real, runloop.time = runloop.time, Clock()  # type: ignore[assignment]
    try:
        yield runloop.time  # type: ignore[misc]
    finally:
        runloop.time = real


def replay(work: list[Work], lanes: int, beside: int, batch: int = 4,
           alone: frozenset[str] = frozenset()) -> Host:  # fmt: skip
    """Run ``work`` in order with ``lanes`` sessions per scenario and launches beside up to
    ``beside`` workers past their windows; the host (``work``'s times filled in)."""
    with tempfile.TemporaryDirectory() as tmp, clock():
        host = Host(work, lanes, set(alone), Path(tmp))
        RunLoop(host, [w.unit for w in work], True, batch, beside=beside).run()
        assert host.traced.pool is not None
        host.traced.pool.kill()
    return host


def span(work: list[Work]) -> float:
    """Seconds any of the workers was alive (the union of their launch-to-exit spans)."""
    total, end = 0.0, float("-inf")
    for a, b in sorted((w.times["launch"], w.times["exit"]) for w in work):
        total += max(0.0, b - max(a, end))
        end = max(end, b)
    return total


def recorded(run_dir: Path) -> list[Work]:
    """The run's profiled units that ended well, in their launch order, with their durations."""
    t = pd.read_csv(Path(run_dir) / "timings.csv")
    t = t[(t["phase"] == "profile") & (t["status"] == "ok")].sort_values("launched_at")
    out = []
    for r in t.itertuples():
        tail = r.ended_at - r.window_ended_at
        stop = min(r.capture_stop_s, tail)
        out.append(Work(Unit(r.scenario, r.variant, r.phase), r.setup_ended_at - r.launched_at,
                        r.window_ended_at - r.warmup_started_at, stop, tail - stop))  # fmt: skip
    return out


def main(argv: list[str]) -> int:
    from harness.core.config import discover_scenarios

    alone = frozenset(n for n, s in discover_scenarios().items() if s.setup_alone)
    for lanes, beside in [(2, 1), (2, 2), (3, 1), (3, 2), (4, 1), (4, 3)]:
        work = recorded(Path(argv[0]))
        host = replay(work, lanes, beside, alone=alone)
        assert not host.unsafe, host.unsafe
        print(lanes, beside, round(span(work), 1), round(sum(w.measure for w in work), 1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
