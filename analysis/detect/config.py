"""The detectors' thresholds: keyword-only dataclasses, one per section, and the verdict's bar.

This is the schema of the ``diagnosis`` config group: ``harness`` registers it in Hydra's
ConfigStore (``conf/diagnosis/default.yaml`` only selects it), so ``harness run
diagnosis.<section>.<key>=...`` overrides a value and ``manifest.json`` records them all;
``harness diagnose`` and ``harness score`` read the same defaults through
:func:`diagnosis_thresholds`. It lives in ``analysis`` (which never imports ``harness``).
The sections themselves (one per detector, plus the window, the host reading, the time model and
the expert rules) are in :mod:`analysis.detect.thresholds`; this module holds the group, its
loaders and its override parser, and re-exports every section.
"""

from __future__ import annotations

import copy
import functools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

from analysis.detect.thresholds import (
    AllocatorChurnThresholds,
    BlockingIoThresholds,
    DataStallThresholds,
    ExpertRulesConfig,
    ExposedCommThresholds,
    Fp32MathThresholds,
    GilContentionThresholds,
    HostSyncThresholds,
    HostThresholds,
    LaunchBoundThresholds,
    LayoutTransposeThresholds,
    PageableCopyThresholds,
    PredictConfig,
    StageImbalanceThresholds,
    UnfusedElementwiseThresholds,
    WindowThresholds,
)
from bottlenecks import CLASSES, SPECS
from bottlenecks.classes import ClassSpecError

#: The sections (:mod:`analysis.detect.thresholds`) are importable from here too: each is a field
#: type of DiagnosisConfig.
__all__ = [
    "MAIN_METRIC",
    "DiagnosisConfig",
    "ThresholdError",
    "diagnosis_config",
    "diagnosis_dict",
    "diagnosis_thresholds",
    "load_config",
    "load_thresholds",
    "parse_overrides",
]


class ThresholdError(ValueError):
    """A threshold or override is invalid; the message names the key and its range."""


#: Each class's main metric (a key of its Finding's ``metrics``): the one reports plot and rank on.
#: Derived from the class specs (``ClassSpec.main_metric``, bottlenecks/classes.py).
MAIN_METRIC: dict[str, str] = {s.name: s.main_metric for s in SPECS}


@dataclass(kw_only=True)
class DiagnosisConfig:
    """The detectors' thresholds and the verdict's bar: the ``diagnosis`` config group."""

    window: WindowThresholds = field(default_factory=WindowThresholds)
    """The steady-state window every detector judges."""
    host: HostThresholds = field(default_factory=HostThresholds)
    """How the main thread's time is read."""
    data_stall: DataStallThresholds = field(default_factory=DataStallThresholds)
    """Thresholds of the data_stall detector."""
    pageable_copy: PageableCopyThresholds = field(default_factory=PageableCopyThresholds)
    """Thresholds of the pageable_copy detector."""
    launch_bound: LaunchBoundThresholds = field(default_factory=LaunchBoundThresholds)
    """Thresholds of the launch_bound detector."""
    host_sync: HostSyncThresholds = field(default_factory=HostSyncThresholds)
    """Thresholds of the host_sync detector."""
    exposed_comm: ExposedCommThresholds = field(default_factory=ExposedCommThresholds)
    """Thresholds of the exposed_comm detector."""
    gil_contention: GilContentionThresholds = field(default_factory=GilContentionThresholds)
    """Thresholds of the gil_contention detector."""
    stage_imbalance: StageImbalanceThresholds = field(default_factory=StageImbalanceThresholds)
    """Thresholds of the stage_imbalance detector."""
    fp32_math: Fp32MathThresholds = field(default_factory=Fp32MathThresholds)
    """Thresholds of the fp32_math detector."""
    unfused_elementwise: UnfusedElementwiseThresholds = field(
        default_factory=UnfusedElementwiseThresholds
    )
    """Thresholds of the unfused_elementwise detector."""
    layout_transpose: LayoutTransposeThresholds = field(default_factory=LayoutTransposeThresholds)
    """Thresholds of the layout_transpose detector."""
    allocator_churn: AllocatorChurnThresholds = field(default_factory=AllocatorChurnThresholds)
    """Thresholds of the allocator_churn detector."""
    blocking_io: BlockingIoThresholds = field(default_factory=BlockingIoThresholds)
    """Thresholds of the blocking_io detector."""
    predict: PredictConfig = field(default_factory=PredictConfig)
    """The time model behind each finding's predicted speedup."""
    expert_rules: ExpertRulesConfig = field(default_factory=ExpertRulesConfig)
    """The nsys expert-rules cross-check."""
    verdict_min_ci_low: float = 1.1
    """A scenario is confirmed only when its best fix's speedup CI lower bound reaches this."""
    oversubscribed_min_share: float = 0.5
    """A variant whose measured saving reaches its class's bar is ``oversubscribed`` (not
    judged) when its step loop's run-queue wait per step beyond the removal's (runnable but
    without a core: a loaded host) is at least this share of the measured gap, and the saving
    without that wait falls below the bar. On a GPU host the wait is ~0 and nothing changes."""
    main_metric: dict[str, str] = field(default_factory=lambda: dict(MAIN_METRIC))
    """Class -> the metric its finding is judged and plotted on; one per class."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.verdict_min_ci_low) and self.verdict_min_ci_low >= 1.0):
            raise ValueError(
                "diagnosis.verdict_min_ci_low must be >= 1.0 (a speedup: below 1 would confirm a "
                f"fix that is slower), got {self.verdict_min_ci_low}"
            )
        if not 0.0 < self.oversubscribed_min_share <= 1.0:
            raise ValueError(
                "diagnosis.oversubscribed_min_share must be in (0, 1] (a share of the measured "
                f"gap), got {self.oversubscribed_min_share}"
            )
        unknown = sorted(set(self.main_metric) - set(CLASSES))
        if unknown:
            raise ValueError(
                f"diagnosis.main_metric.{unknown[0]}: not a bottleneck class; the keys must be "
                f"the classes {list(CLASSES)}"
            )
        missing = [k for k in CLASSES if k not in self.main_metric]
        if missing:
            raise ValueError(f"diagnosis.main_metric lacks a metric for {missing}")
        for klass, metric in self.main_metric.items():
            if not (isinstance(metric, str) and metric.isidentifier()):
                raise ValueError(
                    f"diagnosis.main_metric.{klass} must be a metric name (a key of the "
                    f"finding's metrics, e.g. {MAIN_METRIC[klass]!r}), got {metric!r}"
                )


def _check_sections() -> None:
    """Every class's threshold section (``ClassSpec.thresholds``) is a section of
    :class:`DiagnosisConfig`: a class added without one fails here, on import, naming it."""
    sections = {f.name: f for f in fields(DiagnosisConfig)}
    for spec in SPECS:
        f = sections.get(spec.thresholds)
        section = f.default_factory() if f is not None and callable(f.default_factory) else None
        if getattr(section, "SECTION", None) != spec.thresholds:
            raise ClassSpecError(
                f"class {spec.name}: its threshold section diagnosis.{spec.thresholds} "
                "(ClassSpec.thresholds) is not a section of analysis.detect.config."
                "DiagnosisConfig; add a _Section dataclass (analysis/detect/thresholds.py) with SECTION = "
                f"{spec.thresholds!r} and a DiagnosisConfig field of that name"
            )


_check_sections()


def diagnosis_config(cfg: Any) -> DiagnosisConfig:
    """The thresholds the detectors and verdicts take, typed and validated.

    ``cfg``: the composed run config (DictConfig or SuiteConfig), its ``diagnosis`` node, a
    DiagnosisConfig, or a plain nested dict of one (a run's recorded ``diagnosis``).
    """
    if hasattr(cfg, "diagnosis") and not isinstance(cfg, DictConfig):
        cfg = cfg.diagnosis
    elif isinstance(cfg, DictConfig) and "diagnosis" in cfg:
        cfg = cfg.diagnosis
    if isinstance(cfg, DiagnosisConfig):
        return cfg
    return _to_diagnosis(OmegaConf.merge(OmegaConf.structured(DiagnosisConfig), cfg))


def diagnosis_dict(cfg: Any) -> dict[str, Any]:
    """:func:`diagnosis_config` as a plain nested dict: the form a run records and passes on."""
    return asdict(diagnosis_config(cfg))


def _to_diagnosis(node: DictConfig) -> DiagnosisConfig:
    """Run every section's ``__post_init__`` (a ValueError names the key and its range)."""
    return OmegaConf.to_object(node)  # type: ignore[return-value]


def load_config(overrides: Any = None, path: Path | None = None) -> DiagnosisConfig:
    """The thresholds without a Hydra run (``harness diagnose``, ``harness score``), typed: the
    schema's defaults, the values the yaml at ``path`` sets (its defaults list is not followed),
    then ``overrides`` (nested, e.g. ``{"host": {"stretch_ms": 2.0}}``, or a whole
    DiagnosisConfig), validated: a bad key or value is a ThresholdError naming it."""
    layers: list[tuple[Any, str]] = []
    if path is not None:
        from_file = OmegaConf.load(path)
        if isinstance(from_file, DictConfig) and "defaults" in from_file:
            from_file.pop("defaults")
        layers.append((from_file, str(path)))
    layers.append((overrides or {}, "the overrides"))
    node = OmegaConf.structured(DiagnosisConfig)
    for layer, where in layers:
        try:
            node = OmegaConf.merge(node, layer)  # type: ignore[assignment]
        except OmegaConfBaseException as exc:
            raise ThresholdError(_merge_error(exc, where)) from exc
    try:
        return _to_diagnosis(node)
    except ValueError as exc:
        raise ThresholdError(str(exc)) from exc


def load_thresholds(
    overrides: DiagnosisConfig | Mapping[str, Any] | None = None,
) -> DiagnosisConfig:
    """The thresholds, typed (``cfg.host_sync.min_saving_share``): a DiagnosisConfig as it is,
    else the schema's defaults (:class:`~analysis.detect.config.DiagnosisConfig`) with
    ``overrides`` (nested, or the whole dict of a run's config) merged in, validated: an unknown
    key or a value out of range raises :class:`~analysis.detect.config.ThresholdError` naming
    the key. Validated once per distinct ``overrides`` (a run judges each export with the same
    ones); each call gets a copy of its own."""
    if isinstance(overrides, DiagnosisConfig):
        return overrides
    try:
        key = json.dumps(overrides or {}, sort_keys=True)
    except TypeError:  # not plain data (e.g. an OmegaConf node): validated every time
        return load_config(overrides)
    return copy.deepcopy(_MADE.get(key) or _validated(key))


#: The configs :func:`diagnosis_thresholds` made, by the JSON of the dict it gave: that dict
#: handed back to :func:`load_thresholds` (``harness diagnose`` does) is not validated again.
_MADE: dict[str, DiagnosisConfig] = {}


@functools.lru_cache(maxsize=32)
def _validated(overrides_json: str) -> DiagnosisConfig:
    return load_config(json.loads(overrides_json))


def diagnosis_thresholds(
    overrides: Mapping[str, Any] | None = None, path: Path | None = None
) -> dict[str, Any]:
    """:func:`load_config` as a plain nested dict (what a run records)."""
    cfg = load_config(overrides, path)
    out = asdict(cfg)
    try:
        key = json.dumps(out, sort_keys=True)
    except TypeError:  # not plain data: load_thresholds validates it as before
        return out
    if len(_MADE) < 32:
        _MADE.setdefault(key, cfg)
    return out


def _merge_error(exc: OmegaConfBaseException, where: str) -> str:
    key = f"diagnosis.{getattr(exc, 'full_key', '') or '?'}"
    if isinstance(exc, ConfigKeyError):
        section = key.rsplit(".", 1)[0]
        known = _known_keys(section.removeprefix("diagnosis."))
        return f"{key} (in {where}) is not a diagnosis setting; {section} has: {', '.join(known)}"
    return f"{key} (in {where}): {str(exc).splitlines()[0]}"


def _known_keys(section: str) -> list[str]:
    node: Any = DiagnosisConfig
    for part in [p for p in section.split(".") if p]:
        hints = {f.name: f for f in fields(node)} if is_dataclass(node) else {}
        if part not in hints:
            break
        node = hints[part].default_factory()  # type: ignore[misc]
    return [f.name for f in fields(node)] if is_dataclass(node) else []


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """``["data_stall.min_saving_share=0.2", ...]`` (a leading ``diagnosis.`` is optional) as
    the nested dict ``load_thresholds`` takes; values are parsed as YAML and checked against the
    schema here, so a bad one is a ThresholdError naming the key and its range."""
    dotlist = []
    for item in items:
        key, eq, value = item.partition("=")
        key = key.strip().removeprefix("diagnosis.")
        if not eq or not key:
            raise ThresholdError(
                f"a threshold override is KEY=VALUE, e.g. data_stall.min_saving_share=0.2; "
                f"got {item!r}"
            )
        dotlist.append(f"{key}={value}")
    if not dotlist:  # nothing to type against the schema
        return {}
    over: dict[str, Any] = OmegaConf.to_container(OmegaConf.from_dotlist(dotlist))  # type: ignore[assignment]
    return _typed(over, diagnosis_thresholds(over))


def _typed(over: Mapping[str, Any], full: Mapping[str, Any]) -> dict[str, Any]:
    """``over``'s keys with the schema's typed values from ``full`` (``2`` -> ``2.0``)."""
    return {k: _typed(v, full[k]) if isinstance(v, Mapping) else full[k] for k, v in over.items()}
