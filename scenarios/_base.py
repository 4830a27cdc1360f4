"""The scenario contract: what every module under ``scenarios/`` declares and builds.

A scenario module exports one symbol, ``SCENARIO`` (a :class:`Scenario`). The harness finds it by
scanning the package (see :func:`scenarios.discover`), composes its config from
``conf/scenario/<name>.yaml`` over the schema :attr:`Scenario.config_cls`, and asks it, inside a
worker process, for a :class:`Workload` per variant.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from bottlenecks import CLASSES
from scenarios._memory import MemoryEstimate

if TYPE_CHECKING:
    import torch

#: The bottleneck classes the suite knows; each scenario injects exactly one.
BOTTLENECK_CLASSES: tuple[str, ...] = CLASSES

VariantKind = Literal["baseline", "fix", "ideal"]

#: What a variant is declared to show (a check on the measured truth): nothing (``clean``), its
#: scenario's class as the injected pathology (``bottleneck``, the baseline), or that class
#: possibly still present after a fix that does not remove it all (``partial``).
ExpectedRole = Literal["clean", "bottleneck", "partial"]
ROLES: tuple[str, ...] = ("clean", "bottleneck", "partial")


@dataclass(frozen=True, kw_only=True)
class Expectation:
    """What a variant is declared to show: a check on the measured truth, never the truth
    itself. The truth is measured on each run (``harness.judge.truth``: the timed saving of
    removing the cause against the detector's bar); where the declared role disagrees, the
    measurement decides and the verdict's reason says so."""

    role: ExpectedRole
    """``clean``: the cause is removed. ``bottleneck``: the baseline injects the class.
    ``partial``: a fix that may leave part of the class, on some machines or on all."""
    because: str = ""
    """Why (for ``partial``: what may be left of the bottleneck, and where)."""

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"expectation role must be one of {ROLES}, got {self.role!r}")
        if self.role == "partial" and not self.because.strip():
            raise ValueError("a 'partial' expectation needs its 'because'")


@dataclass(frozen=True, kw_only=True)
class Variant:
    """One way of running a scenario's workload."""

    name: str
    """Identifier used on the command line, in folders and in tables."""
    kind: VariantKind
    """``baseline`` carries the pathology, ``fix`` removes it, ``ideal`` is the limit by construction."""
    summary: str
    """One line: what this variant changes relative to the baseline."""
    needs_gpu: str = ""
    """Non-empty when the variant cannot run without CUDA: the reason, shown when it is skipped
    on a CPU box (e.g. 'CUDA graphs capture GPU work only')."""
    needs_module: str = ""
    """A module the variant imports that an install may lack (an optional extra, e.g.
    ``nvidia.dali``): where the harness cannot find it, the variant is skipped with the reason,
    rather than failing in every round."""
    compiles: bool = False
    """Its set-up runs ``torch.compile``: the harness may fill the compiler cache for it in the
    background before its first timing run (harness.warm_compile)."""
    removed_by: str = ""
    """What removes the cause entirely from this variant, where it differs from the scenario's
    (``Scenario.removed_by``): another variant's name (one that runs the same GPU work with the
    cause gone, e.g. kernel_flood's baseline replayed from a CUDA graph) or ``limit``. Empty:
    the scenario's."""
    expect: Expectation | None = None
    """What it is declared to show (a check on the measured truth); None: from ``kind``
    (baseline: ``bottleneck``, fix and ideal: ``clean``). A fix that may not remove the whole
    bottleneck declares ``Expectation(role="partial", because=...)``."""

    def __post_init__(self) -> None:
        exp = self.expectation
        if self.kind == "baseline" and exp.role != "bottleneck":
            raise ValueError(f"variant {self.name!r}: a baseline is expected to be 'bottleneck'")
        if self.kind == "ideal" and exp.role != "clean":
            raise ValueError(f"variant {self.name!r}: an ideal is expected to be 'clean'")
        if self.kind == "fix" and exp.role == "bottleneck":
            raise ValueError(f"variant {self.name!r}: a fix is 'clean' or 'partial'")

    @property
    def expectation(self) -> Expectation:
        """The declared expectation, or the one its kind implies."""
        if self.expect is not None:
            return self.expect
        if self.kind == "baseline":
            return Expectation(role="bottleneck", because="the baseline injects the class")
        return Expectation(role="clean", because=f"a {self.kind} removes the bottleneck")


@dataclass(frozen=True, kw_only=True)
class Severity:
    """The knob that scales the injected cost; its default mirrors a common real mistake."""

    meaning: str
    """What the number controls, e.g. 'source JPEG long side'."""
    unit: str
    """Unit of the number, e.g. 'px'."""
    low: float
    """Smallest allowed value (inclusive)."""
    high: float
    """Largest allowed value (inclusive)."""
    why_default: str
    """Why the default value is realistic."""


@dataclass(frozen=True, kw_only=True)
class Teaching:
    """What an engineer should learn from the scenario; shown in reports and ``--help``."""

    symptom: str
    """What the nsys timeline shows."""
    cause: str
    """Why it happens."""
    fix: str
    """What removes it, and what the fixed timeline looks like."""


@dataclass(kw_only=True)
class Size:
    """Work per variant. Scenario sizes subclass this and add their own fields."""

    warmup_steps: int = 5
    """Steps run before the measured window (allocator, cuDNN autotune, compile)."""
    steps: int = 20
    """Steps in the measured window; the profile captures exactly these."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if value < 0 or (f.name == "steps" and value < 1):
                lo = 1 if f.name == "steps" else 0
                raise ValueError(f"size field '{f.name}' must be >= {lo}, got {value}")


@dataclass(kw_only=True)
class ScenarioConfig:
    """Schema shared by every scenario's config; subclasses add ``smoke``/``full`` sizes."""

    severity: float = 0.0
    """Scales the injected cost; allowed range and meaning are on the scenario's Severity."""
    variants: list[str] | None = None
    """Subset of variants to run; None runs all of them."""
    nsys_trace: list[str] | None = None
    """What nsys traces (``--trace``) in this scenario's profiled runs; None: ``nsys.trace``.
    No scenario sets it: leaving ``osrt`` out did not lower the probe effect of the launch-heavy
    baselines (results/reference/h100/README.md), and data_stall needs it."""

    #: Set by the scenario when it registers the schema; used for validation messages.
    _scenario: ClassVar[Scenario | None] = None

    def __post_init__(self) -> None:
        scen = type(self)._scenario
        if scen is None:
            return
        sev = scen.severity
        if not (sev.low <= self.severity <= sev.high):
            raise ValueError(
                f"scenario.{scen.name}.severity={self.severity} is out of range: "
                f"allowed {sev.low}..{sev.high} {sev.unit} ({sev.meaning})"
            )
        if self.variants is not None:
            known = [v.name for v in scen.variants]
            unknown = [v for v in self.variants if v not in known]
            if unknown:
                raise ValueError(
                    f"scenario.{scen.name}.variants has unknown variant(s) {unknown}; "
                    f"available: {known}"
                )

    def size(self, name: str) -> Size:
        """The size block called ``name`` ('smoke' or 'full')."""
        if name not in ("smoke", "full"):
            raise ValueError(f"size must be 'smoke' or 'full', got {name!r}")
        return getattr(self, name)

    def memory_estimate(self, size: Size, on_gpu: bool) -> MemoryEstimate | None:
        """The least memory one process of ``size`` takes, whichever variant it runs
        (:mod:`scenarios._memory`: a floor, so that a size refused for it could not have run);
        None: the scenario says nothing (the default). Scenarios whose data is big in host
        memory override it, so that a size too large for the machine is refused before its
        workers set up rather than killed by the kernel."""
        return None


@dataclass(kw_only=True)
class RunContext:
    """What the worker hands a scenario when it builds a workload."""

    device: torch.device
    """Where compute runs: cuda:<local rank> on a GPU box, cpu otherwise."""
    size_name: str
    """'smoke' or 'full'."""
    seed: int
    """Seed for weights and data; variants of one scenario share it."""
    cache_dir: Path
    """Folder for generated data sets (kept between runs)."""
    rank: int = 0
    """Global rank (distributed scenarios)."""
    world_size: int = 1
    """Number of processes (distributed scenarios)."""
    extras: dict[str, Any] = field(default_factory=dict)
    """Free-form values a scenario wants to report (e.g. compile time)."""

    @property
    def on_gpu(self) -> bool:
        return self.device.type == "cuda"

    def stage(self, name: str) -> Any:
        """``with ctx.stage("model_build"): ...`` times one named set-up stage (wall seconds,
        summed when a name repeats) into ``extras["setup_stages_s"]``, so ``timings.csv`` shows
        where a slow set-up goes (column ``setup_<name>_s``). ``name``: a Python identifier."""
        import contextlib
        import time

        if not name.isidentifier():
            raise ValueError(f"set-up stage name {name!r} must be an identifier (a column name)")

        @contextlib.contextmanager
        def timed() -> Any:
            t0 = time.perf_counter()
            try:
                yield
            finally:
                stages = self.extras.setdefault("setup_stages_s", {})
                stages[name] = stages.get(name, 0.0) + time.perf_counter() - t0

        return timed()


class Workload(abc.ABC):
    """One variant's training loop, driven step by step by the worker.

    ``setup`` is outside every timer; ``step`` is called ``warmup_steps + steps`` times and
    must put its phases in NVTX ranges through :func:`bottlenecks.phase`.
    """

    #: Samples processed by one call to ``step`` (for throughput).
    samples_per_step: int = 1

    #: Warm-up steps this variant needs beyond the size's ``warmup_steps`` to reach steady
    #: state, e.g. to drain batches a loader prefetched during setup (which would otherwise
    #: make the measured window look faster than the loader can really go).
    extra_warmup_steps: int = 0

    #: Steps in one period of the variant's periodic work (a checkpoint every N steps, an
    #: empty_cache every K): the mean step must pay for it once per period, so the timing
    #: harness makes windows and slices whole multiples of it. 1: nothing periodic.
    period_steps: int = 1

    def setup(self) -> None:  # noqa: B027 - optional hook
        """Build model, data and anything compiled; not timed as part of a step."""

    def start_window(self) -> None:  # noqa: B027 - optional hook
        """Called once between warm-up and the measured window (e.g. to reset counters)."""

    @abc.abstractmethod
    def step(self, index: int) -> None:
        """Run one training iteration."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release loaders, threads and pipelines."""

    def metrics(self) -> dict[str, float]:
        """Extra named numbers for result.json (units in the name, e.g. ``h2d_gbps``)."""
        return {}


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """Everything the harness needs to know about one pathology and its fixes."""

    name: str
    """Identifier: module name, config group option and folder name."""
    bottleneck: str
    """The class it injects, one of BOTTLENECK_CLASSES: ``bottlenecks.Klass.<NAME>``."""
    title: str
    """Human title for reports."""
    variants: tuple[Variant, ...]
    """Baseline first, then fixes, then ideal."""
    severity: Severity
    """The knob that scales the injected cost."""
    teaching: Teaching
    """Symptom, cause, fix."""
    config_cls: type[ScenarioConfig]
    """Schema of the scenario's config (registered in Hydra's ConfigStore)."""
    build: str
    """The name, ``"package.module:function"``, of what builds a variant's workload, a function
    (cfg, size, variant_name, ctx) -> Workload. A name, so that only the worker that runs a
    variant imports its module (and torch with it) and the harness's parent reads the metadata
    alone."""
    world_size: int = 1
    """Processes per variant; above 1 the worker is launched through torchrun."""
    setup_alone: bool = False
    """Its workers set up with no other worker setting up beside them (harness.setup_batch):
    for a scenario whose set-up measures something (a loader's own rate) or leaves threads
    working after it (loader workers filling their prefetch queues)."""
    slice_rounds: bool = True
    """Its timing rounds may be sliced (``harness.timing.slices``). False: they run back to
    back, each variant's window alone: a variant whose step is longer than a slice is a slice
    of its own, so the turns pair nothing the rounds do not, while every round holds all its
    variants' processes (loader workers and all) set up at once (docs/measurement.md)."""
    expected_diagnosis: str = ""
    """What the nsys export must show on the baseline and not on the fixes."""
    limit_note: str = ""
    """How the limit is obtained when there is no ``ideal`` variant (e.g. the sum of kernel
    durations per step in the baseline's own trace)."""
    removed_by: str = ""
    """What removes the cause entirely, the measurement the findings' predicted speedups are
    checked against: a variant's name, or ``limit`` (the analytic limit of ``limit_note``).
    Empty: ``ideal`` when the scenario has one, else ``limit``."""
    limit_metric: str = ""
    """With ``removed_by == "limit"``: the result metric (ms per step, averaged over a variant's
    timing processes) that is the limit, the baseline's for the cause removed, a partial fix's
    own for what is left of it (e.g. ``balanced_bound_ms``). Empty: the summed kernel time per
    step in the profiled trace (the baseline's, or the partial fix's own)."""

    def __post_init__(self) -> None:
        if self.bottleneck not in BOTTLENECK_CLASSES:
            raise ValueError(f"{self.name}: unknown bottleneck class {self.bottleneck!r}")
        # declared as ``Klass.X`` (a str enum); kept as its plain name, as every table writes it
        object.__setattr__(self, "bottleneck", str(self.bottleneck))
        kinds = [v.kind for v in self.variants]
        if kinds.count("baseline") != 1 or kinds[0] != "baseline":
            raise ValueError(f"{self.name}: exactly one baseline variant, listed first")
        if "fix" not in kinds:
            raise ValueError(f"{self.name}: needs at least one fix variant")
        if "ideal" not in kinds and not self.limit_note:
            raise ValueError(f"{self.name}: needs an 'ideal' variant or a limit_note")
        names = [v.name for v in self.variants]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.name}: duplicate variant names {names}")
        removed_by = self.removed_by or ("ideal" if "ideal" in kinds else "limit")
        object.__setattr__(self, "removed_by", removed_by)
        if removed_by == "limit" and not self.limit_note:
            raise ValueError(f"{self.name}: removed_by='limit' needs a limit_note")
        if removed_by != "limit" and removed_by not in names:
            raise ValueError(
                f"{self.name}: removed_by={removed_by!r} is not a variant; available: {names}"
            )
        for v in self.variants:
            if v.removed_by and v.removed_by != "limit" and v.removed_by not in names:
                raise ValueError(
                    f"{self.name}/{v.name}: removed_by={v.removed_by!r} is not a variant; "
                    f"available: {names}"
                )
            if v.removed_by == "limit" and not self.limit_note:
                raise ValueError(f"{self.name}/{v.name}: removed_by='limit' needs a limit_note")
        module, _, function = str(self.build).partition(":")
        if not (module and function.isidentifier()):
            raise ValueError(
                f"{self.name}: build={self.build!r} must name 'package.module:function'"
            )
        if not issubclass(self.config_cls, ScenarioConfig):
            raise TypeError(f"{self.name}: config_cls must subclass ScenarioConfig")
        # Let the schema validate severity and variant names against this scenario.
        self.config_cls._scenario = self

    def builder(self) -> Callable[..., Workload]:
        """The function ``build`` names, its module imported (torch with it): in a worker,
        or in the fork server that preloads what workers need."""
        import importlib

        module, _, function = self.build.partition(":")
        try:
            found = getattr(importlib.import_module(module), function)
        except (ImportError, AttributeError) as exc:
            raise ImportError(
                f"scenario {self.name!r}: its build {self.build!r} cannot be loaded: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if not callable(found):
            raise TypeError(f"scenario {self.name!r}: its build {self.build!r} is not callable")
        return found

    def variant(self, name: str) -> Variant:
        for v in self.variants:
            if v.name == name:
                return v
        raise KeyError(f"{self.name} has no variant {name!r}; available: {self.variant_names}")

    def removal_for(self, variant: str) -> str:
        """What removes the cause from ``variant``: its own ``removed_by``, else the
        scenario's (a variant's name, or ``limit``)."""
        return self.variant(variant).removed_by or self.removed_by

    @property
    def removals(self) -> list[str]:
        """Every variant some variant's removal is timed against."""
        named = [self.removal_for(v.name) for v in self.variants]
        return list(dict.fromkeys(n for n in named if n != "limit"))

    @property
    def variant_names(self) -> list[str]:
        return [v.name for v in self.variants]

    @property
    def baseline(self) -> Variant:
        return self.variants[0]

    def default_config(self) -> ScenarioConfig:
        return self.config_cls()
