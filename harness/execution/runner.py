"""The parent: runs every selected variant in its own process, profiles it, and keeps tables.

Order per scenario: ``repeats`` unprofiled timing rounds, interleaved across variants (so every
variant sees the same machine state and speedups are side-by-side ratios), then one profiled run
per variant under nsys with its SQLite export. After every unit the run folder's tables are
rebuilt from the files on disk, so a later crash, timeout or stop signal never loses finished
work.

:class:`Suite` composes objects with one job each: :mod:`harness.execution.settings` (the run's
settings as they apply on this machine, the workers' specs), :mod:`harness.execution.records`
(run folder, manifest, state, status files, tables), :mod:`harness.execution.servers` (the traced
fork servers of profiled workers), :mod:`harness.execution.launcher` (starting workers, the
compiler-cache warm-ups), :mod:`harness.execution.exporter` (reports nsys finishes, SQLite
exports), :mod:`harness.execution.scheduler` (the run loop's host: who sets up and who measures).
Below them: :mod:`harness.execution.plan` (units, lock, launch commands),
:mod:`harness.execution.runloop` (the run loop), :mod:`harness.execution.execute` (one worker
process and its outcome), :mod:`harness.execution.warmer`, :mod:`harness.execution.collect`
(tables), :mod:`harness.core.progress` (the bar or the line log), :mod:`harness.core.signals`
(Ctrl-C, SIGTERM, SIGHUP), :mod:`harness.core.runfolder` (the layout).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import DictConfig

from harness.core import runfolder as rf
from harness.core import signals
from harness.core.config import SuiteConfig, diagnosis_dict
from harness.core.progress import Progress
from harness.core.runfolder import (
    ResultWriteError,
    RunState,
    Status,
    Unit,
    WorkerState,
    write_json,
)
from harness.execution import console, leftovers, memcheck
from harness.execution.collect import (
    COLUMNS,
    TIMING_PARTS,
    build_runs_table,
    build_timings_table,
    first_env,
)
from harness.execution.console import print_summary
from harness.execution.execute import (
    Outcome,
    check_export,
    finish,
    kill_group,
    run_process,
    tail,
    worker_has_ended,
)
from harness.execution.exporter import Exporter, has_gpu_activity
from harness.execution.launcher import Launcher
from harness.execution.plan import (
    RunLock,
    RunLockedError,
    distributed_skip,
    lock_name,
    multinode_run_dir,
    node_suffix,
    nproc_per_node,
    torchrun_program,
)
from harness.execution.records import Records
from harness.execution.runloop import POLL_S
from harness.execution.scheduler import Scheduler
from harness.execution.servers import SERVED_RETRY, TracedServers
from harness.execution.settings import (
    NO_GPU_NOTE,
    PRELOAD_ALWAYS,
    PRELOAD_GPU,
    Settings,
    shares_capture_stop,
)

# The names tests and other modules import from here (the runner's public surface).
__all__ = [
    "COLUMNS",
    "NO_GPU_NOTE",
    "PRELOAD_ALWAYS",
    "PRELOAD_GPU",
    "SERVED_RETRY",
    "TIMING_PARTS",
    "Outcome",
    "RunLock",
    "RunLockedError",
    "Suite",
    "Unit",
    "build_runs_table",
    "build_timings_table",
    "check_export",
    "distributed_skip",
    "finish",
    "has_gpu_activity",
    "lock_name",
    "multinode_run_dir",
    "node_suffix",
    "nproc_per_node",
    "print_summary",
    "run_process",
    "shares_capture_stop",
    "torchrun_program",
    "worker_has_ended",
]

_kill_group = kill_group  # the name tests/test_forkserver.py imports
_tail = tail


class Suite:
    """One invocation of ``harness run``: composes the run's parts and runs it start to end."""

    def __init__(self, suite: SuiteConfig, raw: DictConfig) -> None:
        self.settings = Settings(suite, raw)
        memcheck.check(self.settings)  # a size too large for this machine: one line, exit 2
        self.cfg = self.settings.cfg
        self.found = self.settings.found
        self.stops = signals.StopSignals()
        self.progress = Progress(suite.harness.progress)
        self.traced = TracedServers(self.settings, self._say, self.progress)
        self.records = Records(self.settings, self._say, self.traced.retried)
        # The numbered line log gives each skipped unit its line, with its reason.
        self.records.say_skips = not self.progress.lines
        self.launcher = Launcher(self.settings, self.traced, self._say)
        self.exporter = Exporter(self.settings, self.records, self.traced, self.progress)
        self.scheduler = Scheduler(
            settings=self.settings,
            records=self.records,
            traced=self.traced,
            launcher=self.launcher,
            exporter=self.exporter,
            progress=self.progress,
            say=self._say,
        )

    def _say(self, msg: str) -> None:
        self.progress.say(msg)

    @property
    def failures(self) -> list[str]:
        """What failed so far (the records keep them: state.json counts them)."""
        return self.records.failures

    # -- main loop ------------------------------------------------------------------------
    def run(self) -> int:
        """The whole run; the exit code (0, 1 when anything failed, 128 + a stop signal)."""
        with signals.handled() as self.stops:
            try:
                with leftovers.contained(self._say):  # no process, no temp folder outlives it
                    return self._run()
            except KeyboardInterrupt:  # before the run folder exists, or after its tables
                self._say("stopped.")
                return self.stops.exit_code

    def _run(self) -> int:
        t_start = time.perf_counter()
        walls: dict[str, float] = {}
        if not self.settings.gpu.present:
            self._say(NO_GPU_NOTE)
        self.settings.find_nsys(self._say)
        resume = self.records.resume_dir()
        # A resumed run takes the lock of the results folder it was made in.
        lock_dir = resume.resolve().parent if resume else Path(self.cfg.harness.results_dir)
        lock_dir.mkdir(parents=True, exist_ok=True)
        with RunLock(lock_dir, lock_name(self.cfg)):
            run_dir = resume or self.records.new_run_dir()
            manifest = self.records.manifest(run_dir)
            write_json(rf.manifest_path(run_dir), manifest)
            self.records.write_running(run_dir)
            state = self._run_units(run_dir, walls, t_start)
            state, table = self._wind_up(run_dir, manifest, state)
        if table is None:
            self._say(f"results in {run_dir} are incomplete; finished variants' files are intact.")
            return self.stops.exit_code if state == RunState.INTERRUPTED else 1
        print_summary(table, run_dir)
        note = None if self.settings.gpu.present else console.cpu_slower_note(table)
        if note:
            self._say(note)
        if state == RunState.INTERRUPTED:
            self.write_timings(run_dir, walls, time.perf_counter() - t_start)
            return self.stops.exit_code
        return self._after_tables(run_dir, table, walls, t_start)

    def _run_units(self, run_dir: Path, walls: dict[str, float], t_start: float) -> RunState:
        """Every unit in order through the run loop (harness.execution.runloop), each
        scenario's exports after its last worker; how it ended."""
        state = RunState.COMPLETE
        s, exporter, scheduler = self.settings, self.exporter, self.scheduler
        scheduler.run_dir = run_dir
        try:
            units = s.units()
            todo = [u for u in units if not self._keep(u, run_dir)]
            self._say(f"run folder: {run_dir}  ({len(units)} worker runs, size={s.size})")
            if len(todo) < len(units):
                self._say(
                    f"resuming: {len(units) - len(todo)} of {len(units)} worker runs finished "
                    f"before and are reused; running the other {len(todo)}"
                )
            scheduler.numbers = {u: n for n, u in enumerate(units, 1)}
            left = set(todo)
            self.progress.start(len(units), {n for n, u in enumerate(units, 1) if u not in left})
            exporter.run_exports(run_dir)  # reports a resumed run never exported; nothing runs yet
            scheduler.warmer = self.launcher.warmer(todo, run_dir)
            self.traced.start(todo, run_dir)
            if not s.gpu_shared and (s.cfg.harness.overlap or s.cfg.harness.warm_compile):
                self._say(
                    f"GPU compute mode {', '.join(sorted(set(s.gpu.compute_modes)))}: one "
                    "CUDA process at a time, so workers do not overlap and no compiler-cache "
                    "warm-up runs beside them"
                )
            scheduler.run(todo)
            t_exports = time.perf_counter()
            self.traced.close_all()
            exporter.run_exports(run_dir)
            exports_s = time.perf_counter() - t_exports
            t_again = time.perf_counter()
            self._run_unserved(run_dir)
            walls["served_again_s"] = time.perf_counter() - t_again
            walls["exports_s"] = exports_s
            walls["workers_s"] = t_exports - t_start
        except (KeyboardInterrupt, ResultWriteError) as exc:
            state = self._stopped_by(exc)
        finally:
            self.progress.close()
            if scheduler.warmer is not None:
                scheduler.warmer.close()
        if state == RunState.INTERRUPTED:
            self._say(
                f"interrupted: finished variants are kept in {run_dir}; finish the rest with "
                f"harness.resume={run_dir}"
            )
        return state

    def _keep(self, unit: Unit, run_dir: Path) -> bool:
        """On resume, a unit that finished before is kept (an export its profile never got is
        queued)."""
        if not self.records.kept(unit, run_dir):
            return False
        self.exporter.queue_unexported(unit, run_dir)
        return True

    def _run_unserved(self, run_dir: Path) -> None:
        """The profiles whose served attempt failed, each as its own ``nsys profile``, then
        their exports."""
        redo = [u for u in self.traced.failed if rf.unit_status(u.dir(run_dir)) != Status.OK]
        if not redo:
            return
        self._say(f"profiling {len(redo)} variants again, one nsys process each")
        self.scheduler.run(redo)
        self.exporter.run_exports(run_dir)

    def run_unit(self, unit: Unit, run_dir: Path, *, defer_export: bool = False) -> Outcome:
        """Run one worker process on its own and wait for it (its gate opens at once); a good
        profile is exported now, or queued for the exports with ``defer_export``."""
        item = self.launcher.start(unit, run_dir)
        if isinstance(item, Outcome):
            return item
        try:
            while (outcome := item.poll()) is None:
                item.refresh()
                if not item.opened and item.state == WorkerState.HELD:
                    item.open_gate()
                time.sleep(POLL_S)
        except BaseException:
            item.stop()
            raise
        outcome.launched_at, outcome.ended_at = item.launched_at, time.time()
        outcome.pid = getattr(item.proc, "pid", None)
        return self.exporter.settle(unit, run_dir, outcome, defer_export)

    def close(self) -> None:
        """Stop the fork server and a compiler-cache warm-up, if started; kill any nsys still
        writing a report (only left when the run is interrupted: an exported report is waited
        for first)."""
        if self.scheduler.warmer is not None:
            self.scheduler.warmer.close()
        self.scheduler.close()
        self.exporter.kill()
        self.traced.kill()
        self.launcher.close()

    def _wind_up(
        self, run_dir: Path, manifest: dict[str, Any], state: RunState
    ) -> tuple[RunState, pd.DataFrame | None]:
        """Reports still being written, the fork server, the tables and state.json: done even
        when a stop signal arrives meanwhile (only the first one raises)."""
        if self.exporter.finishing:
            self._say(f"waiting for nsys to finish {len(self.exporter.finishing)} reports")
        try:  # an interrupted run still keeps the reports nsys is writing
            self.exporter.finish_reports(run_dir)
        except (KeyboardInterrupt, ResultWriteError) as exc:
            state = self._stopped_by(exc)
        try:
            self.close()
        except KeyboardInterrupt:
            state = RunState.INTERRUPTED
            self.close()
        if state == RunState.COMPLETE and self.failures:
            state = RunState.FAILED
        table: pd.DataFrame | None = None
        self._say(f"writing the tables ({rf.table_path(run_dir, 'runs').name} and the rest)")
        for _ in range(2):  # again after a stop signal cut the first try short
            try:
                table = self.write_tables(run_dir)
                manifest["worker_env"] = first_env(run_dir)
                write_json(rf.manifest_path(run_dir), manifest)
                break
            except KeyboardInterrupt:
                state = RunState.INTERRUPTED
            except ResultWriteError as exc:
                table = None
                if state != RunState.INTERRUPTED:
                    state = RunState.FAILED
                self.records.write_failed(exc)
                break
        if not self.records.write_state(run_dir, state):
            table = None
        return state, table

    def _stopped_by(self, exc: KeyboardInterrupt | ResultWriteError) -> RunState:
        """The run's state after a stop signal (interrupted) or a result file that could not be
        written (failed, and said in the records)."""
        if isinstance(exc, ResultWriteError):
            self.records.write_failed(exc)
            return RunState.FAILED
        return RunState.INTERRUPTED

    def _after_tables(
        self, run_dir: Path, table: pd.DataFrame, walls: dict[str, float], t_start: float
    ) -> int:
        """Diagnosis, timings and the report of a run that was not interrupted."""
        # the workers' timings and this call's wall so far, before the tail: a stop inside the
        # tail (a device's time limit) keeps them, and a resumed call adds its own to calls_s
        self.write_timings(run_dir, walls, time.perf_counter() - t_start, say=False)
        from harness.kernels.step import run_kernels  # Nsight Compute's row (docs/kernels.md)

        # the row's ncu processes (the GPU) run beside the diagnosis and the tools (the CPU,
        # on the exports); the row's tables read the diagnosis's, so they come after both
        t0 = time.perf_counter()
        row = run_kernels(
            run_dir, self.cfg.kernels, say=self._say,
            meanwhile=lambda: self._judge_and_tools(run_dir, table, walls),
        )  # fmt: skip
        walls["kernels_s"] = row.wall_s
        walls["beside_kernels_s"] = time.perf_counter() - t0
        self.write_timings(run_dir, walls, time.perf_counter() - t_start, say=False)
        from harness.report import report_after_run  # never raises; the results are kept

        t0 = time.perf_counter()
        problem = None
        if self.cfg.harness.report:
            self._say("writing the report (report.html, report.md, pictures)")
            problem = report_after_run(run_dir, self._say, self.found)
        walls["report_s"] = time.perf_counter() - t0
        self.write_timings(run_dir, walls, time.perf_counter() - t_start)
        if problem == "interrupted":
            return self.stops.exit_code
        if problem:
            self.failures.append(problem)
        return 1 if self.failures else 0

    def _judge_and_tools(self, run_dir: Path, table: pd.DataFrame, walls: dict[str, float]) -> None:
        """The diagnosis of the exports, then the tools' scores; each step's wall in ``walls``."""
        t0 = time.perf_counter()
        if table["profiled"].any():
            self._say(f"diagnosing {int(table['profiled'].sum())} exports (the detectors)")
            try:
                self.write_diagnosis(run_dir, table)
            except Exception as exc:  # the tables above are safe; say what broke and fail
                self.failures.append(f"diagnosis failed: {type(exc).__name__}: {exc}")
                self._say(f"FAILED diagnosing the exports in {run_dir}: {exc}")
        else:
            console.print_unprofiled(table, self.cfg.nsys.enabled, self.settings.nsys is not None)
        walls["diagnosis_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        self.write_tools(run_dir)
        walls["tools_s"] = time.perf_counter() - t0

    def write_timings(
        self, run_dir: Path, walls: dict[str, float], total_s: float, *, say: bool = True
    ) -> None:
        """timings.csv and wall_time.json (:meth:`Records.write_timings`), with the
        compiler-cache warm-ups' summary."""
        warmer = self.scheduler.warmer
        warm = warmer.summary() if warmer is not None else None
        self.records.write_timings(run_dir, walls, total_s, warm=warm, say=say)

    # -- diagnosis ------------------------------------------------------------------------
    def write_diagnosis(self, run_dir: Path, table: pd.DataFrame) -> None:
        """The judged run's tables (harness.judge.pipeline: diagnosis.csv, findings.csv,
        gpu_work.csv, verdicts.csv, confusion.csv, detector_scores.csv), written once; print
        the verdicts."""
        from harness.judge.pipeline import diagnose_run

        jobs = self.cfg.harness.diagnosis_processes()
        judged = diagnose_run(
            run_dir, self.found, table, thresholds=diagnosis_dict(self.cfg), jobs=jobs
        )
        console.print_diagnosis(
            judged.verdicts, judged.confusion, judged.diagnosis, judged.gpu_work
        )

    def write_tools(self, run_dir: Path) -> None:
        """tools_calls.csv, tools_scores.csv, tools_f1.csv: the tools of ``tools.run`` on the
        run's exports and Kineto traces against its truth (harness/tools/step.py); the
        class x tool table is printed."""
        if not self.cfg.tools.run:
            return
        from harness.core.console import fit_table
        from harness.tools.step import run_tools
        from harness.tools.table import table_view

        self._say(f"scoring the profiler tools ({', '.join(self.cfg.tools.run)})")
        try:
            scores = run_tools(run_dir, self.cfg.tools, diagnosis_dict(self.cfg), self._say)
        except Exception as exc:  # the tables above are safe; say what broke and fail
            self.failures.append(f"tools step failed: {type(exc).__name__}: {exc}")
            self._say(f"FAILED scoring the tools in {run_dir}: {exc}")
            return
        if scores is not None:
            print("\ntools against the ground truth, precision/recall/F1 (n/a: cannot judge):")
            print(fit_table(table_view(scores)))

    # -- tables ---------------------------------------------------------------------------
    def write_tables(self, run_dir: Path) -> pd.DataFrame:
        """runs.csv and runs.parquet (:meth:`Records.write_tables`)."""
        return self.records.write_tables(run_dir)
