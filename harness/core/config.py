"""Structured configs (the schemas Hydra validates against) and how configs are composed.

``conf/config.yaml`` is the primary config; ``conf/scenario/<name>.yaml`` selects a scenario and
sits on that scenario's schema (``schema/scenario/<name>`` in the ConfigStore); ``scenario/all``
is generated from the scenarios package. ``conf/diagnosis/default.yaml`` selects the detectors'
thresholds, whose defaults are the ``DiagnosisConfig`` dataclasses here. Validation lives in
``__post_init__`` so a bad value fails before anything runs, naming the key and the range.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

import scenarios
from analysis.detect.config import (  # noqa: F401 - re-exported: the run config's schema
    MAIN_METRIC,
    DiagnosisConfig,
    ThresholdError,
    diagnosis_dict,
)
from analysis.detect.config import diagnosis_thresholds as _thresholds
from analysis.detect.config import parse_overrides as _parse_overrides
from harness.core.errors import UsageError
from harness.core.kernels_config import KernelsConfig
from harness.core.stats import UNSTABLE_SPREAD
from harness.core.timing_config import TimingConfig
from harness.core.tools_config import KinetoConfig, ToolsConfig

SIZES = ("auto", "smoke", "full")

#: ``+scenario=all``: every shipped scenario (see register_configs).
ALL = "all"

#: Environment variable naming extra scenario modules (comma separated dotted names), e.g. the
#: deliberately broken scenarios the tests use. The worker inherits it, so both sides agree.
EXTRA_SCENARIOS_ENV = "BOTTLENECK_SCENARIO_MODULES"


def usable_cores() -> int:
    """The cores this process may run on (its affinity where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def _at_least(section: str, cfg: object, low: int, *fields: str) -> None:
    """Each of ``fields`` of ``cfg`` must be >= ``low``: a bad value stops the run at load,
    named as the config spells it (``section.field``)."""
    for name in fields:
        value = getattr(cfg, name)
        if value < low:
            raise ValueError(f"{section}.{name} must be >= {low}, got {value}")


@dataclass(kw_only=True)
class NsysConfig:
    """How variants are profiled under Nsight Systems."""

    enabled: bool = True
    """Profile each variant after timing it; False runs timing only."""
    path: str | None = None
    """Explicit nsys binary; otherwise $NSYS, PATH and the usual install folders are searched."""
    trace: list[str] = field(default_factory=lambda: ["cuda", "nvtx", "osrt"])
    """APIs to trace (``--trace``)."""
    emit_nvtx: bool = False
    """Add PyTorch's per-operator NVTX ranges (``torch.autograd.profiler.emit_nvtx``); slow."""
    cuda_memory_usage: bool = False
    """Pass ``--cuda-memory-usage=true`` (tracks GPU memory; adds overhead)."""
    cuda_graph_trace: str | None = None
    """``--cuda-graph-trace`` value ('graph' or 'node'); None leaves nsys's default."""
    extra_args: list[str] = field(default_factory=list)
    """More ``nsys profile`` arguments, passed through as a list (never a shell string)."""
    export_timeout_s: float = 900.0
    """Limit for ``nsys export`` of one report."""
    background_finalize: bool = True
    """With one ``nsys profile`` per profiled worker (torchrun, or ``profile_server`` off): once
    it has written its result and exited, go on to the next profiled variant while nsys still
    writes the report (seconds of QdstrmImporter on one CPU core). Only the next
    profiled run (whose step times give the probe effect) shares the box with it, never a
    timing run. False: wait for nsys after every profiled variant."""
    profile_server: bool = True
    """Profile each scenario's single-process variants through traced fork servers: an
    ``nsys profile`` session around a server that imports torch once and forks each profiled
    worker, started with the run; every worker's capture range (cudaProfilerStart/Stop on a
    GPU, its NVTX ``measure`` range on the CPU) becomes a report of its own
    (``--capture-range-end=repeat``), written in the background once the scenario's last
    profiled worker has ended (harness/execution/profiling.py). It saves each profiled worker a fresh
    interpreter's imports and half of cudaProfilerStop (docs/configuration.md has the
    measured wall). A worker that fails there runs again, once, as its own ``nsys profile`` after the others.
    False: one ``nsys profile`` per profiled worker. torchrun workers are always profiled on
    their own."""
    capture_lead_steps: int = 2
    """On a GPU, steps a profiled worker runs inside its capture range before its measured
    window (and its NVTX ``measure`` range, which the diagnosis reads): the first steps after
    cudaProfilerStart run slow under nsys (two to three times the steady step), which would
    otherwise go into the probe effect taken from the window's mean step."""
    server_lanes: int = 2
    """Traced sessions per scenario (``profile_server``). A worker forked while a sibling of
    its session is inside its capture range loses its capture, and nsys 2025.3 then ends the
    session (with one session per scenario, a quarter to half of the served workers had to run
    again). With two, the next worker is forked from the session
    that runs none, while the last one's capture is taken; with one, it is forked only once
    the last one's cudaProfilerStop has returned."""
    exit_after_capture: bool = True
    """On a GPU, a profiled worker leaves through ``os._exit`` once its result is written: its
    capture range has stopped by then, and cudaProfilerStop returns only once nsys holds the
    capture, so the interpreter's tear-down under nsys (1-3 s) is skipped. The run checks the
    first such export for GPU activity and, if nsys lost it, turns this off and profiles that
    variant again. False: profiled workers exit normally."""

    def __post_init__(self) -> None:
        if self.cuda_graph_trace not in (None, "graph", "node"):
            raise ValueError(
                f"nsys.cuda_graph_trace must be null, 'graph' or 'node', got {self.cuda_graph_trace!r}"
            )
        if self.export_timeout_s <= 0:
            raise ValueError(f"nsys.export_timeout_s must be > 0, got {self.export_timeout_s}")
        _at_least("nsys", self, 0, "capture_lead_steps")
        _at_least("nsys", self, 1, "server_lanes")


@dataclass(kw_only=True)
class HostProbeConfig:
    """The host-speed probes every timing and profiled worker runs right before and right after
    its measured window (outside it and outside nsys's capture range): on a KVM guest the same
    Python loop ran 1.65x faster for a few hundred ms after load, and host-bound baselines moved
    by up to 38% between two runs minutes apart; the probes make that drift visible in the run
    (result.json's ``host_probe``, timings.csv's and runs.csv's ``probe_*`` columns)."""

    enabled: bool = True
    """Run the probes; False: result.json's ``host_probe`` is null and the columns are blank."""
    launches: int = 2000
    """Launches of the launch-rate probe: ``x.add_(1)`` on a 1-element tensor on the worker's
    device, timed on the host from the first call to the return of the last (``launch_us``:
    the CUDA launch cost on a GPU, torch's dispatch cost on the CPU; 2000 take 10-30 ms)."""
    python_loop: int = 300_000
    """Iterations of the pure-Python loop probe (``python_ms``: a summing ``for`` loop, the
    interpreter's speed that bounds a host-bound step; 300,000 take 10-20 ms)."""

    def __post_init__(self) -> None:
        _at_least("harness.host_probe", self, 1, "launches", "python_loop")


@dataclass(kw_only=True)
class HarnessConfig:
    """How the parent runs variants and where results go."""

    results_dir: str = "results"
    """Parent folder of run folders (``<results_dir>/<utc-time>_<gpu>/``)."""
    resume: str | None = None
    """An earlier run folder to finish: variants that already finished are skipped. Alone it
    resumes the run as it was started (its manifest's scenarios and overrides); overrides given
    with it may only add to those."""
    timeout_s: float = 900.0
    """Wall-clock limit for one worker process (one variant, one phase), not counting the time
    it waits at its gate while the workers started before it measure."""
    repeats: int = 3
    """Unprofiled timing rounds per variant. Each round times every variant of a scenario back
    to back (in variant order in odd rounds, reversed in even ones, so no variant always runs
    first after a pause), and speedups are paired within rounds: the host's drift over minutes
    (host-bound baselines move by tens of percent between runs on one machine) cancels in a
    round's ratio. Three rounds give the paired interval rounds to resample and
    ``round_spread`` a range to flag ``unstable`` variants; each more round costs one more
    process per variant."""
    unstable_spread: float = UNSTABLE_SPREAD
    """A variant whose timing rounds' mean step times spread by more than this (max / min - 1)
    is flagged ``unstable`` in runs.csv, the end-of-run table and the report."""
    host_probe: HostProbeConfig = field(default_factory=HostProbeConfig)
    """Host-speed probes around every worker's measured window (launch rate, Python loop)."""
    timing: TimingConfig = field(default_factory=TimingConfig)
    """How timing rounds run (sliced or back to back) and how many a scenario gets."""
    seed: int = 0
    """Seed for weights and data; all variants of a scenario share it."""
    cache_dir: str | None = None
    """Generated data sets; default ``$XDG_CACHE_HOME/bottleneck-suite`` or ``~/.cache/...``."""
    progress: bool = True
    """Show a tqdm bar over scenario x variant x phase."""
    report: bool = True
    """Write report.html and report.md at the end of the run; false: the tables only (the
    tests that never read the report; ``harness report RUN_DIR`` writes it later)."""
    bootstrap: int = 2000
    """Bootstrap resamples for speedup confidence intervals."""
    memory_cap_gb: float | None = None
    """Address-space cap (GiB) for each CPU worker (RLIMIT_AS), so a runaway variant fails as
    'oom' instead of swapping the box; ignored on the GPU, where CUDA maps far more address space
    than it uses. None: no cap."""
    max_window_s: float | None = 10.0
    """Measured-window budget per worker: a variant whose ``steps`` would take longer (a 1.3 s
    data-bound baseline step, say) measures fewer steps, never fewer than ``min_steps``. Sizes
    and severities stay as they are; only the number of measured steps shrinks. None: off."""
    min_steps: int = 5
    """The fewest measured steps a shortened window keeps."""
    max_warmup_s: float | None = 5.0
    """Warm-up budget per worker: the warm-up ends once it has run this long and at least 4
    steps (a 1 s data-bound baseline step warms up in 5 steps, not 10). Compilation and CUDA
    graph capture happen in set-up, outside it. Not applied to torchrun workers, whose ranks
    must run the same steps. None: every planned warm-up step."""
    profile_max_window_s: float | None = 3.0
    """Measured-window budget of the profiled run: it supplies evidence and the probe effect,
    not the timing, so a few seconds of steady state are enough, and a shorter capture makes
    nsys write and export its report faster; the PyTorch Profiler's run (``kineto.enabled``)
    measures the same budget. None: same as ``max_window_s``."""
    fork_server: bool = True
    """Start unprofiled single-process workers by forking a server that has imported torch and
    the scenarios once (each worker is still a fresh process with its own CUDA context), instead
    of a new interpreter each time: saves the ~4 s of imports per worker. Profiled workers
    start as new processes (or from traced servers: ``nsys.profile_server``); the ranks of a
    distributed timing unit are forked too (``fork_ranks``). False: every unprofiled worker
    starts as a new interpreter, distributed ones under torchrun."""
    fork_ranks: bool = True
    """On one node (``dist.nnodes=1``), with ``fork_server``: fork the N ranks of a distributed
    timing unit from the fork server, each a process of its own with the environment torchrun
    gives a rank (rank 0 hosts the rendezvous store), instead of ``torchrun --standalone``
    starting N fresh interpreters (each unit's imports and start-up again). A failing rank stops the others, as under torchrun. Profiled units
    always run under ``nsys profile ... torchrun``. False: torchrun."""
    fork_preload: list[str] | None = None
    """Modules the fork server imports besides torch and the scenarios, so that forked workers
    skip them too. None: ``torch._dynamo`` (every ``torch.optim`` optimizer imports it when it
    is built: 2-7 s of a worker's "build_model" stage otherwise), plus
    ``torch._inductor.compile_fx`` on a GPU (``torch.compile`` and the first TorchDispatchMode
    import it; on the CPU few workers compile, so the server does not pay it there)."""
    export_workers: int = 4
    """nsys exports run after each scenario's last worker, this many at once (none overlaps a
    measurement)."""
    diagnose_jobs: int | None = None
    """Exports the end-of-run diagnosis reads at once, each in a process of its own (after the
    last worker, so none runs beside a measurement). None: half the usable cores, at most 8
    (1 on a 2-core box)."""
    overlap: bool = True
    """Start the next worker while the current one tears down (a profiled worker spends seconds
    there while nsys takes its capture): the next one imports and sets up beside
    it, then waits before its warm-up until the current one has exited, so no warm-up or
    window runs beside another worker (every rank of a distributed worker waits at the gate;
    not across nodes, where workers run in lockstep without one). False: each worker starts
    once the previous one has exited."""
    setup_batch: int = 4
    """With ``overlap``: single-process workers of one scenario (not ``Scenario.setup_alone``;
    distributed ones, whose set-ups measure, one at a time) are started up to this many at
    once while none measures, so their set-ups run side by
    side; each then waits at its gate and they measure one after the other, never beside a
    set-up (a set-up leaves the GPU idle for seconds, a compiled variant's for longer). 1: one
    at a time."""
    overlap_capture_stop: bool = True
    """On a GPU, with ``overlap``: the held worker goes on while the previous one, a profiled
    worker of the same scenario past its window, waits in cudaProfilerStop for nsys to take its
    capture while nsys works beside it (with served profiling the two are in different
    sessions: ``nsys.server_lanes``): each profiled worker's stop takes seconds of the run's
    critical path otherwise, and nsys already converts a closed session's captures beside the
    next scenario's windows. False: warm up once the previous exited."""
    profile_beside: int = 2
    """Profiled workers past their windows, each only waiting in cudaProfilerStop or leaving
    (``overlap_capture_stop``), that the next one may be launched and set up beside (a fork
    also needs a traced session running none: ``nsys.server_lanes``); 1: beside one."""
    preload_unforked: bool = True
    """Workers started as new interpreters (profiled ones, which nsys must start; torchrun
    ranks; all with ``fork_server=false``) import the fork server's preload modules
    (``fork_preload``) with torch, as forked workers have them: ``torch._dynamo`` is then
    imported before the set-up (and, with ``overlap``, beside the previous worker's
    tear-down) rather than by the first optimizer inside it, within the set-up. Inductor's
    compiler (``torch._inductor.compile_fx``) only where the variant compiles: it more than
    doubles a worker's imports."""
    warm_compile: bool | None = None
    """Fill the compiler caches (Inductor, Triton) for variants that compile
    (``Variant.compiles``) in a background process at the lowest CPU priority, paused while
    any worker warms up or measures; scenarios with such variants run last, so the cold
    compile (about a minute per variant on a GPU) leaves the critical path. None: on a GPU
    only (the CPU smoke sizes compile in seconds); False: the first timing run compiles."""
    warm_parallel: int = 2
    """Compiler-cache warm-ups run at once (``warm_compile``): paused while workers measure,
    one at a time took about twice their work in wall, so a second compiled variant's first
    run waited for its cache."""

    def diagnosis_processes(self) -> int:
        """Exports the diagnosis reads at once: ``diagnose_jobs``, or half the cores this
        process may use, at most 8 (1 on a 2-core box, where a read's threads fill both)."""
        if self.diagnose_jobs is not None:
            return self.diagnose_jobs
        return max(1, min(8, usable_cores() // 2))

    def __post_init__(self) -> None:
        if self.max_window_s is not None and self.max_window_s <= 0:
            raise ValueError(
                f"harness.max_window_s must be > 0 seconds or null, got {self.max_window_s}"
            )
        _at_least("harness", self, 1, "setup_batch", "warm_parallel", "profile_beside")
        if self.max_warmup_s is not None and self.max_warmup_s <= 0:
            raise ValueError(
                f"harness.max_warmup_s must be > 0 seconds or null, got {self.max_warmup_s}"
            )
        if self.profile_max_window_s is not None and self.profile_max_window_s <= 0:
            raise ValueError(
                "harness.profile_max_window_s must be > 0 seconds or null, "
                f"got {self.profile_max_window_s}"
            )
        _at_least("harness", self, 1, "min_steps", "export_workers")
        if self.diagnose_jobs is not None:
            _at_least("harness", self, 1, "diagnose_jobs")
        if self.timeout_s <= 0:
            raise ValueError(f"harness.timeout_s must be > 0 seconds, got {self.timeout_s}")
        _at_least("harness", self, 1, "repeats")
        if self.unstable_spread <= 0:
            raise ValueError(f"harness.unstable_spread must be > 0, got {self.unstable_spread}")
        _at_least("harness", self, 100, "bootstrap")
        if self.memory_cap_gb is not None and self.memory_cap_gb <= 0:
            raise ValueError(
                f"harness.memory_cap_gb must be > 0 GiB or null, got {self.memory_cap_gb}"
            )

    def window_budget_s(self, phase: str) -> float | None:
        """The measured-window budget of a worker in ``phase`` ('timing-<r>', 'profile' or
        'kineto': the PyTorch Profiler's run measures the same window as nsys's)."""
        from harness.core.runfolder import is_kineto, is_profile

        profiled = is_profile(phase) or is_kineto(phase)
        if profiled and self.profile_max_window_s is not None:
            return self.profile_max_window_s
        return self.max_window_s

    def cache_path(self) -> Path:
        if self.cache_dir:
            return Path(self.cache_dir).expanduser()
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        return Path(base) / "bottleneck-suite"


#: torchrun rendezvous backends the harness can drive across nodes (see DistConfig.rdzv_backend).
RDZV_BACKENDS = ("static", "c10d")


@dataclass(kw_only=True)
class DistConfig:
    """How distributed scenarios (``world_size`` > 1) are launched through torchrun.

    One node (the default): ``torchrun --standalone --nproc-per-node=N``. Several nodes: every
    node runs the same ``harness run`` command with its own ``node_rank``; node 0 writes the usual
    run folder ``<harness.results_dir>/<run_name>/`` and node k its own run folder inside it,
    ``<run_name>/node<k>/`` (reports named ``<scenario>__<variant>-node<k>.nsys-rep``).
    """

    nnodes: int = 1
    """Machines taking part; above 1 each one runs the harness with its own node_rank."""
    node_rank: int = 0
    """This machine's place, 0..nnodes-1. Node 0 hosts the rendezvous and global rank 0, which
    writes result.json (the step times in runs.csv are node 0's)."""
    nproc_per_node: int | None = None
    """Processes (GPUs) per node; None: the scenario's world_size. The world is nnodes times this."""
    rdzv_endpoint: str | None = None
    """host:port of node 0, reachable from every node; required when nnodes > 1."""
    rdzv_backend: str = "static"
    """'static' (default): global ranks follow node_rank, so rank 0 is on node 0. 'c10d': torchrun's
    dynamic rendezvous, which ignores node_rank and orders nodes by host name, so node 0 may not
    hold rank 0 (its variants then end 'no_result')."""
    rdzv_id: str | None = None
    """Rendezvous id shared by the nodes (default: run_name); each variant run appends
    '-<scenario>-<variant>-<phase>' so two nodes never join different variants."""
    rdzv_timeout_s: float = 900.0
    """How long a node waits for the others at each variant's rendezvous."""
    run_name: str | None = None
    """Run folder name under harness.results_dir that every node writes into; required when
    nnodes > 1 (a shared file system, or copy node k's 'node<k>/' folder into node 0's after)."""

    def __post_init__(self) -> None:
        _at_least("dist", self, 1, "nnodes")
        if not 0 <= self.node_rank < self.nnodes:
            raise ValueError(
                f"dist.node_rank must be in 0..{self.nnodes - 1} (dist.nnodes={self.nnodes}), "
                f"got {self.node_rank}"
            )
        if self.nproc_per_node is not None and self.nproc_per_node < 1:
            raise ValueError(f"dist.nproc_per_node must be >= 1 or null, got {self.nproc_per_node}")
        if self.rdzv_backend not in RDZV_BACKENDS:
            raise ValueError(
                f"dist.rdzv_backend must be one of {RDZV_BACKENDS}, got {self.rdzv_backend!r}"
            )
        if self.rdzv_timeout_s <= 0:
            raise ValueError(f"dist.rdzv_timeout_s must be > 0 seconds, got {self.rdzv_timeout_s}")
        for key in ("run_name", "rdzv_id"):
            value = getattr(self, key)
            if value is not None and (
                not value
                or value in (".", "..")
                or not all(c.isalnum() or c in "._-" for c in value)
            ):
                raise ValueError(
                    f"dist.{key} must be a plain name (letters, digits, '.', '_', '-'), got {value!r}"
                )
        if self.nnodes == 1:
            return
        host, _, port = (self.rdzv_endpoint or "").rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(
                f"dist.rdzv_endpoint must be HOST:PORT of node 0 when dist.nnodes > 1, got "
                f"{self.rdzv_endpoint!r}"
            )
        if not self.run_name:
            raise ValueError(
                "dist.run_name is required when dist.nnodes > 1: the run folder every node "
                "writes into, e.g. dist.run_name=ddp-2node-1"
            )

    @property
    def multinode(self) -> bool:
        return self.nnodes > 1


# --- diagnosis thresholds ----------------------------------------------------------------------
#
# The dataclasses below are the single source of the detectors' thresholds: their defaults are
# the defaults, their docstrings the documentation. ``conf/diagnosis/default.yaml`` only selects
# them (an alternative file, ``diagnosis=NAME``, may set values over them). To add a threshold:
# one field with a default and a docstring at the end of its section; the unit in its name
# validates it (see _Section). ``analysis.detect.load_thresholds`` and ``diagnosis_dict`` hand
# the detectors the same values as a plain nested dict (``cfg["data_stall"]["min_gap_ms"]``).


def diagnosis_thresholds(
    overrides: Mapping[str, Any] | None = None, name: str = "default"
) -> dict[str, Any]:
    """:func:`analysis.detect.config.diagnosis_thresholds` with ``conf/diagnosis/<name>.yaml``
    (what ``harness diagnose`` uses); an invalid value is a UsageError naming the key."""
    path = config_dir() / "diagnosis" / f"{name}.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"cannot find the diagnosis thresholds {path}")
    try:
        return _thresholds(overrides, path)
    except ThresholdError as exc:
        raise UsageError(str(exc)) from exc


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """``["host_sync.min_saving_share=0.2", ...]`` as a nested dict, validated (UsageError)."""
    try:
        return _parse_overrides(items)
    except ThresholdError as exc:
        raise UsageError(str(exc)) from exc


@dataclass(kw_only=True)
class SuiteConfig:
    """Top-level schema: what to run, at which size, and how."""

    size: str = "auto"
    """'smoke' (CPU, seconds), 'full' (GPU) or 'auto' (full when a GPU is present)."""
    harness: HarnessConfig = field(default_factory=HarnessConfig)
    """Parent-side settings."""
    nsys: NsysConfig = field(default_factory=NsysConfig)
    """Profiler settings."""
    dist: DistConfig = field(default_factory=DistConfig)
    """torchrun launch of distributed scenarios: processes per node, nodes, rendezvous."""
    diagnosis: DiagnosisConfig = field(default_factory=DiagnosisConfig)
    """Detector thresholds and the verdict's bar (config group ``diagnosis``)."""
    kineto: KinetoConfig = field(default_factory=KinetoConfig)
    """The PyTorch Profiler's (Kineto) run of every variant, for the tools that read it (HTA)."""
    tools: ToolsConfig = field(default_factory=ToolsConfig)
    """Profiler tools scored against the run's ground truth after the diagnosis
    (``tools_*.csv``, the report's "Tools against the ground truth")."""
    kernels: KernelsConfig = field(default_factory=KernelsConfig)
    """Nsight Compute's row after the diagnosis (``kernels.csv``; ``kernels.enabled=false``)."""
    scenario: dict[str, Any] = field(default_factory=dict)
    """Selected scenarios by name, each validated against its own schema."""

    def __post_init__(self) -> None:
        if self.size not in SIZES:
            raise ValueError(f"size must be one of {SIZES}, got {self.size!r}")


def extra_scenario_modules() -> list[str]:
    raw = os.environ.get(EXTRA_SCENARIOS_ENV, "")
    return [m.strip() for m in raw.split(",") if m.strip()]


def discover_scenarios() -> dict[str, scenarios.Scenario]:
    """Shipped scenarios plus any named in $BOTTLENECK_SCENARIO_MODULES."""
    return scenarios.discover(extra_scenario_modules())


def checkout_conf() -> Path:
    """The checkout's ``conf/`` (a run from a checkout that is not installed, as on the GPU
    machine): beside the ``harness`` package."""
    return Path(__file__).resolve().parents[2] / "conf"  # <checkout>/harness/core/config.py


def config_dir() -> Path:
    """The ``conf/`` folder: packaged as ``harness.conf`` when installed, else the checkout's."""
    try:
        path = Path(str(resources.files("harness.conf")))
        if (path / "config.yaml").is_file():
            return path
    except ModuleNotFoundError:
        pass
    path = checkout_conf()
    if not (path / "config.yaml").is_file():
        raise FileNotFoundError(f"cannot find the Hydra config folder (looked for {path})")
    return path


def register_configs(found: dict[str, scenarios.Scenario]) -> None:
    """Put the schemas in Hydra's ConfigStore (idempotent), and ``scenario/all``.

    ``+scenario=all`` is every shipped scenario, found by scanning the package (no list kept by
    hand): a config whose defaults list names each one. Plugin scenarios from
    ``$BOTTLENECK_SCENARIO_MODULES`` are selected by name, never by ``all``.
    """
    from hydra.core.config_store import ConfigStore  # here: `diagnose` and `score` need no Hydra

    cs = ConfigStore.instance()
    cs.store(name="suite_schema", node=SuiteConfig)
    yaml_dir = config_dir() / "scenario"
    for name, scen in found.items():
        cs.store(group="schema/scenario", name=name, node=scen.config_cls)
        if not (yaml_dir / f"{name}.yaml").is_file():
            # A plugin scenario without a YAML file is still selectable as +scenario=<name>.
            cs.store(group="scenario", name=name, node=scen.config_cls, package=f"scenario.{name}")
    shipped = [n for n in scenarios.shipped_names() if n in found]
    cs.store(group="scenario", name=ALL, node={"defaults": shipped})


def to_suite(cfg: DictConfig, found: dict[str, scenarios.Scenario]) -> SuiteConfig:
    """Validate a composed config into dataclasses (runs every ``__post_init__``)."""
    suite: SuiteConfig = OmegaConf.to_object(cfg)  # type: ignore[assignment]
    for name, sub in list(suite.scenario.items()):
        if name not in found:
            raise ValueError(f"unknown scenario {name!r}; available: {sorted(found)}")
        if not isinstance(sub, scenarios.ScenarioConfig):
            suite.scenario[name] = found[name].config_cls(**sub)
    return suite


def compose(overrides: list[str]) -> tuple[DictConfig, SuiteConfig]:
    """Compose ``conf/config.yaml`` with overrides, the way the CLI does (for tests and tools)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    found = discover_scenarios()
    register_configs(found)
    check_scenario_overrides(overrides, found)
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = hydra_compose("config", overrides=overrides)
    return cfg, to_suite(cfg, found)


def check_scenario_overrides(overrides: list[str], found: dict[str, scenarios.Scenario]) -> None:
    """Fail early, with the list of scenarios, on an unknown ``+scenario=`` name."""
    available = [*sorted(found), ALL]
    for ov in overrides:
        key, _, value = ov.partition("=")
        if key.lstrip("+~") != "scenario":
            continue
        names = [v.strip() for v in value.strip("[]").split(",") if v.strip()]
        unknown = [n for n in names if n not in available]
        if unknown or not names:
            raise UsageError(
                f"unknown scenario {', '.join(unknown) or '(empty)'}; available: "
                f"{', '.join(available)} (use +scenario=NAME, +scenario=[a,b] or +scenario=all)"
            )
