"""Structured configs (the schemas Hydra validates against) and how configs are composed.

``conf/config.yaml`` is the primary config; ``conf/scenario/<name>.yaml`` selects a scenario and
sits on that scenario's schema (``schema/scenario/<name>`` in the ConfigStore). Validation lives
in ``__post_init__`` so a bad value fails before anything runs, naming the key and the range.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

import scenarios

SIZES = ("auto", "smoke", "full")

#: Environment variable naming extra scenario modules (comma separated dotted names), e.g. the
#: deliberately broken scenarios the tests use. The worker inherits it, so both sides agree.
EXTRA_SCENARIOS_ENV = "BOTTLENECK_SCENARIO_MODULES"


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

    def __post_init__(self) -> None:
        if self.cuda_graph_trace not in (None, "graph", "node"):
            raise ValueError(
                f"nsys.cuda_graph_trace must be null, 'graph' or 'node', got {self.cuda_graph_trace!r}"
            )
        if self.export_timeout_s <= 0:
            raise ValueError(f"nsys.export_timeout_s must be > 0, got {self.export_timeout_s}")


@dataclass(kw_only=True)
class HarnessConfig:
    """How the parent runs variants and where results go."""

    results_dir: str = "results"
    """Parent folder of run folders (``<results_dir>/<utc-time>_<gpu>/``)."""
    resume: str | None = None
    """An earlier run folder to finish: variants that already finished are skipped."""
    timeout_s: float = 900.0
    """Wall-clock limit for one worker process (one variant, one phase)."""
    repeats: int = 3
    """Unprofiled timing runs per variant, interleaved across variants for side-by-side ratios."""
    seed: int = 0
    """Seed for weights and data; all variants of a scenario share it."""
    cache_dir: str | None = None
    """Generated data sets; default ``$XDG_CACHE_HOME/bottleneck-suite`` or ``~/.cache/...``."""
    progress: bool = True
    """Show a tqdm bar over scenario x variant x phase."""
    bootstrap: int = 2000
    """Bootstrap resamples for speedup confidence intervals."""
    memory_cap_gb: float | None = None
    """Address-space cap (GiB) for each CPU worker (RLIMIT_AS), so a runaway variant fails as
    'oom' instead of swapping the box; ignored on the GPU, where CUDA maps far more address space
    than it uses. None: no cap."""

    def __post_init__(self) -> None:
        if self.timeout_s <= 0:
            raise ValueError(f"harness.timeout_s must be > 0 seconds, got {self.timeout_s}")
        if self.repeats < 1:
            raise ValueError(f"harness.repeats must be >= 1, got {self.repeats}")
        if self.bootstrap < 100:
            raise ValueError(f"harness.bootstrap must be >= 100, got {self.bootstrap}")
        if self.memory_cap_gb is not None and self.memory_cap_gb <= 0:
            raise ValueError(
                f"harness.memory_cap_gb must be > 0 GiB or null, got {self.memory_cap_gb}"
            )

    def cache_path(self) -> Path:
        if self.cache_dir:
            return Path(self.cache_dir).expanduser()
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        return Path(base) / "bottleneck-suite"


@dataclass(kw_only=True)
class SuiteConfig:
    """Top-level schema: what to run, at which size, and how."""

    size: str = "auto"
    """'smoke' (CPU, seconds), 'full' (GPU) or 'auto' (full when a GPU is present)."""
    harness: HarnessConfig = field(default_factory=HarnessConfig)
    """Parent-side settings."""
    nsys: NsysConfig = field(default_factory=NsysConfig)
    """Profiler settings."""
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


def config_dir() -> Path:
    """The ``conf/`` folder: packaged as ``harness.conf`` when installed, else the checkout's."""
    try:
        path = Path(str(resources.files("harness.conf")))
        if (path / "config.yaml").is_file():
            return path
    except ModuleNotFoundError:
        pass
    path = Path(__file__).resolve().parent.parent / "conf"
    if not (path / "config.yaml").is_file():
        raise FileNotFoundError(f"cannot find the Hydra config folder (looked for {path})")
    return path


def register_configs(found: dict[str, scenarios.Scenario]) -> None:
    """Put the schemas in Hydra's ConfigStore (idempotent)."""
    cs = ConfigStore.instance()
    cs.store(name="suite_schema", node=SuiteConfig)
    yaml_dir = config_dir() / "scenario"
    for name, scen in found.items():
        cs.store(group="schema/scenario", name=name, node=scen.config_cls)
        if not (yaml_dir / f"{name}.yaml").is_file():
            # A plugin scenario without a YAML file is still selectable as +scenario=<name>.
            cs.store(group="scenario", name=name, node=scen.config_cls, package=f"scenario.{name}")


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


class UsageError(ValueError):
    """A command-line mistake the user can fix; printed without a traceback."""


def check_scenario_overrides(overrides: list[str], found: dict[str, scenarios.Scenario]) -> None:
    """Fail early, with the list of scenarios, on an unknown ``+scenario=`` name."""
    available = [*sorted(found), "all"]
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
