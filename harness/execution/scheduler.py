"""The run loop's host (:class:`harness.execution.runloop.Host`): who may start beside whom,
who may set up together, who may measure, and what happens when a unit ends.

The loop moves processes; this decides for it, from the run's settings, the traced servers'
sessions, the compiler-cache warm-ups and the reports nsys still writes, and hands each
ended unit to the exporter and the records (its progress number included).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from harness.core.progress import Progress
from harness.core.runfolder import Status, Unit
from harness.execution import wallplan
from harness.execution.execute import Outcome
from harness.execution.exporter import Exporter
from harness.execution.launcher import Launcher
from harness.execution.plan import added_round_at
from harness.execution.records import Records
from harness.execution.rounds import MoreRounds
from harness.execution.runloop import Live, RunLoop
from harness.execution.servers import TracedServers
from harness.execution.settings import Settings
from harness.execution.slicing import SlicedRounds
from harness.execution.warmer import CompileWarmer


class Scheduler:
    """Decides for the run loop; implements :class:`harness.execution.runloop.Host`."""

    def __init__(
        self,
        *,
        settings: Settings,
        records: Records,
        traced: TracedServers,
        launcher: Launcher,
        exporter: Exporter,
        progress: Progress,
        say: Callable[[str], None],
    ) -> None:
        self.settings = settings
        self.records = records
        self.traced = traced
        self.launcher = launcher
        self.exporter = exporter
        self.progress = progress
        self.say = say
        #: The run folder while units run.
        self.run_dir: Path | None = None
        #: The compiler-cache warm-ups running beside the workers (harness.warm_compile).
        self.warmer: CompileWarmer | None = None
        self._waited: set[Unit] = set()
        self._waited_reports: set[Unit] = set()
        self._live: list[Live] = []
        #: Each unit's progress number (1-based, in the run's order of units).
        self.numbers: dict[Unit, int] = {}
        #: Sliced timing rounds (harness.timing.slices), once a unit needs them.
        self.rounds: SlicedRounds | None = None
        #: The rounds added where the intervals are wide (harness.timing.max_rounds).
        self.more: MoreRounds | None = None
        #: When the run began (``time.perf_counter``): the budget's clock.
        self.started = time.perf_counter()

    def run(self, units: list[Unit]) -> None:
        """``units`` in order through the run loop (sliced rounds where they apply)."""
        s = self.settings
        turns = self.sliced_rounds() if any(s.sliced(u) for u in units) else None
        h = s.cfg.harness
        RunLoop(self, units, s.overlapping, h.setup_batch, turns, h.profile_beside).run()

    def sliced_rounds(self) -> SlicedRounds:
        """The run's sliced rounds and their turn gate (started on first use)."""
        if self.rounds is None:
            timing = self.settings.cfg.harness.timing
            self.rounds = SlicedRounds(
                timing.slice_s, self.settings.sliced, tick=self.tick, say=self.say
            )
            self.settings.turn_gate = self.rounds.path
        return self.rounds

    def max_rounds(self) -> int:
        """harness.timing.max_rounds as it applies here (None: 8 on a GPU, no added rounds
        on the CPU), never below harness.repeats."""
        s = self.settings
        most = s.cfg.harness.timing.max_rounds
        if most is None:
            most = 8 if s.device == "cuda" else s.cfg.harness.repeats
        return max(most, s.cfg.harness.repeats)

    def round_ended(self, scenario: str, phase: str, queue: list[Unit]) -> tuple[int, list[Unit]]:
        """One more round of ``scenario`` where its intervals are wide (harness.execution.rounds),
        sliced rounds and rounds back to back alike, and where it goes in ``queue``
        (:func:`added_round_at`), numbered for the progress display."""
        at = added_round_at(queue, self.settings.cfg.harness.timing.spread_rounds)
        if self.max_rounds() <= self.settings.cfg.harness.repeats or self.run_dir is None:
            return at, []
        if self.more is None:
            self.more = MoreRounds(
                run_dir=self.run_dir, found=self.settings.found,
                variants=self.settings.variants,
                target=self.settings.cfg.harness.timing.target_half_width,
                planned=self.settings.cfg.harness.repeats, max_rounds=self.max_rounds(),
                fits=self._fits,
            )  # fmt: skip
        added = self.more.after(scenario, phase, queue)
        if added:
            self._number(added, queue[at:])
            target = self.settings.cfg.harness.timing.target_half_width
            got = self.more.decisions[-1].widths
            wide = ", ".join(f"{p} +-{w:.0%}" for p, w in got.items() if w > target)
            names = ", ".join(u.variant for u in added)
            self.say(  # a refused scenario's round may come after another's (rounds.py)
                f"{added[0].scenario}: one more timing round of {names} "
                f"(wider than +-{target:.0%}: {wide})"
            )
        return at, added

    def _fits(
        self, scenario: str, variants: list[str], queue: Sequence[Unit], extra: int = 1
    ) -> tuple[bool, float]:
        """Whether one more round fits harness.timing.budget_s (harness.execution.wallplan):
        the units still queued that this machine runs (none it will skip) and those started
        beside it (the next scenario's set-ups)."""
        assert self.run_dir is not None
        s = self.settings
        costs = wallplan.learn(self.run_dir, s.found)
        elapsed = time.perf_counter() - self.started
        knobs = wallplan.knobs_of_config(s.cfg, gpu=s.device == "cuda")
        budget = s.cfg.harness.timing.budget_s
        started = [x.unit for x in self._live if x.unit.scenario != scenario]
        queued = [u for u in queue if u not in started and not s.skip_reason(u)]
        pending = [*started, *queued]
        return wallplan.fits(
            costs, knobs, elapsed, budget, scenario, variants, pending, extra, s.found
        )

    def _number(self, added: list[Unit], after: list[Unit]) -> None:
        """Progress numbers for added units, placed before the queued units ``after``, which
        move up; the total grows."""
        first = min((self.numbers[u] for u in after if u in self.numbers), default=None)
        if first is None:
            first = max(self.numbers.values(), default=0) + 1
        for u in after:
            if u in self.numbers:
                self.numbers[u] += len(added)
        for i, u in enumerate(added):
            self.numbers[u] = first + i
        self.progress.total += len(added)
        if self.progress.bar is not None:
            self.progress.bar.total = self.progress.total
            self.progress.bar.refresh()

    def close(self) -> None:
        """The turn gate closed, every stopped worker group continued (the added rounds'
        record written)."""
        if self.rounds is not None:
            self.rounds.close()
            self.rounds = None
            self.settings.turn_gate = None

    def launch(self, unit: Unit) -> Live | Outcome:
        assert self.run_dir is not None
        return self.launcher.start(unit, self.run_dir)

    # -- gating -------------------------------------------------------------------------------
    def may_overlap(self, current: Live, unit: Unit) -> bool:
        """``unit`` may start beside ``current`` (tearing down, or setting up in its batch):
        workers of one node, which hold at their gates (a fork server runs its children side
        by side; every rank of a distributed worker holds); a served profile as its traced
        servers allow (:meth:`TracedServers.may_start_beside`)."""
        if self.settings.cfg.dist.multinode:
            return False
        return self.traced.may_start_beside(current, unit)

    def ready(self, unit: Unit) -> bool:
        """A variant whose compiler cache is being filled starts once that has ended."""
        if self.warmer is None or not self.warmer.pending(unit.scenario, unit.variant):
            return True
        self._say_waiting(unit, self._waited, "its compiler-cache warm-up to end")
        return False

    def may_measure(self, unit: Unit) -> bool:
        """A worker warms up once the traced fork servers have started (their imports), a
        timing worker once nsys has written the reports of the scenarios profiled before it
        (either may set up meanwhile)."""
        if self.traced.starting():
            return False
        # a profiler's run (nsys or Kineto) may measure beside nsys writing reports: its probe
        # effect is taken as the nsys one is
        if unit.is_profile or unit.is_kineto or not self.exporter.writing():
            return True
        self._say_waiting(unit, self._waited_reports, "nsys to write the last scenario's reports")
        return False

    def _say_waiting(self, unit: Unit, said: set[Unit], what: str) -> None:
        """Say once per unit (``said``) what it waits for."""
        if unit not in said:
            said.add(unit)
            self.say(f"{unit.label} waits for {what}")

    def sets_up_together(self, unit: Unit) -> bool:
        """Single-process workers of a scenario whose set-up neither measures nor leaves
        threads working (``Scenario.setup_alone``). Never a distributed one: both shipped
        ones measure in their set-ups (ddp_bucketing's bandwidth probe and bucket sweep,
        pipeline_imbalance's block costs, which choose the balanced cut)."""
        found = self.settings.found[unit.scenario]
        return (
            found.world_size <= 1 and not found.setup_alone and not self.settings.cfg.dist.multinode
        )

    def tick(self, live: list[Live], measuring: bool) -> None:
        self._live = live
        if self.warmer is not None:
            self.warmer.tick(measuring)
        if live:
            now = time.perf_counter()
            item = live[-1]
            state = item.state.value if item.state is not None else None
            self.progress.running(item.label, state, item.stage, now - item.since)

    # -- ends ---------------------------------------------------------------------------------
    def ended(self, unit: Unit, outcome: Outcome, live: Live | None) -> list[Unit]:
        """Record a unit that ended (tables rebuilt) and give it its progress number, skipped
        ones too; units to run again (a profile whose early exit lost its GPU activity)."""
        run_dir = self.run_dir
        assert run_dir is not None
        outcome = self.exporter.settle(unit, run_dir, outcome, defer_export=True)
        if live is not None and self.launcher.relaunch(unit, outcome, run_dir):
            return [unit]
        if live is not None and self.exporter.to_check(unit, outcome):
            outcome, again = self.exporter.check_capture(unit, outcome, run_dir, self._live)
            if again:
                return again
        self.records.record(run_dir, unit, outcome)
        self.records.write_tables(run_dir)
        status = Status(outcome.status)
        said = "ok (nsys finishes its report)" if status == Status.FINALIZING else status.value
        why = outcome.error if status == Status.SKIPPED else ""
        self.progress.finished(
            unit.label, said, outcome.wall_s, live is not None, why=why,
            number=self.numbers.get(unit),
        )  # fmt: skip
        return []

    def scenario_done(self, scenario: str) -> None:
        """The scenario's last worker has ended: its traced fork server is closed (nsys writes
        its reports in the background, beside the next scenario's profiled workers). Every
        export runs once the last worker of the run has ended."""
        self.traced.retire(scenario)
