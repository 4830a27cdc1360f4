"""The run's settings as they apply on this machine: the device, the size, nsys, which speed-ups
are on, the units in order, and what each worker is told (its spec.json and environment).

Every other part of the runner reads them from here, so a setting that depends on the machine
(``harness.overlap`` on a GPU that takes one process at a time, ``nsys.exit_after_capture`` off
once an export lost its GPU work) is decided in one place.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from harness.core import envinfo
from harness.core import nsys as nsys_mod
from harness.core import runfolder as rf
from harness.core.config import SuiteConfig, UsageError, discover_scenarios
from harness.core.runfolder import Unit, write_json
from harness.execution.pinning import CpuPlan, cpu_plan
from harness.execution.plan import distributed_skip, plan_units
from harness.execution.worker import WorkerSpec
from scenarios import Scenario

#: Imported by the fork server when ``harness.fork_preload`` is unset (see its docstring).
PRELOAD_ALWAYS = ("torch._dynamo",)
PRELOAD_GPU = ("torch._inductor.compile_fx",)

NO_GPU_NOTE = (
    "No NVIDIA GPU found (nvidia-smi is missing or lists none): running the smoke sizes on the "
    "CPU. Timings are CPU timings and say nothing about GPU speedups; bf16 autocast, "
    "channels_last, DALI's GPU decoder and cudaProfilerApi capture are off, and nsys (if present) "
    "records NVTX and OS-runtime activity only, no kernels or copies."
)


def module_found(name: str) -> bool:
    """Whether ``name`` can be imported here, found without importing it (its parent packages
    are imported: for ``nvidia.dali``, the ``nvidia`` namespace)."""
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def shares_capture_stop(
    *, profiled: bool, one_node: bool, world: int, overlap_capture_stop: bool
) -> bool:
    """Whether another worker may measure while this one waits in ``cudaProfilerStop`` past its
    window (``Live.quiet_past_window``): a single profiled process on one node, where
    ``harness.overlap_capture_stop`` is on. Never a distributed one: nsys writes a report of every
    rank while it stops, for tens of seconds, and windows measured beside that ran slower than
    their timing, where a single process's stop costs nothing (docs/measurement.md)."""
    return profiled and one_node and world <= 1 and overlap_capture_stop


@dataclass
class RunState:
    """The run's state that changes while it runs, in one place (the rest of :class:`Settings`
    is fixed once the run starts)."""

    exit_after_capture: bool
    """nsys.exit_after_capture as it applies now: turned off once an export lacked the GPU
    activity of a worker that left through os._exit."""
    turn_gate: str | None = None
    """The sliced rounds' turn gate (a Unix socket's path), while the run loop has one."""


class Settings:
    """One ``harness run``'s configuration, the scenarios it found and the machine it runs on;
    what changes while it runs is :attr:`state`."""

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
        #: Why nsys cannot import its captures, seen at set-up ('' when it looks able to).
        self.no_importer = ""
        #: What changes as the run goes on; everything else here is fixed at the start.
        self.state = RunState(exit_after_capture=suite.nsys.exit_after_capture)

    @property
    def exit_after_capture(self) -> bool:
        """nsys.exit_after_capture as this run goes on (:class:`RunState`)."""
        return self.state.exit_after_capture

    @exit_after_capture.setter
    def exit_after_capture(self, value: bool) -> None:
        self.state.exit_after_capture = value

    @property
    def turn_gate(self) -> str | None:
        """The sliced rounds' turn gate (:class:`RunState`)."""
        return self.state.turn_gate

    @turn_gate.setter
    def turn_gate(self, value: str | None) -> None:
        self.state.turn_gate = value

    def find_nsys(self, say: Callable[[str], None]) -> None:
        """Look for nsys (``nsys.enabled``); without it variants run unprofiled, said once."""
        if not self.cfg.nsys.enabled:
            say("nsys.enabled=false: variants run unprofiled (profiled=false).")
            return
        self.nsys = nsys_mod.find(self.cfg.nsys.path)
        if self.nsys is None:
            looked = ", ".join(nsys_mod.candidates(self.cfg.nsys.path) or ["PATH"])
            say(
                "nsys not found (looked at nsys.path, $NSYS, PATH, "
                f"{', '.join(nsys_mod.SEARCH_GLOBS)}{'; ' + looked if looked != 'PATH' else ''}): "
                "running unprofiled, profiled=false. On a CPU box, scripts/install-nsys-cpu.sh "
                "installs it."
            )
            return
        self.no_importer = nsys_mod.importer_missing(self.nsys)
        if self.no_importer and self.cfg.nsys.profile_server:
            say(
                f"nsys cannot import its captures: {self.no_importer}. Profiles run as their "
                "own nsys process each, not from traced fork servers (whose sessions would wait "
                "for the importer in vain), and leave .qdstrm files only."
            )

    # -- what runs --------------------------------------------------------------------------
    def variants(self, scenario: str) -> list[str]:
        """The scenario's selected variants, in its order."""
        return list(self.cfg.scenario[scenario].variants or self.found[scenario].variant_names)

    def units(self) -> list[Unit]:
        """Every unit in run order; with compiler-cache warm-ups, the scenarios whose variants
        compile run last (their caches fill meanwhile)."""
        variants = {name: self.variants(name) for name in self.selected}
        last = frozenset(n for n in self.selected if self.compiling(n)) if self.warming else None
        return plan_units(
            self.cfg,
            self.selected,
            variants,
            self.nsys is not None,
            last or frozenset(),
            kineto=self.cfg.kineto.enabled,
        )

    def sliced(self, unit: Unit) -> bool:
        """Whether ``unit`` is timed in a sliced round (harness.timing.slices): a timing round
        of a single-process scenario on one node that allows it (``Scenario.slice_rounds``)."""
        return (
            self.cfg.harness.timing.slices
            and rf.is_timing(unit.phase)
            and self.found[unit.scenario].world_size <= 1
            and self.found[unit.scenario].slice_rounds
            and not self.cfg.dist.multinode
        )

    def cpu_plan(self) -> CpuPlan | None:
        """Where a sliced round's threads run (harness.timing.pin)."""
        return cpu_plan(self.cfg.harness.timing.pin)

    def compiling(self, scenario: str) -> list[str]:
        """The scenario's selected variants whose set-up compiles and that run here."""
        scen = self.found[scenario]
        return [
            v
            for v in self.variants(scenario)
            if scen.variant(v).compiles
            and not self.skip_reason(Unit(scenario, v, rf.timing_phase(1)))
            and scen.world_size <= 1
        ]

    def skip_reason(self, unit: Unit) -> str:
        """Why this machine cannot run ``unit`` ('' when it can): the reason alone, since the
        status says 'skipped' and the variant and round are columns of their own."""
        variant = self.found[unit.scenario].variant(unit.variant)
        if variant.needs_gpu and self.device != "cuda":
            return f"this machine has no GPU: {variant.needs_gpu}"
        if variant.needs_module and not module_found(variant.needs_module):
            return (
                f"{variant.needs_module} is not installed in this environment "
                "(an optional extra of the project: scripts/setup.sh installs them all)"
            )
        world = self.found[unit.scenario].world_size
        gpus = len(self.gpu.names) if self.device == "cuda" else None
        return distributed_skip(self.cfg, unit, world, gpus)

    def report_base(self, unit: Unit, run_dir: Path) -> Path:
        """The profile's report path without its suffix (.nsys-rep, .qdstrm, .sqlite)."""
        return rf.report_base(run_dir, unit, self.cfg.dist.node_rank)

    def trace_for(self, scenario: str) -> list[str]:
        """nsys ``--trace`` for a scenario: its own ``nsys_trace`` or ``nsys.trace``."""
        own = getattr(self.cfg.scenario[scenario], "nsys_trace", None)
        return list(own) if own else list(self.cfg.nsys.trace)

    # -- which speed-ups apply here ----------------------------------------------------------
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

    @property
    def overlap_capture_stop(self) -> bool:
        """harness.overlap_capture_stop as it applies here: on a GPU (where a profiled worker
        stops a capture range), with ``overlap``."""
        return self.cfg.harness.overlap_capture_stop and self.overlapping and self.device == "cuda"

    @property
    def forking_ranks(self) -> bool:
        """harness.fork_ranks as it applies here: the ranks of a distributed timing unit are
        forked from the fork server (``harness.fork_server``) on one node; else torchrun."""
        h = self.cfg.harness
        return h.fork_ranks and h.fork_server and not self.cfg.dist.multinode

    @property
    def serving(self) -> bool:
        """nsys.profile_server as it applies on this machine: nsys found, its importer too."""
        return self.cfg.nsys.profile_server and self.nsys is not None and not self.no_importer

    def server_mode(self, scenario: str) -> bool:
        """nsys.profile_server as it applies to ``scenario``: single-process, nsys and its
        importer found."""
        return self.serving and self.found[scenario].world_size <= 1 and not self.cfg.dist.multinode

    def leaves_after_capture(self) -> bool:
        """Profiled workers leave through os._exit after their capture (GPU: a capture range)."""
        return self.exit_after_capture and self.device == "cuda"

    def speed_settings(self) -> dict[str, Any]:
        """The settings that change the suite's wall time (issue 25), as this run applied
        them: wall_time.json records them beside the numbers they explain."""
        return {
            "overlap": self.overlapping,
            "overlap_capture_stop": self.overlap_capture_stop,
            "setup_batch": self.cfg.harness.setup_batch if self.overlapping else 1,
            "preload_unforked": self.cfg.harness.preload_unforked,
            "warm_compile": self.warming,
            "exit_after_capture": self.leaves_after_capture(),
            "background_finalize": self.cfg.nsys.background_finalize,
            "fork_server": self.cfg.harness.fork_server,
            "fork_ranks": self.forking_ranks,
            "profile_server": self.serving,
            "slices": self.cfg.harness.timing.slices,
            "pinned": self.cpu_plan().record() if self.cpu_plan() is not None else None,
            "budget_s": self.cfg.harness.timing.budget_s,
        }

    # -- what a worker is told ---------------------------------------------------------------
    def spec(self, unit: Unit, out_dir: Path, *, forked: bool, warm_only: bool = False) -> Path:
        """Write the worker's spec.json; ``forked``: started by the fork server (which has
        imported the preload modules already)."""
        scen_cfg = OmegaConf.to_container(self.raw.scenario[unit.scenario], resolve=True)
        preload = self.cfg.harness.preload_unforked and not forked
        probe = self.cfg.harness.host_probe
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
            exit_after_capture=unit.is_profile and self.leaves_after_capture(),
            warm_only=warm_only,
            capture_lead_steps=self.cfg.nsys.capture_lead_steps
            if unit.is_profile and self.device == "cuda"
            else 0,
            probe_launches=probe.launches if probe.enabled and not warm_only else 0,
            probe_python_loop=probe.python_loop,
            kineto=asdict(self.cfg.kineto) if unit.is_kineto and not warm_only else None,
        )
        if self.sliced(unit) and self.turn_gate is not None and not warm_only:
            self._slice_spec(spec)
        path = out_dir / rf.SPEC
        write_json(path, asdict(spec))
        return path

    def _slice_spec(self, spec: WorkerSpec) -> None:
        """A sliced round's worker: the turn gate instead of ``.go``, its warm-up and window
        budgets, and where its threads run."""
        timing = self.cfg.harness.timing
        spec.turn_gate = self.turn_gate
        if timing.warmup_s is not None and spec.max_warmup_s is not None:
            spec.max_warmup_s = min(spec.max_warmup_s, timing.warmup_s)
        spec.warmup_min_steps = timing.warmup_min_steps
        if timing.window_s is not None and spec.max_window_s is not None:
            spec.max_window_s = min(spec.max_window_s, timing.window_s)
        spec.min_steps = timing.min_steps
        spec.slice_probes = timing.slice_probes
        plan = self.cpu_plan()
        spec.cpus = plan.record() if plan is not None else None

    def fork_preload(self) -> list[str]:
        """What the fork server imports besides torch (``harness.fork_preload``)."""
        if self.cfg.harness.fork_preload is not None:
            return list(self.cfg.harness.fork_preload)
        return [*PRELOAD_ALWAYS, *(PRELOAD_GPU if self.device == "cuda" else ())]

    def unforked_preload(self, unit: Unit) -> list[str]:
        """What a worker started as a new interpreter imports with torch: the fork server's
        list, less Inductor's compiler (``PRELOAD_GPU``, seconds of a profiled worker's imports)
        unless its variant compiles; an explicit ``harness.fork_preload`` is kept."""
        return self.preload(self.found[unit.scenario].variant(unit.variant).compiles)

    def preload(self, compiles: bool) -> list[str]:
        """``fork_preload``, less Inductor's compiler where nothing to be run compiles (an
        explicit ``harness.fork_preload`` is kept as it is)."""
        mods = self.fork_preload()
        if self.cfg.harness.fork_preload is not None or compiles:
            return mods
        return [m for m in mods if m not in PRELOAD_GPU]

    def worker_env(self) -> dict[str, str]:
        """Compiler caches in the harness cache folder, shared by every worker and kept between
        runs: only the first process that compiles a graph pays for it (a cold compile takes about
        ten times a warm one: docs/measurement.md). Variables already set win."""
        cache = self.cfg.harness.cache_path()
        return {
            "TORCHINDUCTOR_CACHE_DIR": str(cache / "torchinductor"),
            "TRITON_CACHE_DIR": str(cache / "triton"),
        }

    def server_env(self) -> dict[str, str]:
        """A fork server's environment: the parent's, with the workers' compiler caches where
        the parent sets none. Importing Inductor resolves its cache folder (and sets
        TORCHINDUCTOR_CACHE_DIR to /tmp's default where unset), so a server started without
        them handed its forked workers other caches than the background warmer filled, and the
        compiled variants' first timing runs compiled afresh (docs/measurement.md)."""
        return {**self.worker_env(), **os.environ}
