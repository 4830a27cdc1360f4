"""The run loop's host (:class:`harness.execution.runloop.Host`): who may start beside whom,
who may set up together, who may measure, and what happens when a unit ends.

The loop moves processes; this decides for it, from the run's settings, the traced servers'
sessions, the compiler-cache warm-ups and the reports nsys still writes, and hands each
ended unit to the exporter and the records (its progress number included).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from harness.core.progress import Progress
from harness.core.runfolder import Status, Unit
from harness.execution.execute import Outcome
from harness.execution.exporter import Exporter
from harness.execution.launcher import Launcher
from harness.execution.records import Records
from harness.execution.runloop import Live, RunLoop
from harness.execution.servers import TracedServers
from harness.execution.settings import Settings
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

    def run(self, units: list[Unit]) -> None:
        """``units`` in order through the run loop."""
        s = self.settings
        RunLoop(self, units, s.overlapping, s.cfg.harness.setup_batch).run()

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
