"""The parent: runs every selected variant in its own process, profiles it, and keeps tables.

Order per scenario: ``repeats`` unprofiled timing rounds, interleaved across variants (so every
variant sees the same machine state and speedups are side-by-side ratios), then one profiled run
per variant under nsys with its SQLite export. After every unit the run folder's tables are
rebuilt from the files on disk, so a later crash, timeout or stop signal never loses finished
work. The work is split: :mod:`harness.plan` (units, lock, launch commands),
:mod:`harness.execute` (one worker process and its outcome), :mod:`harness.collect` (tables),
:mod:`harness.signals` (Ctrl-C, SIGTERM, SIGHUP), :mod:`harness.runfolder` (the layout).
"""

from __future__ import annotations

import datetime as dt
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from harness import envinfo, signals
from harness import nsys as nsys_mod
from harness import runfolder as rf
from harness.collect import (
    COLUMNS,
    TIMING_PARTS,
    build_runs_table,
    build_timings_table,
    first_env,
    print_summary,
)
from harness.config import SuiteConfig, UsageError, diagnosis_dict, discover_scenarios
from harness.execute import (
    Outcome,
    check_export,
    crashed_after_report,
    export_report,
    finish,
    kill_group,
    run_process,
    tail,
    worker_has_ended,
)
from harness.forkserver import ForkServer, ForkServerError
from harness.plan import (
    RunLock,
    RunLockedError,
    distributed_skip,
    lock_name,
    multinode_run_dir,
    node_outcome,
    node_suffix,
    now_utc,
    nproc_per_node,
    plan_units,
    torchrun_program,
)
from harness.runfolder import ResultWriteError, RunState, Status, Unit, read_json, write_json
from harness.worker import WorkerSpec
from scenarios import Scenario

# The names tests and other modules import from here (the runner's public surface).
__all__ = [
    "COLUMNS",
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
    "lock_name",
    "multinode_run_dir",
    "node_suffix",
    "nproc_per_node",
    "print_summary",
    "run_process",
    "torchrun_program",
    "worker_has_ended",
]
#: Imported by the fork server when ``harness.fork_preload`` is unset (see its docstring).
PRELOAD_ALWAYS = ("torch._dynamo",)
PRELOAD_GPU = ("torch._inductor.compile_fx",)

_kill_group = kill_group  # the name tests/test_forkserver.py imports
_tail = tail

REPO_ROOT = Path(__file__).resolve().parent.parent

NO_GPU_NOTE = (
    "No NVIDIA GPU found (nvidia-smi is missing or lists none): running the smoke sizes on the "
    "CPU. Timings are CPU timings and say nothing about GPU speedups; bf16 autocast, "
    "channels_last, DALI's GPU decoder and cudaProfilerApi capture are off, and nsys (if present) "
    "records NVTX and OS-runtime activity only, no kernels or copies."
)


class Suite:
    """One invocation of ``harness run``."""

    def __init__(self, suite: SuiteConfig, raw: DictConfig) -> None:
        self.cfg = suite
        self.raw = raw
        self.found: dict[str, Scenario] = discover_scenarios()
        if not suite.scenario:
            raise UsageError(
                "no scenario selected; add +scenario=NAME, +scenario=[a,b] or +scenario=all "
                f"(available: {', '.join(sorted(self.found))})"
            )
        self.selected = list(suite.scenario)
        self.gpu = envinfo.detect_gpus()
        self.size = (
            suite.size if suite.size != "auto" else ("full" if self.gpu.present else "smoke")
        )
        self.device = "cuda" if self.gpu.present else "cpu"
        self.nsys: nsys_mod.Nsys | None = None
        self.failures: list[str] = []
        #: Profiled units whose .nsys-rep waits for ``nsys export`` (run after the last worker).
        self.pending_exports: list[Unit] = []
        #: Profiled units whose nsys still writes its report (nsys.background_finalize).
        self.finishing: dict[Unit, Outcome] = {}
        self.forks: ForkServer | None = None
        self._forks_failed = False
        self._write_lock = threading.Lock()
        self.stops = signals.StopSignals()

    # -- set-up ---------------------------------------------------------------------------
    def _say(self, msg: str) -> None:
        tqdm.write(msg, file=sys.stderr)

    def _find_nsys(self) -> None:
        if not self.cfg.nsys.enabled:
            self._say("nsys.enabled=false: variants run unprofiled (profiled=false).")
            return
        self.nsys = nsys_mod.find(self.cfg.nsys.path)
        if self.nsys is None:
            looked = ", ".join(nsys_mod.candidates(self.cfg.nsys.path) or ["PATH"])
            self._say(
                "nsys not found (looked at nsys.path, $NSYS, PATH, "
                f"{', '.join(nsys_mod.SEARCH_GLOBS)}{'; ' + looked if looked != 'PATH' else ''}): "
                "running unprofiled, profiled=false. On a CPU box, scripts/install-nsys-cpu.sh "
                "installs it."
            )

    def _resume_dir(self) -> Path | None:
        """The checked run folder to resume, or None for a new run."""
        if not self.cfg.harness.resume:
            return None
        path = Path(self.cfg.harness.resume)
        if not rf.manifest_path(path).is_file():
            raise UsageError(f"harness.resume={path}: not a run folder (no manifest.json)")
        return path

    def _new_run_dir(self) -> Path:
        named = multinode_run_dir(self.cfg)  # several nodes: the folder they share, by name
        if named is not None:
            if self.cfg.dist.node_rank:
                self._say(
                    f"node {self.cfg.dist.node_rank} of {self.cfg.dist.nnodes}: this node's logs "
                    f"and reports go to {named}; node 0 writes the tables in {named.parent}"
                )
            return named
        base = Path(self.cfg.harness.results_dir)
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        for i in range(100):
            path = base / (f"{stamp}_{self.gpu.slug}" + (f"-{i}" if i else ""))
            try:
                path.mkdir(parents=True, exist_ok=False)
                return path
            except FileExistsError:
                continue
        raise RuntimeError(f"could not create a run folder under {base}")

    def _manifest(self, run_dir: Path) -> dict[str, Any]:
        manifest = read_json(rf.manifest_path(run_dir))
        if manifest is not None:
            manifest.setdefault("resumed_utc", []).append(now_utc())
            return manifest
        return {
            "created_utc": now_utc(),
            "run_dir": str(run_dir),
            "size": self.size,
            "device": self.device,
            "gpu": {
                "names": self.gpu.names,
                "count": len(self.gpu.names),
                "driver": self.gpu.driver,
                "memory_mib": self.gpu.memory_mib,
                "slug": self.gpu.slug,
            },
            "nsys": {"path": self.nsys.path, "version": self.nsys.version} if self.nsys else None,
            "git_sha": envinfo.git_sha(REPO_ROOT),
            **envinfo.host_facts(),
            "config": OmegaConf.to_container(self.raw, resolve=True),
            "scenarios": {
                name: {
                    "bottleneck": self.found[name].bottleneck,
                    "variants": self.found[name].variant_names,
                    "severity": self.cfg.scenario[name].severity,
                    "severity_unit": self.found[name].severity.unit,
                }
                for name in self.selected
            },
        }

    def units(self) -> list[Unit]:
        variants = {
            name: list(self.cfg.scenario[name].variants or self.found[name].variant_names)
            for name in self.selected
        }
        return plan_units(self.cfg, self.selected, variants, profiled=self.nsys is not None)

    # -- running --------------------------------------------------------------------------
    def _spec(self, unit: Unit, out_dir: Path) -> Path:
        scen_cfg = OmegaConf.to_container(self.raw.scenario[unit.scenario], resolve=True)
        spec = WorkerSpec(
            scenario=unit.scenario,
            variant=unit.variant,
            phase=unit.phase,
            size=self.size,
            device=self.device,
            config=scen_cfg,  # type: ignore[arg-type]
            seed=self.cfg.harness.seed,
            cache_dir=str(self.cfg.harness.cache_path()),
            out_dir=str(out_dir),
            emit_nvtx=self.cfg.nsys.emit_nvtx and unit.is_profile,
            memory_cap_gb=self.cfg.harness.memory_cap_gb,
            max_window_s=self.cfg.harness.window_budget_s(unit.phase),
            min_steps=self.cfg.harness.min_steps,
            max_warmup_s=self.cfg.harness.max_warmup_s,
        )
        path = out_dir / rf.SPEC
        write_json(path, asdict(spec))
        return path

    def _forkserver(self) -> ForkServer | None:
        """The fork server for unprofiled workers (started on first use), or None when
        ``harness.fork_server`` is off or it could not start (said once; workers then start
        the usual way)."""
        if not self.cfg.harness.fork_server or self._forks_failed:
            return None
        if self.forks is not None and self.forks.alive:
            return self.forks
        try:
            self.forks = ForkServer(preload=self.fork_preload())
        except (ForkServerError, OSError) as exc:
            self._forks_failed = True
            self._say(f"fork server unavailable ({exc}); workers start as new interpreters")
            return None
        return self.forks

    def fork_preload(self) -> list[str]:
        """What the fork server imports besides torch (``harness.fork_preload``)."""
        if self.cfg.harness.fork_preload is not None:
            return list(self.cfg.harness.fork_preload)
        return [*PRELOAD_ALWAYS, *(PRELOAD_GPU if self.device == "cuda" else ())]

    def close(self) -> None:
        """Stop the fork server, if one was started; kill any nsys still writing a report
        (only left when the run is interrupted: an exported report is waited for first)."""
        for outcome in self.finishing.values():
            kill_group(outcome.finishing, grace_s=30.0)
        self.finishing.clear()
        if self.forks is not None:
            self.forks.close()
            self.forks = None

    def worker_env(self) -> dict[str, str]:
        """Compiler caches in the harness cache folder, shared by every worker and kept between
        runs: only the first process that compiles a graph pays for it (about 60 s for
        kernel_flood's compiled variants on the H100, 6 s warm). Variables already set win."""
        cache = self.cfg.harness.cache_path()
        return {
            "TORCHINDUCTOR_CACHE_DIR": str(cache / "torchinductor"),
            "TRITON_CACHE_DIR": str(cache / "triton"),
        }

    def report_base(self, unit: Unit, run_dir: Path) -> Path:
        """The profile's report path without its suffix (.nsys-rep, .qdstrm, .sqlite)."""
        return rf.report_base(run_dir, unit, self.cfg.dist.node_rank)

    def _skip_reason(self, unit: Unit) -> str:
        """Why this machine cannot run ``unit`` ('' when it can)."""
        needs = self.found[unit.scenario].variant(unit.variant).needs_gpu
        if needs and self.device != "cuda":
            return f"{unit.label} skipped on a CPU box: {needs}"
        world = self.found[unit.scenario].world_size
        gpus = len(self.gpu.names) if self.device == "cuda" else None
        return distributed_skip(self.cfg, unit, world, gpus)

    def run_unit(self, unit: Unit, run_dir: Path, *, defer_export: bool = False) -> Outcome:
        """Run one worker process; ``defer_export`` queues a good profile's ``nsys export`` on
        :attr:`pending_exports` instead of running it now (see :meth:`run_exports`)."""
        out_dir = unit.dir(run_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        for stale in (rf.RESULT, rf.STATUS):
            (out_dir / stale).unlink(missing_ok=True)
        why = self._skip_reason(unit)
        if why:
            return Outcome(Status.SKIPPED, why)
        spec = self._spec(unit, out_dir)
        world = self.found[unit.scenario].world_size
        program = [sys.executable, "-m", "harness.worker", "--spec", str(spec)]
        if world > 1:
            program = torchrun_program(self.cfg, unit, world, spec)
        if not unit.is_profile:
            outcome = run_process(
                program,
                out_dir,
                self.cfg.harness.timeout_s,
                unit.label,
                self.cfg.harness.memory_cap_gb,
                self.worker_env(),
                self._forkserver() if world <= 1 else None,
            )
            return node_outcome(self.cfg, outcome, unit.label)
        return self._run_profile(unit, run_dir, program, defer_export)

    def _run_profile(
        self, unit: Unit, run_dir: Path, program: list[str], defer_export: bool
    ) -> Outcome:
        """The worker under nsys; its export now, queued, or after nsys finishes its report."""
        assert self.nsys is not None
        out_dir = unit.dir(run_dir)
        report_base = self.report_base(unit, run_dir)
        for ext in rf.REPORT_SUFFIXES:
            report_base.with_suffix(ext).unlink(missing_ok=True)
        cmd = nsys_mod.profile_command(
            self.nsys,
            report_base,
            program,
            trace=self.trace_for(unit.scenario),
            gpu=self.device == "cuda",
            cuda_memory_usage=self.cfg.nsys.cuda_memory_usage,
            cuda_graph_trace=self.cfg.nsys.cuda_graph_trace,
            extra_args=self.cfg.nsys.extra_args,
        )
        background = defer_export and self.cfg.nsys.background_finalize
        outcome = run_process(
            cmd,
            out_dir,
            self.cfg.harness.timeout_s,
            unit.label,
            self.cfg.harness.memory_cap_gb,
            self.worker_env(),
            detach_when=worker_has_ended(out_dir) if background else None,
        )
        if outcome.finishing is not None:  # nsys writes the report while the next one runs
            self.finishing[unit] = outcome
            self.pending_exports.append(unit)
            return outcome
        outcome = self._profile_outcome(unit, run_dir, outcome)
        if outcome.status != Status.OK:
            return outcome
        if defer_export and report_base.with_suffix(rf.REPORT_SUFFIX).is_file():
            self.pending_exports.append(unit)
            return outcome
        return self._export(unit, report_base, out_dir, outcome)

    def _profile_outcome(self, unit: Unit, run_dir: Path, outcome: Outcome) -> Outcome:
        """How a profiled worker ended, once nsys is done with it: a crash after its result and
        report still counts as ok, a node without rank 0 needs no result.json."""
        base = self.report_base(unit, run_dir)
        outcome = crashed_after_report(outcome, unit.dir(run_dir), base, unit.label)
        return node_outcome(self.cfg, outcome, unit.label)

    def trace_for(self, scenario: str) -> list[str]:
        """nsys ``--trace`` for a scenario: its own ``nsys_trace`` or ``nsys.trace``."""
        own = getattr(self.cfg.scenario[scenario], "nsys_trace", None)
        return list(own) if own else list(self.cfg.nsys.trace)

    def finish_reports(self, run_dir: Path) -> None:
        """Wait for every nsys still writing a report in the background and record how it
        ended; a failed one leaves the export queue."""
        while self.finishing:
            unit, outcome = next(iter(self.finishing.items()))
            del self.finishing[unit]
            done = finish(outcome, unit.dir(run_dir), self.cfg.harness.timeout_s, unit.label)
            done = self._profile_outcome(unit, run_dir, done)
            self.record(run_dir, unit, done)
            if done.status != Status.OK and unit in self.pending_exports:
                self.pending_exports.remove(unit)

    def _export(self, unit: Unit, base: Path, out_dir: Path, outcome: Outcome) -> Outcome:
        """Export ``base``.nsys-rep to SQLite and check it; records how long that took."""
        assert self.nsys is not None
        return export_report(self.nsys, unit.label, base, outcome, self.cfg.nsys.export_timeout_s)

    def run_exports(self, run_dir: Path) -> None:
        """Export every queued report, ``harness.export_workers`` at once. This runs after a
        scenario's last worker so that no export competes with a measurement for CPU or disk."""
        self.finish_reports(run_dir)
        pending, self.pending_exports = self.pending_exports, []
        if not pending:
            return
        workers = min(self.cfg.harness.export_workers, len(pending))
        self._say(f"exporting {len(pending)} nsys reports to SQLite ({workers} at a time)")

        def export(unit: Unit) -> Outcome:
            status = rf.read_status(unit.dir(run_dir)) or {}
            done = Outcome(
                Status.OK,
                "",
                status.get("returncode"),
                float(status.get("wall_s") or 0.0),
                finalize_s=status.get("finalize_s"),
            )
            return self._export(unit, self.report_base(unit, run_dir), unit.dir(run_dir), done)

        with ThreadPoolExecutor(workers) as pool:
            futures = {pool.submit(export, unit): unit for unit in pending}
            bar = tqdm(
                as_completed(futures),
                total=len(futures),
                unit="export",
                disable=not self.cfg.harness.progress,
            )
            for fut in bar:
                self.record(run_dir, futures[fut], fut.result())
        self.write_tables(run_dir)

    def record(self, run_dir: Path, unit: Unit, outcome: Outcome) -> None:
        """Write a unit's status.json and report a failure or a skip (once per variant)."""
        status_path = unit.dir(run_dir) / rf.STATUS
        with self._write_lock:
            write_json(status_path, {**outcome.record(), "unit": asdict(unit), "at": now_utc()})
        status = Status(outcome.status)
        if status == Status.SKIPPED:
            if rf.first_timing(unit.phase):  # once per variant, not once per phase
                self._say(outcome.error)
        elif status.is_failure:
            self.failures.append(outcome.error)
            self._say(f"FAILED {unit.label}: {outcome.error}")

    # -- main loop ------------------------------------------------------------------------
    def run(self) -> int:
        """The whole run; the exit code (0, 1 when anything failed, 128 + a stop signal)."""
        with signals.handled() as self.stops:
            try:
                return self._run()
            except KeyboardInterrupt:  # before the run folder exists, or after its tables
                self._say("stopped.")
                return self.stops.exit_code

    def _run(self) -> int:
        t_start = time.perf_counter()
        walls: dict[str, float] = {}
        if not self.gpu.present:
            self._say(NO_GPU_NOTE)
        self._find_nsys()
        resume = self._resume_dir()
        # A resumed run takes the lock of the results folder it was made in.
        lock_dir = resume.resolve().parent if resume else Path(self.cfg.harness.results_dir)
        lock_dir.mkdir(parents=True, exist_ok=True)
        with RunLock(lock_dir, lock_name(self.cfg)):
            run_dir = resume or self._new_run_dir()
            manifest = self._manifest(run_dir)
            write_json(rf.manifest_path(run_dir), manifest)
            write_json(
                rf.state_path(run_dir), {"state": RunState.RUNNING, "updated_utc": now_utc()}
            )
            state = self._run_units(run_dir, walls, t_start)
            state, table = self._wind_up(run_dir, manifest, state)
        if table is None:
            self._say(f"results in {run_dir} are incomplete; finished variants' files are intact.")
            return self.stops.exit_code if state == RunState.INTERRUPTED else 1
        print_summary(table, run_dir)
        if state == RunState.INTERRUPTED:
            self.write_timings(run_dir, walls, time.perf_counter() - t_start)
            return self.stops.exit_code
        return self._after_tables(run_dir, table, walls, t_start)

    def _run_units(self, run_dir: Path, walls: dict[str, float], t_start: float) -> RunState:
        """Every unit in order, each scenario's exports after its last worker; how it ended."""
        state = RunState.COMPLETE
        bar = None
        try:
            units = self.units()
            self._say(f"run folder: {run_dir}  ({len(units)} worker runs, size={self.size})")
            bar = tqdm(total=len(units), unit="run", disable=not self.cfg.harness.progress)
            exports_s = 0.0
            for i, unit in enumerate(units):
                bar.set_description(unit.label)
                self._run_or_keep(unit, run_dir)
                bar.update(1)
                # A scenario's reports are exported once its last worker is done: never
                # beside a measurement, and a run cut off later keeps these exports.
                if i + 1 == len(units) or units[i + 1].scenario != unit.scenario:
                    t0 = time.perf_counter()
                    self.run_exports(run_dir)
                    exports_s += time.perf_counter() - t0
            walls["exports_s"] = exports_s
            walls["workers_s"] = time.perf_counter() - t_start - exports_s
        except KeyboardInterrupt:
            state = RunState.INTERRUPTED
        except ResultWriteError as exc:
            state = RunState.FAILED
            self._write_failed(exc)
        finally:
            if bar is not None:
                bar.close()
        if state == RunState.INTERRUPTED:
            self._say(
                f"interrupted: finished variants are kept in {run_dir}; finish the rest with "
                f"harness.resume={run_dir}"
            )
        return state

    def _run_or_keep(self, unit: Unit, run_dir: Path) -> None:
        """Run a unit, or on resume keep it when it already finished (queueing an export its
        profile never got)."""
        if self.cfg.harness.resume:
            status = rf.unit_status(unit.dir(run_dir))
            if status is not None and status.finished:
                if self._export_missing(unit, run_dir):
                    self.pending_exports.append(unit)
                return
        outcome = self.run_unit(unit, run_dir, defer_export=True)
        self.record(run_dir, unit, outcome)
        self.write_tables(run_dir)

    def _wind_up(
        self, run_dir: Path, manifest: dict[str, Any], state: RunState
    ) -> tuple[RunState, pd.DataFrame | None]:
        """Reports still being written, the fork server, the tables and state.json: done even
        when a stop signal arrives meanwhile (only the first one raises)."""
        try:  # an interrupted run still keeps the reports nsys is writing
            self.finish_reports(run_dir)
        except KeyboardInterrupt:
            state = RunState.INTERRUPTED
        except ResultWriteError as exc:
            state = RunState.FAILED
            self._write_failed(exc)
        try:
            self.close()
        except KeyboardInterrupt:
            state = RunState.INTERRUPTED
            self.close()
        if state == RunState.COMPLETE and self.failures:
            state = RunState.FAILED
        table: pd.DataFrame | None = None
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
                self._write_failed(exc)
                break
        if not self._write_state(run_dir, state):
            table = None
        return state, table

    def _write_state(self, run_dir: Path, state: RunState) -> bool:
        """state.json on its own: small, and it must still say what happened."""
        record = {"state": state.value, "failures": len(self.failures), "updated_utc": now_utc()}
        for _ in range(2):
            try:
                write_json(rf.state_path(run_dir), record)
                return True
            except KeyboardInterrupt:
                record["state"] = RunState.INTERRUPTED.value
            except ResultWriteError as exc:
                self._write_failed(exc)
                return False
        return False

    def _after_tables(
        self, run_dir: Path, table: pd.DataFrame, walls: dict[str, float], t_start: float
    ) -> int:
        """Diagnosis, timings and the report of a run that was not interrupted."""
        t0 = time.perf_counter()
        if table["profiled"].any():
            try:
                self.write_diagnosis(run_dir, table)
            except Exception as exc:  # the tables above are safe; say what broke and fail
                self.failures.append(f"diagnosis failed: {type(exc).__name__}: {exc}")
                self._say(f"FAILED diagnosing the exports in {run_dir}: {exc}")
        walls["diagnosis_s"] = time.perf_counter() - t0
        self.write_timings(run_dir, walls, time.perf_counter() - t_start)
        from harness.report import report_after_run  # never raises; the results are kept

        t0 = time.perf_counter()
        problem = report_after_run(run_dir, self._say, self.found)
        walls["report_s"] = time.perf_counter() - t0
        self.write_timings(run_dir, walls, time.perf_counter() - t_start)
        if problem == "interrupted":
            return self.stops.exit_code
        if problem:
            self.failures.append(problem)
        return 1 if self.failures else 0

    def write_timings(self, run_dir: Path, walls: dict[str, float], total_s: float) -> None:
        """timings.csv (where each worker's wall time went) and wall_time.json (the suite's
        phases), so a slow suite shows what to fix; printed as one line."""
        try:
            table = build_timings_table(run_dir, self.units())
            rf.write_frame(rf.table_path(run_dir, "timings"), table)
            sums = {f"{c}": float(table[c].sum()) for c in TIMING_PARTS if c in table}
            write_json(
                rf.wall_time_path(run_dir),
                {"total_s": total_s, **walls, "worker_parts_s": sums, "updated_utc": now_utc()},
            )
        except ResultWriteError as exc:
            self._write_failed(exc)
            return
        parts = ", ".join(f"{k.removesuffix('_s')} {v:.0f} s" for k, v in sums.items())
        self._say(f"wall time {total_s:.0f} s; worker processes: {parts}")

    def _export_missing(self, unit: Unit, run_dir: Path) -> bool:
        """A finished profile whose report was never exported (the run stopped before)."""
        base = self.report_base(unit, run_dir)
        return (
            unit.is_profile
            and base.with_suffix(rf.REPORT_SUFFIX).is_file()
            and not base.with_suffix(rf.SQLITE_SUFFIX).is_file()
        )

    def _write_failed(self, exc: ResultWriteError) -> None:
        """Record and print a failed result write once (the final rewrite may repeat it)."""
        if str(exc) not in self.failures:
            self.failures.append(str(exc))
            self._say(f"FAILED writing results: {exc}")

    # -- diagnosis ------------------------------------------------------------------------
    def write_diagnosis(self, run_dir: Path, table: pd.DataFrame) -> None:
        """diagnosis.csv, verdicts.csv, confusion.csv from the exports; print the verdicts."""
        from harness import verdicts as V

        th = diagnosis_dict(self.cfg)
        diag = V.diagnose_run(run_dir, self.found, table, thresholds=th)
        found_csv = rf.table_path(run_dir, "findings")
        findings = pd.read_csv(found_csv) if found_csv.is_file() else None
        verdict = V.verdicts(
            diag, table, self.found, min_ci_low=th["verdict_min_ci_low"],
            main_metric=th["main_metric"], findings=findings,
        )  # fmt: skip
        matrix, scores = V.confusion(diag)
        rf.write_frame(rf.table_path(run_dir, "diagnosis"), diag)
        rf.write_frame(rf.table_path(run_dir, "verdicts"), verdict)
        work = V.gpu_work_table(run_dir, self.found, table)
        rf.write_frame(rf.table_path(run_dir, "gpu_work"), work)
        limits = work[work["share_of_limit"].notna()] if "share_of_limit" in work else work.iloc[:0]
        rf.write_frame(rf.table_path(run_dir, "confusion"), matrix.reset_index(names="expected"))
        rf.write_frame(rf.table_path(run_dir, "detector_scores"), scores)
        with pd.option_context("display.width", 160, "display.max_colwidth", 90):
            print("\nverdicts:")
            print(verdict[["scenario", "verdict", "reason"]].to_string(index=False))
            print("\nconfusion (rows: expected, columns: primary finding):")
            print(matrix.to_string())
            if not limits.empty:
                print("\nanalytic limits (sum of the baseline's kernel durations per step):")
                cols = ["scenario", "variant", "kernels_per_step", "kernel_ms_per_step"]
                cols += ["step_ms_mean", "limit_ms_per_step", "share_of_limit"]
                print(limits[cols].to_string(index=False, float_format=lambda x: f"{x:.3g}"))

    # -- tables ---------------------------------------------------------------------------
    def write_tables(self, run_dir: Path) -> pd.DataFrame:
        if self.cfg.dist.node_rank:  # node k of a multi-node run: node 0 holds rank 0's results
            return pd.DataFrame(columns=COLUMNS)
        table = build_runs_table(
            run_dir, self.found, self.cfg, self.selected, self.cfg.harness.bootstrap
        )
        rf.write_frame(rf.table_path(run_dir, "runs", ".parquet"), table)
        rf.write_frame(rf.table_path(run_dir, "runs"), table)
        return table
