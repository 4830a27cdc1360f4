"""The run loop: one worker measures at a time; the next ones start while nothing measures.

A unit's worker goes through import, set-up, (held), warm-up, window, tear-down and says where
it is in ``.progress.json`` (:class:`harness.core.runfolder.WorkerState`). Once the current worker's
measured window is over (a profiled worker then waits seconds in cudaProfilerStop while nsys
takes its capture: docs/measurement.md), the next ones are started: up to ``batch`` workers of one
scenario at once (``harness.setup_batch``), so that their imports and set-ups run beside that
tear-down and beside each other. Each then waits at its gate, before its warm-up, until every
other live worker has exited or waits at its own gate (and the host lets it measure: no report
being written before a timing worker). So no warm-up or window ever runs beside another
worker's set-up, warm-up or window; only nsys writing an earlier report in the background may
(``nsys.background_finalize``), and, on a GPU, nsys taking a profiled worker's capture while
that worker waits in cudaProfilerStop (``harness.overlap_capture_stop``). No worker starts
while one measures.

A sliced timing round (:class:`Turns`, harness.timing.slices) is the exception by design: its
processes, one per variant, are all launched, set up and held together, then take turns in
short slices while the others are stopped (:mod:`harness.execution.slicing`); no slice runs
beside another, and nothing else runs beside the round.

The loop itself knows processes and states, not what a unit means: launching, recording and
exporting are the host's (:class:`Host`, implemented by
:class:`harness.execution.scheduler.Scheduler`).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from harness.core import runfolder as rf
from harness.core.hostmem import OomWatch
from harness.core.runfolder import Status, Unit, WorkerState
from harness.execution.execute import Outcome, ended, stop_group, timed_out

#: How often the loop looks at its workers when nothing happened (seconds); more often
#: while one sets up and nothing measures, so a worker reaching its gate waits little.
POLL_S = 0.05
POLL_SETUP_S = 0.01


@dataclass
class Live:
    """One running worker process."""

    unit: Unit
    proc: Any
    out_dir: Path
    timeout_s: float
    t0: float = field(default_factory=time.perf_counter)
    """When it was launched (``time.perf_counter``)."""
    launched_at: float = field(default_factory=time.time)
    """When it was launched (epoch seconds, for status.json)."""
    gated: bool = True
    """It waits at its gate before the warm-up; False: it measures as soon as it can."""
    overlaps: bool = True
    """It may start beside another worker's tear-down, and the next one beside its own (it
    holds at its gate; False: a multi-node torchrun worker, which has no gate)."""
    memory_cap_gb: float | None = None
    oom_watch: OomWatch = field(default_factory=OomWatch.start)
    """The host's memory and OOM-kill count at its launch: a SIGKILL while the count rose is
    the kernel's OOM killer (status ``oom``)."""
    detach_when: Callable[[Any], bool] | None = None
    """For a profiled worker under nsys: let go once the worker itself has exited."""
    quiet_stop: bool = False
    """Once past its window it only waits (a profiled worker in cudaProfilerStop while nsys
    takes its capture, then leaving): see :attr:`quiet_past_window`."""
    opened: bool = False
    """Its gate is open (or it has none): from here until its window ends it is measuring."""
    state: WorkerState | None = None
    stage: str | None = None
    since: float = 0.0
    """When the current state and stage were first seen (``time.perf_counter``)."""
    held_s: float = 0.0
    """Seconds it waited at its gate (for the workers measuring before it): not counted
    against ``timeout_s``."""
    group: Hashable | None = None
    """The sliced round it belongs to (:class:`Turns`); None: it measures alone, back to back."""
    channel: Any = None
    """A sliced round's worker: its turn gate (:class:`harness.execution.gate.Channel`), once
    it has connected."""

    def __post_init__(self) -> None:
        self.opened = not self.gated
        self.since = self.t0

    @property
    def label(self) -> str:
        return self.unit.label

    def refresh(self) -> None:
        """Read the worker's progress file."""
        data = rf.read_progress(self.out_dir) or {}
        try:
            state = WorkerState(data["state"]) if data.get("state") else None
        except ValueError:
            state = None
        stage = data.get("stage") if isinstance(data.get("stage"), str) else None
        if (state, stage) != (self.state, self.stage):
            self.state, self.stage, self.since = state, stage, time.perf_counter()

    @property
    def measuring(self) -> bool:
        """Warming up or inside its window, as far as the loop can tell: from the gate's
        opening (or the launch, without a gate) until it says its window is over."""
        return self.opened and not (self.state is not None and self.state.past_window)

    @property
    def past_window(self) -> bool:
        return self.state is not None and self.state.past_window

    @property
    def quiet_past_window(self) -> bool:
        """Past its window (stopping or tearing down) and only waiting there: the next worker
        may set up, warm up and measure beside it."""
        return self.quiet_stop and self.past_window

    def open_gate(self) -> None:
        """Let a worker held before its warm-up go on."""
        self.held_s = self.held_now()
        (self.out_dir / rf.GO).touch()
        self.opened = True

    def open_turns(self) -> None:
        """A sliced round's worker goes on: from here the round's turns drive it."""
        self.held_s = self.held_now()
        self.opened = True

    def held_now(self) -> float:
        """Seconds waited at its gate so far."""
        if not self.opened and self.state == WorkerState.HELD:
            return self.held_s + time.perf_counter() - self.since
        return self.held_s

    def poll(self) -> Outcome | None:
        """How it ended (timed out, exited, or, under nsys, its worker gone while nsys still
        writes the report); None while it runs."""
        rc = self.proc.poll()  # one that has exited ended so, whatever the time
        if rc is None and time.perf_counter() - self.t0 - self.held_now() > self.timeout_s:
            return timed_out(self.proc, self.out_dir, self.t0, self.timeout_s, self.label)
        wall = time.perf_counter() - self.t0
        if rc is not None and getattr(self.proc, "orphaned", False):
            return Outcome(
                Status.FAILED,
                f"{self.label}: its fork server ended or was closed while it ran, so its exit "
                f"code is not known (after {wall:.1f} s; a result.json of it is not used)",
                rc,
                wall,
            )
        if rc is not None:
            outcome = ended(rc, wall, self.out_dir, self.label, self.memory_cap_gb, self.oom_watch)
            note = getattr(self.proc, "note", "")  # a rank of a forked unit failed first
            if note and outcome.error:
                outcome.error = f"{self.label}: {note}. {outcome.error}"
            return outcome
        if self.detach_when is not None and self.detach_when(self.proc):
            return Outcome(Status.FINALIZING, "", None, wall, finishing=self.proc)
        return None

    def stop(self) -> None:
        """Kill its process group (a stop signal, or the loop failing)."""
        stop_group(self.proc, self.out_dir)


class Host(Protocol):
    """What the loop asks of the runner."""

    def launch(self, unit: Unit) -> Live | Outcome:
        """Start the unit's worker, or say why it does not run (an outcome, e.g. skipped)."""

    def may_overlap(self, current: Live, unit: Unit) -> bool:
        """Whether ``unit`` may start beside ``current`` (tearing down, or setting up in the
        batch ``unit`` would join)."""

    def ended(self, unit: Unit, outcome: Outcome, live: Live | None) -> list[Unit]:
        """Record how a unit ended; units to run again next (normally none)."""

    def scenario_done(self, scenario: str) -> None:
        """The scenario's last worker has ended: its exports."""

    def ready(self, unit: Unit) -> bool:
        """Whether ``unit`` may be launched now (False while its compiler cache is filled)."""

    def may_measure(self, unit: Unit) -> bool:
        """Whether ``unit``'s worker, set up and held, may warm up now (False while nsys
        writes a report that a timing worker must not measure beside)."""

    def sets_up_together(self, unit: Unit) -> bool:
        """Whether ``unit``'s worker may set up beside other workers setting up."""

    def tick(self, live: list[Live], measuring: bool) -> None:
        """Once per loop turn: progress display, background work paused while ``measuring``."""

    def round_ended(self, scenario: str, phase: str, queue: list[Unit]) -> tuple[int, list[Unit]]:
        """Every unit of ``scenario``'s timing round ``phase`` has ended, sliced or back to
        back: the units of one more round (the rounds where the noise is), or none, and where
        in ``queue`` they go."""


class Turns(Protocol):
    """Sliced rounds (harness.timing.slices): which units are the live processes of one
    round, and the round's turns once they are all set up and held."""

    def group_of(self, unit: Unit) -> Hashable | None:
        """The sliced round ``unit`` belongs to; None: it measures alone, back to back."""

    def attach(self, live: list[Live]) -> None:
        """Give the workers that connected to the turn gate their channel (and stop each
        one's process group until its turn)."""

    def run_group(self, members: list[Live]) -> None:
        """Run the round's turns: warm-ups, slices, ends (returns once every worker has been
        told to end, or has failed)."""


class RunLoop:
    """Runs ``units`` in order through ``host``, overlapping tear-downs with start-ups."""

    def __init__(
        self,
        host: Host,
        units: Iterable[Unit],
        overlap: bool,
        batch: int = 1,
        turns: Turns | None = None,
        beside: int = 1,
    ) -> None:
        self.host = host
        self.queue: deque[Unit] = deque(units)
        self.live: list[Live] = []
        self.overlap = overlap
        self.batch = batch
        """Workers that may set up at once (``harness.setup_batch``)."""
        self.turns = turns
        """Sliced rounds; None: every worker measures alone."""
        self.beside = beside
        """Workers past their windows that a launch may join where each only waits there
        (``Live.quiet_past_window``; ``harness.profile_beside``: the host's lanes of traced
        sessions bound how many it forks beside them); otherwise one."""

    def group_of(self, unit: Unit) -> Hashable | None:
        return self.turns.group_of(unit) if self.turns is not None else None

    def run(self) -> None:
        """Until every unit has ended; on any exception (a stop signal) the live workers'
        process groups are killed before it propagates."""
        try:
            while self.queue or self.live:
                moved = self._reap()
                moved |= self._launch_next()
                for item in self.live:
                    item.refresh()
                moved |= self._open_gate()
                measuring = any(item.measuring for item in self.live)
                self.host.tick(self.live, measuring)
                if not moved:
                    time.sleep(self._pause_s(measuring))
        except BaseException:
            for item in self.live:
                item.stop()
            self.live.clear()
            raise

    def _pause_s(self, measuring: bool) -> float:
        setting_up = any(x.state in (WorkerState.SETUP, WorkerState.HELD) for x in self.live)
        return POLL_SETUP_S if setting_up and not measuring else POLL_S

    def _reap(self) -> bool:
        """Record the workers that ended; a scenario's exports after its last one."""
        moved = False
        for item in list(self.live):
            outcome = item.poll()
            if outcome is None:
                continue
            moved = True
            outcome.launched_at = item.launched_at
            outcome.ended_at = time.time()
            outcome.pid = getattr(item.proc, "pid", None)
            self.live.remove(item)
            self.queue.extendleft(reversed(self.host.ended(item.unit, outcome, item)))
            self._round_after(item)
            self._after(item.unit.scenario)
        return moved

    def _round_after(self, item: Live) -> None:
        """Once the last unit of a timing round has ended (sliced or back to back), the host
        may add a round, where it says."""
        unit = item.unit
        if not rf.is_timing(unit.phase):
            return
        key = (unit.scenario, unit.phase)
        if any((x.unit.scenario, x.unit.phase) == key for x in self.live) or any(
            (u.scenario, u.phase) == key for u in self.queue
        ):
            return
        at, added = self.host.round_ended(unit.scenario, unit.phase, list(self.queue))
        for i, u in enumerate(added):
            self.queue.insert(at + i, u)

    def _after(self, scenario: str) -> None:
        """Exports once nothing of ``scenario`` is left to run."""
        left = any(u.scenario == scenario for u in self.queue)
        if not left and not any(x.unit.scenario == scenario for x in self.live):
            self.host.scenario_done(scenario)

    def _launch_next(self) -> bool:
        if not self.queue or not self.host.ready(self.queue[0]):
            return False
        unit = self.queue[0]
        if self.live and not self._may_join(unit):
            return False
        self.queue.popleft()
        item = self.host.launch(unit)
        if isinstance(item, Outcome):  # not run here (skipped): recorded at once
            self.queue.extendleft(reversed(self.host.ended(unit, item, None)))
            self._after(unit.scenario)
            return True
        item.group = self.group_of(unit)
        self.live.append(item)
        return True

    def _may_join(self, unit: Unit) -> bool:
        """Whether ``unit`` may start beside the live workers: with ``overlap``, while none
        of them measures and at most one is past its window (``beside`` where all of them
        only wait past their windows: a profile's set-up then runs beside the last ones'
        captures, not after them), and, where some have not reached
        their gate yet, as one more of their batch (same scenario, each free to set up beside
        the others, none held yet: a batch is launched in one go and then measured in turn)."""
        if not self.overlap:
            return False
        for item in self.live:
            item.refresh()
        if any(not x.overlaps or (x.opened and not x.past_window) for x in self.live):
            return False
        group = self.group_of(unit)
        if group is not None:
            return self._may_join_round(unit, group)
        past = [x for x in self.live if x.opened]  # past their windows
        if len(past) > (self.beside if all(x.quiet_past_window for x in past) else 1):
            return False
        starting = [x for x in self.live if not x.opened]
        if any(x.group is not None for x in starting):
            return False  # a sliced round sets up its own processes only
        if starting:
            together = [unit] + [x.unit for x in starting]
            if (
                len(starting) >= self.batch
                or any(x.state == WorkerState.HELD for x in starting)
                or any(u.scenario != unit.scenario for u in together)
                or not all(self.host.sets_up_together(u) for u in together)
            ):
                return False
        return all(self.host.may_overlap(x, unit) for x in self.live)

    def _may_join_round(self, unit: Unit, group: Hashable) -> bool:
        """``unit`` may start beside the live workers as one more process of its sliced round:
        every worker not yet measuring belongs to that round, fewer than ``batch`` of them are
        still setting up (a scenario that sets up alone: none), and the host lets it."""
        starting = [x for x in self.live if not x.opened]
        if any(x.group != group for x in starting):
            return False
        setting_up = [x for x in starting if x.state != WorkerState.HELD]
        alone = not self.host.sets_up_together(unit)
        if len(setting_up) >= self.batch or (alone and setting_up):
            return False
        return all(self.host.may_overlap(x, unit) for x in self.live)

    def _open_round(self, item: Live) -> bool:
        """A sliced round's turns start once every process of the round is live and held at
        its turn gate (none left to launch), and every other worker has exited or only waits
        past its window."""
        assert self.turns is not None
        group = item.group
        if any(self.group_of(u) == group for u in self.queue):
            return False  # not all launched yet
        members = [x for x in self.live if x.group == group and not x.opened]
        if not all(x.state == WorkerState.HELD and x.channel is not None for x in members):
            return False
        others = [x for x in self.live if x.group != group or x.opened]
        if not all(x.quiet_past_window for x in others):
            return False
        if not self.host.may_measure(item.unit):
            return False
        self.host.tick(self.live, True)  # background work pauses before the warm-ups start
        for x in members:
            x.open_turns()
        self.turns.run_group(members)
        return True

    def _open_gate(self) -> bool:
        """The oldest worker held at its gate goes on once every other one has exited, waits
        at its own gate, or only waits past its window (``Live.quiet_past_window``)."""
        waiting = [x for x in self.live if not x.opened]
        if self.turns is not None and waiting:
            self.turns.attach(waiting)
        if not waiting or waiting[0].state != WorkerState.HELD:
            return False  # the oldest one first; nothing measures beside a set-up
        item = waiting[0]
        if item.group is not None:
            return self._open_round(item)
        # Only beside a worker of the same scenario: the exit of a scenario's last worker
        # starts its exports, which nothing may measure beside.
        others = [x for x in self.live if x is not item]
        if not all(
            x.state == WorkerState.HELD
            if not x.opened
            else x.quiet_past_window and x.unit.scenario == item.unit.scenario
            for x in others
        ):
            return False
        if not self.host.may_measure(item.unit):
            return False
        self.host.tick(self.live, True)  # background work pauses before the warm-up starts
        item.open_gate()
        return True
