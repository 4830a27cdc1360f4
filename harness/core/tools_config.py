"""The config sections of the profiler tools scored against the ground truth (``harness/tools``):
the rules that map Holistic Trace Analysis's outputs to classes, with their thresholds, those of
the TensorBoard plugin's and nsys-ai's tensor-core readings, and the PyTorch Profiler (Kineto)
capture of every variant.

The HTA thresholds are part of the experiment, not of the tool: they are fixed on the suite's
own runs (its variants with and without each pathology) and then scored on code the suite did
not write (``corpus/wild``), never tuned on what they are scored on. A run records them in its
manifest (``tools.hta.*``); ``harness score --tool-set hta.KEY=VALUE`` overrides them there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any


@dataclass(kw_only=True)
class HtaRules:
    """How HTA's outputs become class calls (``harness/tools/hta.py``). Shares are 0-1,
    percentages 0-100, as HTA reports each. Every default was fitted on a run of the suite's
    own variants (``scripts/fit_hta_rules.py``; the fit and its run:
    ``results/reference/h200/tools/``), never on the corpus they are scored on: the fit kept
    the first readings of HTA's documentation but for ``sync_max_queue_p75``."""

    min_idle_pct: float = 20.0
    """GPU idle share of the trace (HTA's temporal breakdown, ``idle_time_pctg``, mean over
    ranks) below which no host-side class is flagged: a busy GPU is not waiting on anything."""
    stall_min_idle_pct: float = 30.0
    """data_stall: the GPU idle at least this share of the trace ..."""
    stall_min_host_wait_share: float = 0.6
    """... and at least this share of the idle time is HTA's ``host wait`` (the CPU had not
    enqueued work: the idle time breakdown), while the launches are not short (launch_bound's
    rule does not fire)."""
    launch_min_short_share: float = 0.5
    """launch_bound: at least this share of the kernel launches ran shorter on the GPU than their
    launch call on the CPU (``get_cuda_kernel_launch_stats``: gpu_duration < cpu_duration), with
    the GPU idle at least ``min_idle_pct``."""
    sync_max_queue_p75: float = 4.5
    """host_sync: the busiest stream's queue length (``get_queue_length_summary``) is at most this
    three quarters of the time (the host drains the queue: it waits for the GPU), with the GPU
    idle at least ``min_idle_pct``. Fitted (``scripts/fit_hta_rules.py``): between the
    blocking baseline's queue and the clean variants' (the fit's table says which)."""
    comm_max_overlap_pct: float = 50.0
    """exposed_comm: communication kernels overlap computation (``get_comm_comp_overlap``,
    ``comp_comm_overlap_pctg``, mean over ranks) for at most this share of their time."""
    imbalance_min_idle_spread_pct: float = 15.0
    """stage_imbalance: with two ranks or more, the idle shares of the ranks (temporal
    breakdown) differ by at least this many points; ``get_potential_stragglers`` names the
    ranks in the evidence."""
    busy_min_compute_pct: float = 80.0
    """The GPU-side classes (fp32_math, unfused_elementwise, layout_transpose) need a GPU busy
    computing: kernels (the temporal breakdown's ``compute_time_pctg``, mean over ranks) at
    least this share of the trace. A GPU that idles, or copies, is not limited by how its
    kernels run."""
    fp32_min_gemm_share: float = 0.3
    """fp32_math: at least this share of the GPU kernel time (HTA's kernel breakdown,
    ``get_gpu_kernel_breakdown``) in GEMM and convolution kernels whose names say they run on
    the SIMT FMA units, not the tensor cores (:func:`analysis.kernel_names.gemm_pipe`). Not
    fitted: no Kineto trace of the suite's fp32 scenario yet (docs/tools.md)."""
    elementwise_min_share: float = 0.3
    """unfused_elementwise: at least this share of the GPU kernel time in elementwise and
    reduction kernels (by name, :func:`analysis.kernel_names.family_of`) ..."""
    elementwise_min_per_gemm: float = 6.0
    """... and at least this many elementwise launches per GEMM launch (the breakdown's
    kernel counts): a chain of small kernels around each matmul, where a fused one would be
    one or two. Not fitted (as fp32_min_gemm_share)."""
    layout_min_share: float = 0.1
    """layout_transpose: at least this share of the GPU kernel time in layout conversions
    (cuDNN's ``nchwToNhwc``/``nhwcToNchw``, transposes, by name). Not fitted (as above)."""

    def __post_init__(self) -> None:
        _check_ranges("hta", self)


def _check_ranges(section: str, rules: object) -> None:
    """Every field of a rules section in its range: ``*_share`` 0-1, ``*_pct`` 0-100, any
    other (a count, a queue length, milliseconds) >= 0."""
    for f in fields(rules):  # type: ignore[arg-type]
        v = getattr(rules, f.name)
        top = 1.0 if f.name.endswith("_share") else 100.0
        if not f.name.endswith(("_share", "_pct")):
            top = float("inf")
        if not 0 <= v <= top:
            raise ValueError(f"tools.{section}.{f.name} must be in [0, {top:g}], got {v!r}")


@dataclass(kw_only=True)
class TbPluginRules:
    """The PyTorch profiler TensorBoard plugin's tensor-core recommendation ("kernels eligible
    for tensor cores but not on them: use AMP"), as the ``tb-plugin`` adapter applies it to an
    nsys export's kernels (``harness/tools/tb_plugin.py``)."""

    fp32_min_gemm_share: float = 0.5
    """fp32_math: at least this share of the GPU kernel time in GEMM and convolution kernels
    whose names say they run off the tensor cores (the plugin's "Tensor Cores eligible, not
    used" time over all kernel time). The plugin itself recommends AMP when no kernel time
    at all is on tensor cores; a share is that rule for a program whose GEMMs are mixed."""

    def __post_init__(self) -> None:
        _check_ranges("tb_plugin", self)


@dataclass(kw_only=True)
class NsysAiRules:
    """How nsys-ai's ``tensor_core_usage`` skill becomes a call (``harness/tools/nsys_ai.py``):
    its own flag and noise floor, as nsys-ai sets them."""

    tc_max_achieved_pct: float = 50.0
    """fp32_math: the skill's tensor-core time over its eligible kernels' time ("Global
    Top-K TC Achieved") below this; nsys-ai marks a kernel below 50% a fallback."""
    tc_min_inactive_ms: float = 10.0
    """... with at least this much eligible kernel time off the tensor cores: nsys-ai's own
    floor for its "TC eligible, inactive" finding (``top_kernels``)."""

    def __post_init__(self) -> None:
        _check_ranges("nsys_ai", self)


#: The rules sections of :class:`ToolsConfig`, by key (``tools.<key>.<field>``).
SECTIONS: dict[str, type] = {"hta": HtaRules, "tb_plugin": TbPluginRules, "nsys_ai": NsysAiRules}


@dataclass(kw_only=True)
class ToolsConfig:
    """Profiler tools scored against the run's ground truth after a run (``tools_calls.csv``,
    ``tools_scores.csv``; the report's "Tools against the ground truth")."""

    run: list[str] = field(
        default_factory=lambda: ["ours", "nsys-rules", "hta", "nsys-ai", "tb-plugin"]
    )
    """Adapters (``harness/tools``) run on every profiled variant after a run; one whose tool is
    not installed (HTA, nsys-ai: ``pip install .[tools]``) scores ``n/a`` with the reason."""
    hta: HtaRules = field(default_factory=HtaRules)
    """HTA's rules and thresholds."""
    tb_plugin: TbPluginRules = field(default_factory=TbPluginRules)
    """The TensorBoard plugin's tensor-core rule's threshold."""
    nsys_ai: NsysAiRules = field(default_factory=NsysAiRules)
    """How nsys-ai's tensor_core_usage skill is read."""
    timeout_s: float = 300.0
    """Limit for one adapter on one variant."""

    def __post_init__(self) -> None:
        for key, cls in SECTIONS.items():  # built from a plain mapping (--tool-set)
            if isinstance(getattr(self, key), dict):
                setattr(self, key, cls(**getattr(self, key)))
        if self.timeout_s <= 0:
            raise ValueError(f"tools.timeout_s must be > 0, got {self.timeout_s}")


@dataclass(kw_only=True)
class KinetoConfig:
    """The PyTorch Profiler's run of every variant (``<run>/<scenario>/<variant>/kineto/``): one
    more process per variant after the nsys profiles (nsys and the PyTorch Profiler both want
    CUPTI, so never the same process), ``torch.profiler`` over the same steady window the nsys
    profile measures, on every rank, one ``*-rank<r>.pt.trace.json.gz`` each (what HTA reads).
    Off by default, decided from its measured cost (docs/configuration.md: one more process
    per variant, +12-15% of a whole run's wall); and the PyTorch Profiler's own probe effect
    on host-bound steps is large (a host-bound step runs twice as long under it), so its
    traces are for the tools table, not for timing."""

    enabled: bool = False
    """Run the Kineto process of every variant (``kineto.enabled=true``)."""
    max_steps: int = 12
    """The most steps its window records (within the profiled window's time budget): HTA needs a
    few iterations, while a launch-bound step of ~4,000 kernels makes ~20,000 trace events, so
    a longer window only makes the profiler's post-processing and the trace longer."""
    lead_steps: int = 1
    """Steps run with the profiler on before the measured window and left out of the trace (the
    profiler's own warm-up, ``torch.profiler.schedule(warmup=...)``): its first step after
    start pays for setting up CUPTI or the CPU tracer, as nsys's first captured steps do
    (``nsys.capture_lead_steps``)."""
    record_shapes: bool = False
    """``torch.profiler.profile(record_shapes=...)``: operator input shapes in the trace
    (bigger traces, more probe effect)."""
    with_stack: bool = False
    """``torch.profiler.profile(with_stack=...)``: Python stacks per operator (much bigger
    traces, more probe effect)."""

    def __post_init__(self) -> None:
        if self.lead_steps < 0:
            raise ValueError(f"kineto.lead_steps must be >= 0, got {self.lead_steps}")
        if self.max_steps < 1:
            raise ValueError(f"kineto.max_steps must be >= 1, got {self.max_steps}")


def tools_config(overrides: dict[str, Any] | None = None) -> ToolsConfig:
    """The defaults with ``{"hta": {"stall_min_idle_pct": 25}}``-style overrides applied
    (a ValueError names a key that does not exist or a value out of range)."""
    overrides = dict(overrides or {})
    sections = {key: dict(overrides.pop(key, {}) or {}) for key in SECTIONS}
    unknown = [
        f"{key}.{k}"
        for key, given in sections.items()
        for k in sorted(set(given) - {f.name for f in fields(SECTIONS[key])})
    ] + sorted(set(overrides) - {f.name for f in fields(ToolsConfig)})
    if unknown:
        raise ValueError(f"unknown tools key(s): {', '.join(unknown)}")
    built = {
        key: SECTIONS[key](**{k: float(v) for k, v in given.items()})
        for key, given in sections.items()
    }
    return ToolsConfig(**overrides, **built)


def parse_tool_overrides(items: Sequence[str]) -> dict[str, Any]:
    """``["hta.stall_min_idle_pct=25", ...]`` (a leading ``tools.`` is optional) as the nested
    dict :func:`tools_config` takes; values parsed as YAML. A ValueError names an item that is
    not ``KEY=VALUE``."""
    import yaml

    out: dict[str, Any] = {}
    for item in items:
        key, eq, value = item.partition("=")
        path = [p for p in key.strip().removeprefix("tools.").split(".") if p]
        if not eq or not path:
            raise ValueError(
                f"a tools override is KEY=VALUE, e.g. hta.min_idle_pct=25; got {item!r}"
            )
        try:
            parsed = yaml.safe_load(value) if value.strip() else None
        except yaml.YAMLError:
            parsed = value
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ValueError(f"{item!r}: {part} is a value, not a section")
        node[path[-1]] = parsed
    return out
