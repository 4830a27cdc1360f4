"""The parent: runs every selected variant in its own process, profiles it, and keeps tables.

Order per scenario: ``repeats`` unprofiled timing rounds, interleaved across variants (so every
variant sees the same machine state and speedups are side-by-side ratios), then one profiled run
per variant under nsys with its SQLite export. After every unit the run folder's tables are
rebuilt from the files on disk, so a later crash, timeout or stop signal never loses finished
work. The work is split: :mod:`harness.execution.plan` (units, lock, launch commands),
:mod:`harness.execution.runloop` (the run loop: one worker measures at a time, the next one starts while
it tears down), :mod:`harness.execution.execute` (one worker process and its outcome),
:mod:`harness.execution.warmer` (compiler caches filled in the background), :mod:`harness.execution.collect`
(tables), :mod:`harness.core.progress` (the bar or the line log), :mod:`harness.core.signals` (Ctrl-C,
SIGTERM, SIGHUP), :mod:`harness.core.runfolder` (the layout).
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from bottlenecks import MEASURE
from harness.core import envinfo, signals
from harness.core import nsys as nsys_mod
from harness.core import runfolder as rf
from harness.core.config import SuiteConfig, UsageError, diagnosis_dict, discover_scenarios
from harness.core.progress import Progress
from harness.core.runfolder import (
    ResultWriteError,
    RunState,
    Status,
    Unit,
    WorkerState,
    read_json,
    write_json,
)
from harness.execution import console
from harness.execution.collect import (
    COLUMNS,
    TIMING_PARTS,
    build_runs_table,
    build_timings_table,
    first_env,
    print_summary,
    wall_time_record,
)
from harness.execution.execute import (
    Outcome,
    check_export,
    crashed_after_report,
    export_report,
    finish,
    kill_group,
    launch,
    never_started,
    run_process,
    stop_group,
    tail,
    worker_env,
    worker_has_ended,
)
from harness.execution.forkserver import ForkServer, ForkServerError
from harness.execution.plan import (
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
from harness.execution.profiling import ProfileServers, ReportHandle, Session, check_owner
from harness.execution.ranks import launch_ranks
from harness.execution.runloop import POLL_S, Live, RunLoop
from harness.execution.warmer import CompileWarmer
from harness.execution.worker import WorkerSpec
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
#: How a profile forked from a traced server may fail for a reason of the session's (the server
#: ended, its exit code was lost, nsys wrote no report or another worker's): run it again on its
#: own. A timeout or an out-of-memory is the variant's and is not run again.
SERVED_RETRY = frozenset({Status.FAILED, Status.NO_RESULT, Status.EVIDENCE_FAILED})

_kill_group = kill_group  # the name tests/test_forkserver.py imports
_tail = tail

REPO_ROOT = Path(__file__).resolve().parent.parent


def has_gpu_activity(sqlite: Path) -> bool:
    """Whether an export holds kernels, copies or graph replays (True when it cannot be read:
    the export's own check has said what is wrong with it)."""
    from analysis.detect._common import has_gpu
    from analysis.trace import TraceError, open_trace

    try:
        with open_trace(sqlite) as trace:
            return has_gpu(trace)
    except TraceError:
        return True


NO_GPU_NOTE = (
    "No NVIDIA GPU found (nvidia-smi is missing or lists none): running the smoke sizes on the "
    "CPU. Timings are CPU timings and say nothing about GPU speedups; bf16 autocast, "
    "channels_last, DALI's GPU decoder and cudaProfilerApi capture are off, and nsys (if present) "
    "records NVTX and OS-runtime activity only, no kernels or copies."
)


def shares_capture_stop(
    *, profiled: bool, one_node: bool, world: int, overlap_capture_stop: bool
) -> bool:
    """Whether another worker may measure while this one waits in ``cudaProfilerStop`` past its
    window (``Live.quiet_past_window``): a single profiled process on one node, where
    ``harness.overlap_capture_stop`` is on. Never a distributed one: nsys takes 35-38 s to write
    a report of every rank (2 x H200, 2026-11-28), and the three windows measured beside one ran
    1.6-2.2x slower than their timing, where a single process's stop (3-5 s) costs nothing."""
    return profiled and one_node and world <= 1 and overlap_capture_stop


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
        #: The traced fork servers of profiled workers (nsys.profile_server), while units run.
        self.servers: ProfileServers | None = None
        self._server_said: set[str] = set()
        #: Units whose report a traced fork server wrote (their export is checked by pid).
        self._served_units: set[Unit] = set()
        #: The session each running profiled worker was forked from.
        self._forked_from: dict[Unit, Session] = {}
        #: Units forked from a traced server at least once, and those that failed there (run
        #: again, once, as their own ``nsys profile`` after the other workers).
        self._served_tried: set[Unit] = set()
        self._serve_failed: list[Unit] = []
        #: Profiles run again because their nsys failed before the worker started.
        self._relaunched: set[Unit] = set()
        self._write_lock = threading.Lock()
        self.stops = signals.StopSignals()
        self.progress = Progress(suite.harness.progress)
        self.warmer: CompileWarmer | None = None
        #: The run folder while units run (the run loop's host methods need it).
        self.run_dir: Path | None = None
        #: nsys.exit_after_capture, as this run goes on (off once an export lacked GPU work);
        #: None until the first profiled worker that left early has been checked.
        self.exit_after_capture = suite.nsys.exit_after_capture
        self._capture_checked = False
        self.exports_s = 0.0
        self.started_utc = now_utc()
        self._waited: set[Unit] = set()
        self._waited_reports: set[Unit] = set()
        self._live: list[Live] = []
        #: Each scenario's runs.csv rows under the state of its files (build_runs_table).
        self._rows: dict[str, Any] = {}

    # -- set-up ---------------------------------------------------------------------------
    def _say(self, msg: str) -> None:
        self.progress.say(msg)

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

    def variants(self, scenario: str) -> list[str]:
        """The scenario's selected variants, in its order."""
        return list(self.cfg.scenario[scenario].variants or self.found[scenario].variant_names)

    def units(self) -> list[Unit]:
        """Every unit in run order; with compiler-cache warm-ups, the scenarios whose variants
        compile run last (their caches fill meanwhile)."""
        variants = {name: self.variants(name) for name in self.selected}
        last = frozenset(n for n in self.selected if self._compiling(n)) if self.warming else None
        return plan_units(
            self.cfg, self.selected, variants, self.nsys is not None, last or frozenset()
        )

    @property
    def warming(self) -> bool:
        """harness.warm_compile as it applies here (None: on a GPU only; never on a GPU that
        takes one process at a time)."""
        on = self.cfg.harness.warm_compile
        return (self.device == "cuda" if on is None else on) and self.gpu_shared

    @property
    def overlapping(self) -> bool:
        """harness.overlap as it applies here (never on a GPU that takes one process at a
        time: the next worker's CUDA context would fail beside the current one's)."""
        return self.cfg.harness.overlap and self.gpu_shared

    @property
    def gpu_shared(self) -> bool:
        return self.device != "cuda" or self.gpu.shared

    def _compiling(self, scenario: str) -> list[str]:
        """The scenario's selected variants whose set-up compiles and that run here."""
        scen = self.found[scenario]
        return [
            v
            for v in self.variants(scenario)
            if scen.variant(v).compiles
            and not self._skip_reason(Unit(scenario, v, rf.timing_phase(1)))
            and scen.world_size <= 1
        ]

    # -- running --------------------------------------------------------------------------
    def _spec(self, unit: Unit, out_dir: Path, *, forked: bool, warm_only: bool = False) -> Path:
        """Write the worker's spec.json; ``forked``: started by the fork server (which has
        imported the preload modules already)."""
        scen_cfg = OmegaConf.to_container(self.raw.scenario[unit.scenario], resolve=True)
        preload = self.cfg.harness.preload_unforked and not forked
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
            preload=self.unforked_preload(unit) if preload else [],
            report_progress=True,
            gate=not self.cfg.dist.multinode and not warm_only,
            parent_pid=os.getpid(),
            # held while up to a whole batch sets up and measures before it
            gate_timeout_s=self.cfg.harness.timeout_s * (self.cfg.harness.setup_batch + 1),
            exit_after_capture=unit.is_profile and self._leaves_after_capture(),
            warm_only=warm_only,
            capture_lead_steps=self.cfg.nsys.capture_lead_steps
            if unit.is_profile and self.device == "cuda"
            else 0,
        )
        path = out_dir / rf.SPEC
        write_json(path, asdict(spec))
        return path

    def _leaves_after_capture(self) -> bool:
        """Profiled workers leave through os._exit after their capture (GPU: a capture range)."""
        return self.exit_after_capture and self.device == "cuda"

    def _forkserver(self) -> ForkServer | None:
        """The fork server for unprofiled workers (started on first use), or None when
        ``harness.fork_server`` is off or it could not start (said once; workers then start
        the usual way)."""
        if not self.cfg.harness.fork_server or self._forks_failed:
            return None
        if self.forks is not None and self.forks.alive:
            return self.forks
        try:
            self.forks = ForkServer(self.server_env(), preload=self.fork_preload())
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

    def unforked_preload(self, unit: Unit) -> list[str]:
        """What a worker started as a new interpreter imports with torch: the fork server's
        list, less Inductor's compiler (``PRELOAD_GPU``, 8 s of a profiled worker's imports on
        the H100) unless its variant compiles; an explicit ``harness.fork_preload`` is kept."""
        return self._preload(self.found[unit.scenario].variant(unit.variant).compiles)

    def _preload(self, compiles: bool) -> list[str]:
        """``fork_preload``, less Inductor's compiler where nothing to be run compiles (an
        explicit ``harness.fork_preload`` is kept as it is)."""
        mods = self.fork_preload()
        if self.cfg.harness.fork_preload is not None or compiles:
            return mods
        return [m for m in mods if m not in PRELOAD_GPU]

    def close(self) -> None:
        """Stop the fork server and a compiler-cache warm-up, if started; kill any nsys still
        writing a report (only left when the run is interrupted: an exported report is waited
        for first)."""
        if self.warmer is not None:
            self.warmer.close()
        for outcome in self.finishing.values():
            if not isinstance(outcome.finishing, ReportHandle):
                kill_group(outcome.finishing, grace_s=30.0)
        self.finishing.clear()
        if self.servers is not None:
            self.servers.kill()
            self.servers = None
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

    def server_env(self) -> dict[str, str]:
        """A fork server's environment: the parent's, with the workers' compiler caches where
        the parent sets none. Importing Inductor resolves its cache folder (and sets
        TORCHINDUCTOR_CACHE_DIR to /tmp's default where unset), so a server started without
        them handed its forked workers other caches than the background warmer filled: on the
        H100 (2026-11-26) the compiled variants' first timing runs still compiled for 57 and
        64 s after the warmer had filled the harness's cache."""
        return {**self.worker_env(), **os.environ}

    def report_base(self, unit: Unit, run_dir: Path) -> Path:
        """The profile's report path without its suffix (.nsys-rep, .qdstrm, .sqlite)."""
        return rf.report_base(run_dir, unit, self.cfg.dist.node_rank)

    def _skip_reason(self, unit: Unit) -> str:
        """Why this machine cannot run ``unit`` ('' when it can): the reason alone, since the
        status says 'skipped' and the variant and round are columns of their own."""
        needs = self.found[unit.scenario].variant(unit.variant).needs_gpu
        if needs and self.device != "cuda":
            return f"this machine has no GPU: {needs}"
        world = self.found[unit.scenario].world_size
        gpus = len(self.gpu.names) if self.device == "cuda" else None
        return distributed_skip(self.cfg, unit, world, gpus)

    def start(self, unit: Unit, run_dir: Path) -> Live | Outcome:
        """Start the unit's worker (its own session; forked, under nsys or torchrun), or the
        outcome of a unit that does not run here (skipped)."""
        out_dir = unit.dir(run_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        for stale in [out_dir / rf.RESULT, out_dir / rf.STATUS, *rf.transient_files(out_dir)]:
            stale.unlink(missing_ok=True)
        why = self._skip_reason(unit)
        if why:
            return Outcome(Status.SKIPPED, why)
        world = self.found[unit.scenario].world_size
        if unit.is_profile and self._served(unit):
            served = self._start_served(unit, out_dir)
            if served is not None:
                return served
        forked = not unit.is_profile and (world <= 1 or self.forking_ranks)
        forks = self._forkserver() if forked else None
        spec = self._spec(unit, out_dir, forked=forks is not None)
        worker = [sys.executable, "-m", "harness.execution.worker", "--spec", str(spec)]
        program = torchrun_program(self.cfg, unit, world, spec) if world > 1 else worker
        detach = None
        if unit.is_profile:
            program = self._profile_command(unit, run_dir, program)
            if self.cfg.nsys.background_finalize:
                detach = worker_has_ended(out_dir)
        env = self.worker_env()
        if world > 1:  # torchrun's own default, set here so it does not print its banner
            env.setdefault("OMP_NUM_THREADS", "1")
        if world > 1 and forks is not None:  # its ranks forked (torchrun where that fails)
            nproc = nproc_per_node(self.cfg, world)
            proc = launch_ranks(forks, worker, program, out_dir, env, nproc, unit.label)
        else:
            proc = launch(program, out_dir, env, forks)
        one_node = not self.cfg.dist.multinode
        return Live(
            unit,
            proc,
            out_dir,
            self.cfg.harness.timeout_s,
            gated=one_node,
            overlaps=one_node,
            memory_cap_gb=self.cfg.harness.memory_cap_gb,
            detach_when=detach,
            quiet_past_window=shares_capture_stop(
                profiled=unit.is_profile,
                one_node=one_node,
                world=world,
                overlap_capture_stop=self.overlap_capture_stop,
            ),
        )

    @property
    def forking_ranks(self) -> bool:
        """harness.fork_ranks as it applies here: the ranks of a distributed timing unit are
        forked from the fork server (``harness.fork_server``) on one node; else torchrun."""
        h = self.cfg.harness
        return h.fork_ranks and h.fork_server and not self.cfg.dist.multinode

    def _served(self, unit: Unit) -> bool:
        """Whether ``unit`` is profiled as a child of its scenario's traced fork server (not
        after a served attempt failed)."""
        return (
            self.servers is not None
            and self._server_mode(unit.scenario)
            and unit not in self._serve_failed
        )

    def _server_mode(self, scenario: str) -> bool:
        """nsys.profile_server as it applies to ``scenario``: single-process, nsys found."""
        return (
            self.cfg.nsys.profile_server
            and self.nsys is not None
            and self.found[scenario].world_size <= 1
            and not self.cfg.dist.multinode
        )

    def _start_served(self, unit: Unit, out_dir: Path) -> Live | None:
        """Fork the profiled worker from its scenario's traced server; None where that server
        could not start or fork (said once per scenario: the worker is profiled on its own)."""
        assert self.servers is not None
        proc, why = None, ""
        for _ in range(2):  # a server found gone at the fork: once more, from a fresh session
            session, why = self.servers.server(unit.scenario)
            if session is None:
                break
            proc, why = self._fork_served(unit, out_dir, session)
            if proc is not None:
                break
        if proc is None:
            if unit.scenario not in self._server_said:
                self._server_said.add(unit.scenario)
                self._say(
                    f"{unit.scenario}: its traced fork server is unavailable ({why}); its "
                    "variants are profiled one nsys process each"
                )
            return None
        return Live(
            unit, proc, out_dir, self.cfg.harness.timeout_s,
            memory_cap_gb=self.cfg.harness.memory_cap_gb,
            quiet_past_window=self.overlap_capture_stop,
        )  # fmt: skip

    def _fork_served(self, unit: Unit, out_dir: Path, session: Session) -> tuple[Any, str]:
        """The unit's worker forked from ``session``'s server, or None and why (the session is
        then retired)."""
        assert self.servers is not None
        spec = self._spec(unit, out_dir, forked=True)
        cmd = [sys.executable, "-m", "harness.execution.worker", "--spec", str(spec)]
        env = worker_env(self.worker_env())
        forked: list[Any] = []
        try:  # held against stop signals: no worker starts unseen
            with signals.deferred():
                server = session.starting.result()
                forked.append(server.spawn(cmd, out_dir / rf.STDOUT, out_dir / rf.STDERR, env))
        except ForkServerError as exc:
            self.servers.retire_session(session)
            return None, str(exc)
        except BaseException:  # a stop signal held back during the fork arrives now
            for item in forked:
                stop_group(item, out_dir)
            raise
        self._forked_from[unit] = session
        self._served_tried.add(unit)
        self.servers.forked(session, unit)
        return forked[0], ""

    def _make_servers(self, todo: list[Unit], run_dir: Path) -> ProfileServers | None:
        """The traced fork servers of the scenarios with profiled workers still to run, started
        now (their imports run before anything is measured); None when none applies."""
        if self.nsys is None or not self.cfg.nsys.profile_server:
            return None
        scenarios = list(dict.fromkeys(u.scenario for u in todo if u.is_profile))
        scenarios = [s for s in scenarios if self._server_mode(s)]
        if not scenarios:
            return None

        def make(base: Path, log: Path) -> ForkServer:
            scenario = base.parent.name
            cmd = nsys_mod.server_command(
                self.nsys,  # type: ignore[arg-type]
                base,
                trace=self.trace_for(scenario),
                gpu=self.device == "cuda",
                window_range=MEASURE,
                cuda_memory_usage=self.cfg.nsys.cuda_memory_usage,
                cuda_graph_trace=self.cfg.nsys.cuda_graph_trace,
                extra_args=self.cfg.nsys.extra_args,
            )
            env = {**self.server_env(), **nsys_mod.SERVER_ENV}
            return ForkServer(env, self._server_preload(scenario), command_prefix=cmd, log=log)

        servers = ProfileServers(
            make,
            lambda u: self.report_base(u, run_dir),
            run_dir,
            self.cfg.harness.timeout_s,
            self.cfg.nsys.server_lanes,
        )
        for scenario in scenarios:
            servers.start(scenario)
        self.progress.activity(f"starting {len(scenarios)} traced fork servers (nsys)")
        return servers  # the first workers set up meanwhile; they measure once it is done

    def _server_preload(self, scenario: str) -> list[str]:
        """What a scenario's traced server imports besides torch: the fork server's list, less
        Inductor's compiler unless one of its variants compiles (as :meth:`unforked_preload`)."""
        return self._preload(bool(self._compiling(scenario)))

    @property
    def overlap_capture_stop(self) -> bool:
        """harness.overlap_capture_stop as it applies here: on a GPU (where a profiled worker
        stops a capture range), with ``overlap``."""
        return self.cfg.harness.overlap_capture_stop and self.overlapping and self.device == "cuda"

    def _profile_command(self, unit: Unit, run_dir: Path, program: list[str]) -> list[str]:
        """``nsys profile ... program`` writing the unit's report (stale reports removed)."""
        assert self.nsys is not None
        base = self.report_base(unit, run_dir)
        for ext in rf.REPORT_SUFFIXES:
            base.with_suffix(ext).unlink(missing_ok=True)
        return nsys_mod.profile_command(
            self.nsys,
            base,
            program,
            trace=self.trace_for(unit.scenario),
            gpu=self.device == "cuda",
            cuda_memory_usage=self.cfg.nsys.cuda_memory_usage,
            cuda_graph_trace=self.cfg.nsys.cuda_graph_trace,
            extra_args=self.cfg.nsys.extra_args,
        )

    def run_unit(self, unit: Unit, run_dir: Path, *, defer_export: bool = False) -> Outcome:
        """Run one worker process on its own and wait for it (its gate opens at once); a good
        profile is exported now, or queued on :attr:`pending_exports` with ``defer_export``."""
        item = self.start(unit, run_dir)
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
        return self._settle(unit, run_dir, outcome, defer_export)

    def _settle(self, unit: Unit, run_dir: Path, outcome: Outcome, defer_export: bool) -> Outcome:
        """A worker's outcome once it has ended: a profile's report is exported, queued, or
        left to nsys to finish in the background (:attr:`finishing`)."""
        if not unit.is_profile:
            return node_outcome(self.cfg, outcome, unit.label)
        session = self._forked_from.pop(unit, None)
        if session is not None and self.servers is not None:
            handle = self.servers.ended(session, unit, outcome.status == Status.OK)
            if handle is None:
                return outcome
            outcome = replace(outcome, status=Status.FINALIZING, finishing=handle)
        if outcome.finishing is not None:  # nsys writes the report while the next one runs
            self.finishing[unit] = outcome
            self.pending_exports.append(unit)
            return outcome
        outcome = self._profile_outcome(unit, run_dir, outcome)
        base = self.report_base(unit, run_dir)
        if outcome.status != Status.OK:
            return outcome
        if defer_export and base.with_suffix(rf.REPORT_SUFFIX).is_file():
            self.pending_exports.append(unit)
            return outcome
        return self._export(unit, base, unit.dir(run_dir), outcome)

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
            # left in self.finishing while waited for, so a stop signal meanwhile kills it
            if isinstance(outcome.finishing, ReportHandle):
                done = self._served_report(unit, outcome)
            else:
                done = finish(outcome, unit.dir(run_dir), self.cfg.harness.timeout_s, unit.label)
            del self.finishing[unit]
            done = self._profile_outcome(unit, run_dir, done)
            self.record(run_dir, unit, done)
            if done.status != Status.OK and unit in self.pending_exports:
                self.pending_exports.remove(unit)

    def _served_report(self, unit: Unit, outcome: Outcome) -> Outcome:
        """Wait for a served worker's report: its session ends, nsys writes the reports and
        the unit's own is moved into its profile folder."""
        handle = outcome.finishing
        assert isinstance(handle, ReportHandle)
        t0 = time.perf_counter()
        try:
            rc = handle.wait(self.cfg.harness.timeout_s)
        except subprocess.TimeoutExpired:
            rc, handle.why = (
                1,
                f"nsys still wrote its reports after {self.cfg.harness.timeout_s:g} s",
            )
        done = replace(outcome, status=Status.OK, finishing=None)
        done.finalize_s = time.perf_counter() - t0
        if rc == 0:
            self._served_units.add(unit)
            return done
        qdstrm = self.report_base(unit, handle.session.base.parents[2]).with_suffix(
            rf.QDSTRM_SUFFIX
        )
        if qdstrm.is_file() and self.nsys is not None:
            why = nsys_mod.qdstrm_message(self.nsys, qdstrm, tail(handle.session.log))
        else:
            why = f"no report from its scenario's traced fork server: {handle.why}"
        return replace(
            done,
            status=Status.EVIDENCE_FAILED,
            error=f"{unit.label}: {why} (nsys's output: {handle.session.log})",
        )

    def _export(self, unit: Unit, base: Path, out_dir: Path, outcome: Outcome) -> Outcome:
        """Export ``base``.nsys-rep to SQLite and check it; records how long that took. A
        report a traced fork server wrote must hold the measured window of this unit's own
        worker (its pid)."""
        assert self.nsys is not None
        done = export_report(self.nsys, unit.label, base, outcome, self.cfg.nsys.export_timeout_s)
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
        pending, self.pending_exports = self.pending_exports, []
        if not pending:
            return
        workers = min(self.cfg.harness.export_workers, len(pending))
        self._say(f"exporting {len(pending)} nsys reports to SQLite ({workers} at a time)")
        self.progress.activity(f"exporting {len(pending)} nsys reports")

        def export(unit: Unit) -> Outcome:
            status = rf.read_status(unit.dir(run_dir)) or {}
            known = {k: status.get(k) for k in ("launched_at", "ended_at", "finalize_s", "pid")}
            done = Outcome(
                Status.OK, "", status.get("returncode"), float(status.get("wall_s") or 0.0),
                **known,
            )  # fmt: skip
            return self._export(unit, self.report_base(unit, run_dir), unit.dir(run_dir), done)

        t0 = time.perf_counter()
        with ThreadPoolExecutor(workers) as pool:
            futures = {pool.submit(export, unit): unit for unit in pending}
            for fut in as_completed(futures):
                self.record(run_dir, futures[fut], fut.result())
        self.write_tables(run_dir)
        self._say(f"exported {len(pending)} reports in {time.perf_counter() - t0:.1f} s")

    def record(self, run_dir: Path, unit: Unit, outcome: Outcome) -> None:
        """Write a unit's status.json and report a failure or a skip (once per variant)."""
        out_dir = unit.dir(run_dir)
        with self._write_lock:
            write_json(
                out_dir / rf.STATUS, {**outcome.record(), "unit": asdict(unit), "at": now_utc()}
            )
            for marker in rf.transient_files(out_dir):
                marker.unlink(missing_ok=True)
        status = Status(outcome.status)
        if status == Status.SKIPPED:
            if rf.first_timing(unit.phase):  # once per variant, not once per phase
                self._say(f"skipped {unit.scenario}/{unit.variant}: {outcome.error}")
        elif status in SERVED_RETRY and self._retry_unserved(unit):
            first = outcome.error.splitlines()[0] if outcome.error else outcome.status
            self._say(
                f"{unit.label}: profiling it as a child of its traced fork server failed "
                f"({first}); it runs again as its own nsys process after the others"
            )
        elif status.is_failure:
            self.failures.append(outcome.error)
            self._say(f"FAILED {unit.label}: {outcome.error}")

    def _retry_unserved(self, unit: Unit) -> bool:
        """Whether a failed profile is run again as its own ``nsys profile`` (once, and only
        when it was forked from a traced server): a server's session can end or lose a report
        for reasons of nsys's own, which the worker's variant has no part in."""
        if unit not in self._served_tried or unit in self._serve_failed:
            return False
        self._serve_failed.append(unit)
        return True

    def _run_unserved(self, run_dir: Path) -> None:
        """The profiles whose served attempt failed, each as its own ``nsys profile``, then
        their exports."""
        redo = [u for u in self._serve_failed if rf.unit_status(u.dir(run_dir)) != Status.OK]
        if not redo:
            return
        self._say(f"profiling {len(redo)} variants again, one nsys process each")
        RunLoop(self, redo, self.overlapping, self.cfg.harness.setup_batch).run()
        self.run_exports(run_dir)

    # -- the run loop's host (harness.execution.runloop.Host) --------------------------------------
    def launch(self, unit: Unit) -> Live | Outcome:
        assert self.run_dir is not None
        return self.start(unit, self.run_dir)

    def may_overlap(self, current: Live, unit: Unit) -> bool:
        """``unit`` may start beside ``current`` (tearing down, or setting up in its batch):
        workers of one node, which hold at their gates (a fork server runs its children side
        by side; every rank of a distributed worker holds); a served profile, once a session
        of its scenario runs no worker or ``current``'s capture has been taken (a worker forked
        while a sibling's capture range is open loses its own: harness/execution/profiling.py)."""
        if self.cfg.dist.multinode:
            return False
        session = self._forked_from.get(current.unit)
        if session is None or session.scenario != unit.scenario or not self._served(unit):
            return True
        assert self.servers is not None
        return current.state == WorkerState.TEARDOWN or self.servers.free(unit.scenario)

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
        if self.servers is not None and self.servers.starting():
            return False
        if unit.is_profile or not self._writing_reports():
            return True
        self._say_waiting(unit, self._waited_reports, "nsys to write the last scenario's reports")
        return False

    def _say_waiting(self, unit: Unit, said: set[Unit], what: str) -> None:
        """Say once per unit (``said``) what it waits for."""
        if unit not in said:
            said.add(unit)
            self._say(f"{unit.label} waits for {what}")

    def sets_up_together(self, unit: Unit) -> bool:
        """Single-process workers of a scenario whose set-up neither measures nor leaves
        threads working (``Scenario.setup_alone``). Never a distributed one: both shipped
        ones measure in their set-ups (ddp_bucketing's bandwidth probe and bucket sweep,
        pipeline_imbalance's block costs, which choose the balanced cut)."""
        found = self.found[unit.scenario]
        return found.world_size <= 1 and not found.setup_alone and not self.cfg.dist.multinode

    def _writing_reports(self) -> bool:
        """Whether nsys still writes a report in the background (a closed session's, or a
        profiled worker's whose nsys outlived it)."""
        if self.servers is not None and self.servers.writing():
            return True
        return any(
            o.finishing.poll() is None
            for o in self.finishing.values()
            if not isinstance(o.finishing, ReportHandle)
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

    def ended(self, unit: Unit, outcome: Outcome, live: Live | None) -> list[Unit]:
        """Record a unit that ended (tables rebuilt); units to run again (a profile whose
        early exit lost its GPU activity)."""
        assert self.run_dir is not None
        outcome = self._settle(unit, self.run_dir, outcome, defer_export=True)
        if live is not None and self._relaunch(unit, outcome):
            return [unit]
        if live is not None and self._to_check(unit, outcome):
            outcome, again = self._check_capture(unit, outcome)
            if again:
                return again
        self.record(self.run_dir, unit, outcome)
        self.write_tables(self.run_dir)
        status = Status(outcome.status)
        said = "ok (nsys finishes its report)" if status == Status.FINALIZING else status.value
        self.progress.finished(unit.label, said, outcome.wall_s, live is not None)
        return []

    def _relaunch(self, unit: Unit, outcome: Outcome) -> bool:
        """A profile under its own ``nsys profile`` whose nsys failed before the worker
        started (:func:`harness.execution.execute.never_started`) runs again, once, at once (a served
        one is run again by its own rule)."""
        served = unit in self._served_tried and unit not in self._serve_failed
        if not unit.is_profile or served or unit in self._relaunched:
            return False
        assert self.run_dir is not None
        if not never_started(outcome, unit.dir(self.run_dir)):
            return False
        self._relaunched.add(unit)
        said = tail(unit.dir(self.run_dir) / rf.STDERR, 1) or f"exit code {outcome.returncode}"
        self._say(f"{unit.label}: nsys failed before the worker started ({said}); once more")
        return True

    def scenario_done(self, scenario: str) -> None:
        """The scenario's last worker has ended: its traced fork server is closed (nsys writes
        its reports in the background, beside the next scenario's profiled workers). Every
        export runs once the last worker of the run has ended."""
        if self.servers is not None:
            self.servers.retire(scenario)

    # -- the first early exit under nsys: did nsys keep the GPU activity? ------------------
    def _to_check(self, unit: Unit, outcome: Outcome) -> bool:
        """The first profiled worker that left through os._exit after its capture range."""
        return (
            not self._capture_checked
            and unit.is_profile
            and not isinstance(outcome.finishing, ReportHandle)
            and self._leaves_after_capture()
            and outcome.status in (Status.OK, Status.FINALIZING)
        )

    def _check_capture(self, unit: Unit, outcome: Outcome) -> tuple[Outcome, list[Unit]]:
        """Wait for that worker's report and export it now. Without GPU activity in it nsys
        lost what the worker did, so profiled workers exit normally from here on and the unit
        runs again (returned); else its outcome, exported."""
        assert self.run_dir is not None
        self._capture_checked = True
        out_dir, base = unit.dir(self.run_dir), self.report_base(unit, self.run_dir)
        if outcome.finishing is not None:  # still in self.finishing while waited for
            outcome = finish(outcome, out_dir, self.cfg.harness.timeout_s, unit.label)
            self.finishing.pop(unit, None)
            outcome = self._profile_outcome(unit, self.run_dir, outcome)
        if unit in self.pending_exports:
            self.pending_exports.remove(unit)
        if outcome.status != Status.OK:
            return outcome, []
        outcome = self._export(unit, base, out_dir, outcome)
        if outcome.status != Status.OK or has_gpu_activity(base.with_suffix(rf.SQLITE_SUFFIX)):
            return outcome, []
        self.exit_after_capture = False
        for item in self._live:  # a profiled worker started meanwhile was told to leave early
            if item.unit.is_profile:
                (item.out_dir / rf.EXIT_NORMALLY).touch()
        self._say(
            f"{unit.label}: its export holds no kernels or copies after the worker left through "
            "os._exit past its capture range, so nsys did not keep the GPU activity. Profiled "
            "workers exit normally for the rest of this run (nsys.exit_after_capture=false); "
            "profiling this variant again."
        )
        return outcome, [unit]

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
        """Every unit in order through the run loop (harness.execution.runloop), each scenario's exports
        after its last worker; how it ended."""
        state = RunState.COMPLETE
        self.run_dir, self.exports_s = run_dir, 0.0
        try:
            units = self.units()
            todo = [u for u in units if not self._keep(u, run_dir)]
            self._say(f"run folder: {run_dir}  ({len(units)} worker runs, size={self.size})")
            if len(todo) < len(units):
                self._say(
                    f"resuming: {len(units) - len(todo)} of {len(units)} worker runs finished "
                    f"before and are reused; running the other {len(todo)}"
                )
            self.progress.start(len(units), len(units) - len(todo))
            self.run_exports(run_dir)  # reports a resumed run never exported; nothing runs yet
            self.warmer = self._make_warmer(todo, run_dir)
            self.servers = self._make_servers(todo, run_dir)
            if not self.gpu_shared and (self.cfg.harness.overlap or self.cfg.harness.warm_compile):
                self._say(
                    f"GPU compute mode {', '.join(sorted(set(self.gpu.compute_modes)))}: one "
                    "CUDA process at a time, so workers do not overlap and no compiler-cache "
                    "warm-up runs beside them"
                )
            RunLoop(self, todo, self.overlapping, self.cfg.harness.setup_batch).run()
            t_exports = time.perf_counter()
            if self.servers is not None:
                self.servers.close_all()
            self.run_exports(run_dir)
            self.exports_s = time.perf_counter() - t_exports
            t_again = time.perf_counter()
            self._run_unserved(run_dir)
            walls["served_again_s"] = time.perf_counter() - t_again
            walls["exports_s"] = self.exports_s
            walls["workers_s"] = t_exports - t_start
        except KeyboardInterrupt:
            state = RunState.INTERRUPTED
        except ResultWriteError as exc:
            state = RunState.FAILED
            self._write_failed(exc)
        finally:
            self.progress.close()
            if self.warmer is not None:
                self.warmer.close()
        if state == RunState.INTERRUPTED:
            self._say(
                f"interrupted: finished variants are kept in {run_dir}; finish the rest with "
                f"harness.resume={run_dir}"
            )
        return state

    def _keep(self, unit: Unit, run_dir: Path) -> bool:
        """On resume, a unit that finished before is kept (an export its profile never got is
        queued)."""
        if not self.cfg.harness.resume:
            return False
        status = rf.unit_status(unit.dir(run_dir))
        if status is None or not status.finished:
            return False
        if self._export_missing(unit, run_dir):
            self.pending_exports.append(unit)
        return True

    def _make_warmer(self, todo: list[Unit], run_dir: Path) -> CompileWarmer | None:
        """The background compiler-cache warm-ups of the variants that compile and still run
        (harness.warm_compile); None when there are none."""
        if not self.warming:
            return None
        targets: list[tuple[str, str]] = []
        for unit in todo:
            key = (unit.scenario, unit.variant)
            if key not in targets and unit.variant in self._compiling(unit.scenario):
                targets.append(key)
        if not targets:
            return None

        def start(scenario: str, variant: str) -> tuple[Any, Path]:
            folder = rf.warm_dir(run_dir, scenario, variant)
            folder.mkdir(parents=True, exist_ok=True)
            unit = Unit(scenario, variant, rf.timing_phase(1))
            spec = self._spec(unit, folder, forked=False, warm_only=True)
            cmd = [sys.executable, "-m", "harness.execution.worker", "--spec", str(spec)]
            return launch(cmd, folder, self.worker_env()), folder

        return CompileWarmer(
            targets, start, self._say, self.cfg.harness.timeout_s, self.cfg.harness.warm_parallel
        )

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
        else:
            console.print_unprofiled(table, self.cfg.nsys.enabled, self.nsys is not None)
        walls["diagnosis_s"] = time.perf_counter() - t0
        self.write_timings(run_dir, walls, time.perf_counter() - t_start, say=False)
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

    def write_timings(
        self, run_dir: Path, walls: dict[str, float], total_s: float, *, say: bool = True
    ) -> None:
        """timings.csv (where each worker's wall time went) and wall_time.json (the suite's
        phases, what ran beside what, the settings that change it), so a slow suite shows what
        to fix; ``say``: print it as one line (once, at the end)."""
        try:
            table = build_timings_table(run_dir, self.units())
            rf.write_frame(rf.table_path(run_dir, "timings"), table)
            record = wall_time_record(table, walls, total_s)
            record.update(self._calls(run_dir, total_s))
            record["settings"] = self.speed_settings()
            if self.warmer is not None:
                record["warm_compile"] = self.warmer.summary()
            write_json(rf.wall_time_path(run_dir), {**record, "updated_utc": now_utc()})
        except ResultWriteError as exc:
            self._write_failed(exc)
            return
        if say:
            parts = ", ".join(
                f"{k.removesuffix('_s')} {v:.0f} s" for k, v in record["worker_parts_s"].items()
            )
            hidden = record.get("workers_overlap_s") or 0.0
            self._say(
                f"wall time {total_s:.0f} s; worker processes: {parts}"
                + (f"; {hidden:.0f} s of it ran beside another worker" if hidden >= 0.5 else "")
            )

    def _calls(self, run_dir: Path, total_s: float) -> dict[str, Any]:
        """Each ``harness run`` call's wall time into this run folder (a resumed run has
        several; a device's time limit cuts a long run in two): ``calls_s`` by the call's
        start, and their sum, ``all_calls_s``."""
        try:
            earlier = read_json(rf.wall_time_path(run_dir)) or {}
        except rf.CorruptFileError:
            earlier = {}
        calls = dict(earlier.get("calls_s") or {})
        calls[self.started_utc] = total_s
        return {"calls_s": calls, "all_calls_s": sum(calls.values())}

    def speed_settings(self) -> dict[str, Any]:
        """The settings that change the suite's wall time (issue 25), as this run applied
        them: wall_time.json records them beside the numbers they explain."""
        return {
            "overlap": self.overlapping,
            "overlap_capture_stop": self.overlap_capture_stop,
            "setup_batch": self.cfg.harness.setup_batch if self.overlapping else 1,
            "preload_unforked": self.cfg.harness.preload_unforked,
            "warm_compile": self.warming,
            "exit_after_capture": self._leaves_after_capture(),
            "background_finalize": self.cfg.nsys.background_finalize,
            "fork_server": self.cfg.harness.fork_server,
            "fork_ranks": self.forking_ranks,
            "profile_server": self.cfg.nsys.profile_server and self.nsys is not None,
        }

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
        from harness.judge import scoring
        from harness.judge import verdicts as V

        th = diagnosis_dict(self.cfg)
        diag = V.diagnose_run(run_dir, self.found, table, thresholds=th)
        found_csv = rf.table_path(run_dir, "findings")
        findings = pd.read_csv(found_csv) if found_csv.is_file() else None
        verdict = V.verdicts(
            diag, table, self.found, min_ci_low=th["verdict_min_ci_low"],
            main_metric=th["main_metric"], findings=findings,
        )  # fmt: skip
        matrix, scores = scoring.confusion(diag)
        rf.write_frame(rf.table_path(run_dir, "diagnosis"), diag)
        rf.write_frame(rf.table_path(run_dir, "verdicts"), verdict)
        work = V.gpu_work_table(run_dir, self.found, table)
        rf.write_frame(rf.table_path(run_dir, "gpu_work"), work)
        rf.write_frame(rf.table_path(run_dir, "confusion"), matrix.reset_index(names="expected"))
        rf.write_frame(rf.table_path(run_dir, "detector_scores"), scores)
        console.print_diagnosis(verdict, matrix, diag, work)

    # -- tables ---------------------------------------------------------------------------
    def write_tables(self, run_dir: Path) -> pd.DataFrame:
        if self.cfg.dist.node_rank:  # node k of a multi-node run: node 0 holds rank 0's results
            return pd.DataFrame(columns=COLUMNS)
        table = build_runs_table(
            run_dir, self.found, self.cfg, self.selected, self.cfg.harness.bootstrap, self._rows
        )
        rf.write_frame(rf.table_path(run_dir, "runs", ".parquet"), table)
        rf.write_frame(rf.table_path(run_dir, "runs"), table)
        return table
