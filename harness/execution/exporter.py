"""A profiled worker's report, from its end to a checked SQLite export: nsys finishing it in the
background, the export queue (run after a scenario's last worker, so no export competes with a
measurement), the exports themselves, and the check that the first worker leaving early after
its capture (``nsys.exit_after_capture``) kept its GPU activity.
"""

from __future__ import annotations

import subprocess
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import replace
from pathlib import Path

from harness.core import nsys as nsys_mod
from harness.core import runfolder as rf
from harness.core.progress import Progress
from harness.core.runfolder import Status, Unit
from harness.execution.execute import (
    Outcome,
    crashed_after_report,
    export_report,
    finish,
    kill_group,
    tail,
)
from harness.execution.plan import node_outcome
from harness.execution.profiling import ReportHandle, check_owner
from harness.execution.records import Records
from harness.execution.runloop import Live
from harness.execution.servers import TracedServers
from harness.execution.settings import Settings


def has_gpu_activity(sqlite: Path) -> bool:
    """Whether an export holds kernels, copies or graph replays (True when it cannot be read:
    the export's own check has said what is wrong with it)."""
    from analysis.detect.view import has_gpu
    from analysis.trace import TraceError, open_trace

    try:
        with open_trace(sqlite) as trace:
            return has_gpu(trace)
    except TraceError:
        return True


class Exporter:
    """The run's profiled reports until each is exported and checked."""

    def __init__(
        self, settings: Settings, records: Records, traced: TracedServers, progress: Progress
    ) -> None:
        self.settings = settings
        self.records = records
        self.traced = traced
        self.progress = progress
        #: Profiled units whose .nsys-rep waits for ``nsys export`` (run after the last worker).
        self.pending: list[Unit] = []
        #: Profiled units whose nsys still writes its report (nsys.background_finalize).
        self.finishing: dict[Unit, Outcome] = {}
        #: Units whose report a traced fork server wrote (their export is checked by pid).
        self._served_units: set[Unit] = set()
        #: Whether the first profiled worker that left early has been checked.
        self._capture_checked = False

    def settle(self, unit: Unit, run_dir: Path, outcome: Outcome, defer_export: bool) -> Outcome:
        """A worker's outcome once it has ended: a profile's report is exported, queued
        (``defer_export``), or left to nsys to finish in the background (:attr:`finishing`)."""
        if not unit.is_profile:
            return node_outcome(self.settings.cfg, outcome, unit.label)
        served, handle = self.traced.ended(unit, outcome.status == Status.OK)
        if served:
            if handle is None:
                return outcome
            outcome = replace(outcome, status=Status.FINALIZING, finishing=handle)
        if outcome.finishing is not None:  # nsys writes the report while the next one runs
            self.finishing[unit] = outcome
            self.pending.append(unit)
            return outcome
        outcome = self.profile_outcome(unit, run_dir, outcome)
        base = self.settings.report_base(unit, run_dir)
        if outcome.status != Status.OK:
            return outcome
        if defer_export and base.with_suffix(rf.REPORT_SUFFIX).is_file():
            self.pending.append(unit)
            return outcome
        return self.export(unit, base, unit.dir(run_dir), outcome)

    def profile_outcome(self, unit: Unit, run_dir: Path, outcome: Outcome) -> Outcome:
        """How a profiled worker ended, once nsys is done with it: a crash after its result and
        report still counts as ok, a node without rank 0 needs no result.json."""
        base = self.settings.report_base(unit, run_dir)
        outcome = crashed_after_report(outcome, unit.dir(run_dir), base, unit.label)
        return node_outcome(self.settings.cfg, outcome, unit.label)

    def queue_unexported(self, unit: Unit, run_dir: Path) -> None:
        """Queue a finished profile whose report was never exported (the run stopped before)."""
        base = self.settings.report_base(unit, run_dir)
        if (
            unit.is_profile
            and base.with_suffix(rf.REPORT_SUFFIX).is_file()
            and not base.with_suffix(rf.SQLITE_SUFFIX).is_file()
        ):
            self.pending.append(unit)

    # -- reports nsys writes in the background --------------------------------------------------
    def finish_reports(self, run_dir: Path) -> None:
        """Wait for every nsys still writing a report in the background and record how it
        ended; a failed one leaves the export queue."""
        while self.finishing:
            unit, outcome = next(iter(self.finishing.items()))
            # left in self.finishing while waited for, so a stop signal meanwhile kills it
            if isinstance(outcome.finishing, ReportHandle):
                done = self._served_report(unit, outcome)
            else:
                timeout_s = self.settings.cfg.harness.timeout_s
                done = finish(outcome, unit.dir(run_dir), timeout_s, unit.label)
            del self.finishing[unit]
            done = self.profile_outcome(unit, run_dir, done)
            self.records.record(run_dir, unit, done)
            if done.status != Status.OK and unit in self.pending:
                self.pending.remove(unit)

    def _served_report(self, unit: Unit, outcome: Outcome) -> Outcome:
        """Wait for a served worker's report: its session ends, nsys writes the reports and
        the unit's own is moved into its profile folder."""
        handle = outcome.finishing
        assert isinstance(handle, ReportHandle)
        timeout_s = self.settings.cfg.harness.timeout_s
        t0 = time.perf_counter()
        try:
            rc = handle.wait(timeout_s)
        except subprocess.TimeoutExpired:
            rc, handle.why = 1, f"nsys still wrote its reports after {timeout_s:g} s"
        done = replace(outcome, status=Status.OK, finishing=None)
        done.finalize_s = time.perf_counter() - t0
        if rc == 0:
            self._served_units.add(unit)
            return done
        run_dir = handle.session.base.parents[2]
        qdstrm = self.settings.report_base(unit, run_dir).with_suffix(rf.QDSTRM_SUFFIX)
        nsys = self.settings.nsys
        if qdstrm.is_file() and nsys is not None:
            why = nsys_mod.qdstrm_message(nsys, qdstrm, tail(handle.session.log))
        else:
            why = f"no report from its scenario's traced fork server: {handle.why}"
        return replace(
            done,
            status=Status.EVIDENCE_FAILED,
            error=f"{unit.label}: {why} (nsys's output: {handle.session.log})",
        )

    def writing(self) -> bool:
        """Whether nsys still writes a report in the background (a closed session's, or a
        profiled worker's whose nsys outlived it)."""
        if self.traced.writing():
            return True
        return any(
            o.finishing.poll() is None
            for o in self.finishing.values()
            if not isinstance(o.finishing, ReportHandle)
        )

    def kill(self) -> None:
        """Kill any nsys still writing a report (only left when the run is interrupted: an
        exported report is waited for first)."""
        for outcome in self.finishing.values():
            if not isinstance(outcome.finishing, ReportHandle):
                kill_group(outcome.finishing, grace_s=30.0)
        self.finishing.clear()

    # -- exports -----------------------------------------------------------------------------
    def export(self, unit: Unit, base: Path, out_dir: Path, outcome: Outcome) -> Outcome:
        """Export ``base``.nsys-rep to SQLite and check it; records how long that took. A
        report a traced fork server wrote must hold the measured window of this unit's own
        worker (its pid)."""
        nsys = self.settings.nsys
        assert nsys is not None
        timeout_s = self.settings.cfg.nsys.export_timeout_s
        done = export_report(nsys, unit.label, base, outcome, timeout_s)
        if done.status != Status.OK or not base.with_suffix(rf.SQLITE_SUFFIX).is_file():
            return done
        if unit in self._served_units:
            problem = check_owner(base.with_suffix(rf.SQLITE_SUFFIX), outcome.pid)
            if problem:
                return replace(
                    done, status=Status.EVIDENCE_FAILED, error=f"{unit.label}: {problem}"
                )
        return done

    def run_exports(self, run_dir: Path) -> None:
        """Export every queued report, ``harness.export_workers`` at once. This runs after a
        scenario's last worker so that no export competes with a measurement for CPU or disk."""
        self.finish_reports(run_dir)
        pending, self.pending = self.pending, []
        if not pending:
            return
        workers = min(self.settings.cfg.harness.export_workers, len(pending))
        self.records.say(f"exporting {len(pending)} nsys reports to SQLite ({workers} at a time)")
        self.progress.activity(f"exporting {len(pending)} nsys reports")

        def export(unit: Unit) -> Outcome:
            status = rf.read_status(unit.dir(run_dir)) or {}
            known = {k: status.get(k) for k in ("launched_at", "ended_at", "finalize_s", "pid")}
            done = Outcome(
                Status.OK, "", status.get("returncode"), float(status.get("wall_s") or 0.0),
                **known,
            )  # fmt: skip
            base = self.settings.report_base(unit, run_dir)
            return self.export(unit, base, unit.dir(run_dir), done)

        t0 = time.perf_counter()
        with ThreadPoolExecutor(workers) as pool:
            futures = {pool.submit(export, unit): unit for unit in pending}
            for fut in as_completed(futures):
                self.records.record(run_dir, futures[fut], fut.result())
        self.records.write_tables(run_dir)
        self.records.say(f"exported {len(pending)} reports in {time.perf_counter() - t0:.1f} s")

    # -- the first early exit under nsys: did nsys keep the GPU activity? ------------------------
    def to_check(self, unit: Unit, outcome: Outcome) -> bool:
        """The first profiled worker that left through os._exit after its capture range."""
        return (
            not self._capture_checked
            and unit.is_profile
            and not isinstance(outcome.finishing, ReportHandle)
            and self.settings.leaves_after_capture()
            and outcome.status in (Status.OK, Status.FINALIZING)
        )

    def check_capture(
        self, unit: Unit, outcome: Outcome, run_dir: Path, live: list[Live]
    ) -> tuple[Outcome, list[Unit]]:
        """Wait for that worker's report and export it now. Without GPU activity in it nsys
        lost what the worker did, so profiled workers exit normally from here on (the ones in
        ``live`` too) and the unit runs again (returned); else its outcome, exported."""
        self._capture_checked = True
        out_dir, base = unit.dir(run_dir), self.settings.report_base(unit, run_dir)
        if outcome.finishing is not None:  # still in self.finishing while waited for
            outcome = finish(outcome, out_dir, self.settings.cfg.harness.timeout_s, unit.label)
            self.finishing.pop(unit, None)
            outcome = self.profile_outcome(unit, run_dir, outcome)
        if unit in self.pending:
            self.pending.remove(unit)
        if outcome.status != Status.OK:
            return outcome, []
        outcome = self.export(unit, base, out_dir, outcome)
        if outcome.status != Status.OK or has_gpu_activity(base.with_suffix(rf.SQLITE_SUFFIX)):
            return outcome, []
        self.settings.exit_after_capture = False
        for item in live:  # a profiled worker started meanwhile was told to leave early
            if item.unit.is_profile:
                (item.out_dir / rf.EXIT_NORMALLY).touch()
        self.records.say(
            f"{unit.label}: its export holds no kernels or copies after the worker left through "
            "os._exit past its capture range, so nsys did not keep the GPU activity. Profiled "
            "workers exit normally for the rest of this run (nsys.exit_after_capture=false); "
            "profiling this variant again."
        )
        return outcome, [unit]
