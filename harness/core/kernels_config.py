"""The ``kernels`` config section: the Nsight Compute row of a run (``harness kernels RUN``, and
``harness run`` on a GPU where ``ncu`` exists).

Every knob is here, keyword-only, with its reason; ``__post_init__`` names a bad key's range.
The defaults are sized for the row's time budget (``budget_s``): few kernels per variant, one
launch each, a short warm-up, the section that decides the bound, several set-ups at once.
Stdlib only: the GPU probe builds ncu's command line from these defaults with the machine's own
python3.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

#: ncu's section that decides the bound: the compute and memory speed-of-light shares (and,
#: in its breakdowns, every unit's). MemoryWorkloadAnalysis (cache hit rates, the memory
#: chart's figures) is left out: the row reads none of it and each section adds replay passes.
SECTIONS = ("SpeedOfLight",)

#: Metrics beyond the section: the arithmetic pipes (tensor, FMA, ALU, fp64, the
#: transcendental unit), occupancy, the launch and the DRAM traffic. Pipe names differ by
#: architecture (Hopper's warp-group MMA), so those are ``regex:`` forms, which ncu expands to
#: the metrics the chip has instead of failing on a missing one.
METRICS = (
    r"regex:^sm__pipe_tensor(_op_[a-z]+)?_cycles_active\.avg\.pct_of_peak_sustained_active$",
    r"regex:^sm__inst_executed_pipe_tensor(_op_[a-z]+)?\.avg\.pct_of_peak_sustained_active$",
    r"regex:^sm__pipe_(fma|alu|fp64)_cycles_active\.avg\.pct_of_peak_sustained_active$",
    r"regex:^sm__inst_executed_pipe_(fma|alu|fp64|xu)\.avg\.pct_of_peak_sustained_active$",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "sm__maximum_warps_per_active_cycle_pct",
    "launch__grid_size",
    "launch__block_size",
    "launch__registers_per_thread",
    "dram__bytes.sum",
    "dram__bytes.sum.per_second",
)


@dataclass(kw_only=True)
class KernelsConfig:
    """Nsight Compute on the top kernels of each profiled variant (``kernels.csv``,
    ``kernel_limits.csv``, the report's roofline pictures)."""

    enabled: bool = True
    """Run the row after the profiles and their exports, on a GPU where ``ncu`` is found;
    ``kernels.enabled=false`` turns it off. Without a GPU or ncu it is skipped with the reason."""
    ncu_path: str | None = None
    """Explicit ncu binary; otherwise $NCU, PATH, /usr/local/cuda/bin and
    /opt/nvidia/nsight-compute/*/ are searched."""
    top: int = 4
    """Most profiled launches per variant. A kernel is profiled by name, one launch of each
    of its launch configurations (name, grid, block) in the window, and each launch costs
    ncu its replay passes, taken in turn with every other ncu process (docs/kernels.md,
    "Time"): the heaviest kernels are chosen while their configurations fit."""
    coverage: float = 0.8
    """Stop choosing kernels once the chosen ones hold this share of the window's kernel
    time: the rest cannot move the step's limit much and each costs a profiled launch."""
    min_share: float = 0.01
    """Leave out kernels below this share of the window's kernel time."""
    reuse: bool = True
    """A launch configuration measured in one variant of a scenario is read from there in its
    other variants (the same kernel on the same shapes), not profiled again: a variant whose
    chosen kernels were all measured elsewhere runs no ncu process."""
    variants: str = "witness"
    """'witness': every variant of a scenario whose class the row witnesses
    (harness.kernels.tables.WITNESSED: their kernels are the mechanism) profiles the kernels it
    needs; any other scenario's baseline does, and its other variants read what the baseline
    measured (their kernels are the baseline's: the fix changes the host side). 'all': every
    variant profiles what it needs. 'removals': each scenario's baseline and the variant that
    removes its cause (ideal, else its first fix), each profiling what it needs. The witnessed
    scenarios come first while the budget lasts."""
    budget_s: float = 90.0
    """The row's wall-clock budget: no variant starts once it is spent and the plan leaves out
    the variants (last in priority order) it estimates would not fit; 0 means no budget."""
    parallel: int = 8
    """ncu processes at once. ncu takes its profiled launches in turn across processes, so
    what runs side by side is each process's start, imports and set-up: enough of them keep
    the profiled launches going back to back."""
    timeout_s: float = 120.0
    """One variant's limit: past it its process group is killed and the variant is recorded
    as timed out; the row goes on."""
    warmup_s: float = 0.0
    """The worker's warm-up budget (its ``max_warmup_s``): 0 runs the fewest warm-up steps the
    worker allows; the profiled kernels only need the steady state's kernels, not its timing."""
    window_steps: int = 1
    """Steps inside the profiled window: one launch of each configuration is profiled, so one
    step has every per-step kernel; a kernel that runs less often is not chosen."""
    launch_skip: int = 0
    """Launches of each launch configuration inside the window skipped before the profiled
    one (``--launch-skip`` with ``--filter-mode per-launch-config``)."""
    sections: list[str] = field(default_factory=lambda: list(SECTIONS))
    """ncu ``--section`` identifiers."""
    metrics: list[str] = field(default_factory=lambda: list(METRICS))
    """ncu ``--metrics`` names (``regex:`` allowed): pipes, occupancy, launch facts."""
    bound_min_pct: float = 60.0
    """A kernel whose compute (SM) and memory speed-of-light shares are both below this is
    latency-bound (ncu's own speed-of-light rule reads under 60% as a latency problem);
    otherwise the larger share names its bound."""
    pipe_min_pct: float = 20.0
    """A kernel runs on its busiest arithmetic pipe when that pipe is active at least this
    share of the SM's active cycles; below it the pipe is ``none`` (its time went to memory
    or latency). A matrix kernel is on the larger of its tensor and FMA pipes, whatever the
    share (its multiply-adds run on one of the two)."""
    extra_args: list[str] = field(default_factory=list)
    """More ncu options, placed before the program (e.g. ``--cache-control none``)."""

    def __post_init__(self) -> None:
        for name in ("top", "parallel", "window_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"kernels.{name} must be >= 1, got {getattr(self, name)}")
        if self.launch_skip < 0:
            raise ValueError(f"kernels.launch_skip must be >= 0, got {self.launch_skip}")
        for name in ("budget_s", "warmup_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"kernels.{name} must be >= 0, got {getattr(self, name)}")
        if self.timeout_s <= 0:
            raise ValueError(f"kernels.timeout_s must be > 0, got {self.timeout_s}")
        if not 0 <= self.min_share < 1:
            raise ValueError(f"kernels.min_share must be in [0, 1), got {self.min_share}")
        if not 0 < self.coverage <= 1:
            raise ValueError(f"kernels.coverage must be in (0, 1], got {self.coverage}")
        for name in ("bound_min_pct", "pipe_min_pct"):
            if not 0 <= getattr(self, name) <= 100:
                raise ValueError(f"kernels.{name} must be in [0, 100], got {getattr(self, name)}")
        if self.variants not in VARIANT_POLICIES:
            raise ValueError(
                f"kernels.variants must be one of {', '.join(VARIANT_POLICIES)}, "
                f"got {self.variants!r}"
            )
        if not self.sections:
            raise ValueError("kernels.sections must name at least one ncu section")


#: ``kernels.variants``'s values.
VARIANT_POLICIES = ("witness", "all", "removals")


def kernels_config(section: Any = None, **overrides: Any) -> KernelsConfig:
    """A :class:`KernelsConfig` from whatever a caller holds: None (the defaults), a
    KernelsConfig, or a mapping such as a run's ``cfg.kernels`` (a DictConfig converts through
    its items); ``overrides`` replace single keys. Unknown keys raise ValueError."""
    if isinstance(section, KernelsConfig):
        values = {f.name: getattr(section, f.name) for f in fields(KernelsConfig)}
    elif section is None:
        values = {}
    elif isinstance(section, Mapping) or hasattr(section, "items"):
        values = {str(k): _plain(v) for k, v in section.items()}
    else:
        raise TypeError(f"cannot read a kernels config from {type(section).__name__}")
    values.update({k: v for k, v in overrides.items() if v is not None})
    known = {f.name for f in fields(KernelsConfig)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"unknown kernels config keys: {', '.join(unknown)}")
    return KernelsConfig(**values)


def _plain(value: Any) -> Any:
    """Lists of an OmegaConf ListConfig as plain lists (the dataclass keeps them)."""
    if isinstance(value, str | bytes) or not hasattr(value, "__iter__"):
        return value
    if isinstance(value, Mapping) or hasattr(value, "items"):
        return value
    return list(value)
