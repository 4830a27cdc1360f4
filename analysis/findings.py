"""What a detector returns: one :class:`Finding` per bottleneck class and report."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from bottlenecks import CLASSES
from bottlenecks.enums import StrEnum

__all__ = ["CLASSES", "PREDICTION_FIELDS", "Finding", "State", "metric_unit", "missing"]


class State(StrEnum):
    """What a detector concluded: the class is there, it is not, or the report cannot say."""

    FIRED = "fired"
    CLEAR = "clear"
    NOT_JUDGED = "not_judged"


#: Metric-name suffix -> unit, longest first (``_per_step`` before ``_s``).
_UNITS = (
    ("_share", "share"),
    ("_per_step", "per_step"),
    ("_per_s", "per_s"),
    ("_gbps", "GB/s"),
    ("_bytes", "bytes"),
    ("_us", "us"),
    ("_ms", "ms"),
    ("_ns", "ns"),
    ("_s", "s"),
)


def metric_unit(name: str) -> str:
    """The unit a metric's name carries (``gpu_idle_share`` -> ``share``); ``""`` if none."""
    for suffix, unit in _UNITS:
        if name.endswith(suffix) or f"{suffix}_" in name:
            return unit
    return ""


@dataclass(frozen=True)
class Finding:
    """One detector's verdict on one report.

    Frozen: a new state or prediction is a new Finding (``dataclasses.replace``).
    ``state`` is :class:`State` (a bool is accepted: True = fired, False = clear).
    ``predicted_*``: what removing this cause entirely would do to the step (filled in by
    ``analysis.detect.diagnose`` for every judged finding the time model can replay).
    ``impact`` is the share (0..1) of step time (NVTX steps) or of the steady-state window (no
    NVTX) that the bottleneck explains; ``metrics`` carry their unit in the name (``_share``,
    ``_us``, ``_per_step``, ``_per_s``, ``_bytes``); ``evidence`` holds a few concrete examples
    with timestamps (ns on the trace's clock, plus ms from the window start); ``reason`` says in
    one sentence why it fired or not, for people: code reads ``state``, never the reason.
    """

    klass: str
    state: State | bool
    impact: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)
    evidence: list[dict[str, Any]] = field(default_factory=list)
    reason: str = ""
    predicted_speedup: float | None = None
    """Step before / after this cause removed entirely, everything else unchanged (the time
    model's replay, :mod:`analysis.detect.timemodel`); None when it cannot be predicted."""
    predicted_speedup_ci_low: float | None = None
    predicted_speedup_ci_high: float | None = None
    """95% interval of ``predicted_speedup`` from the spread between iterations."""
    predicted_step_ms: float | None = None
    """The mean step the removal would leave (untraced), in ms."""
    prediction_clamp: str = ""
    """Which floor the predicted step was raised to, where the replay went below what no
    removal can beat (``analysis.detect.timemodel.Clamp``: ``gpu_work``, ``host_work``,
    ``gpu_idle``), ``none`` where it did not; empty without a prediction."""
    prediction_note: str = ""
    """What was predicted, or why nothing was."""

    def __post_init__(self) -> None:
        if self.klass not in CLASSES:
            raise ValueError(f"unknown bottleneck class {self.klass!r}; known: {CLASSES}")
        object.__setattr__(self, "klass", str(self.klass))  # a Klass member: its name
        state = self.state
        if isinstance(state, bool):
            state = State.FIRED if state else State.CLEAR
        object.__setattr__(self, "state", State(state))
        impact = float(min(1.0, max(0.0, self.impact))) if self.fired else 0.0
        object.__setattr__(self, "impact", impact)

    @property
    def fired(self) -> bool:
        return self.state is State.FIRED

    @property
    def judged(self) -> bool:
        return self.state is not State.NOT_JUDGED

    @property
    def interval(self) -> tuple[float | None, float | None]:
        """The predicted speedup's 95% interval (low, high), None where there is none."""
        return getattr(self, PREDICTION_FIELDS[1]), getattr(self, PREDICTION_FIELDS[2])

    def metric_rows(self) -> list[tuple[str, float, str]]:
        """(metric, value, unit) for each metric: the long form ``findings.csv`` holds."""
        return [(k, float(v), metric_unit(k)) for k, v in self.metrics.items()]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, with ``class`` as the key and ``state`` as its string."""
        d = asdict(self)
        d["class"] = d.pop("klass")
        d["state"] = str(self.state)
        d["fired"] = self.fired
        return d


def missing(klass: str, table: str, what: str) -> Finding:
    """The not-judged finding of a detector whose input table the report lacks."""
    return Finding(
        klass,
        State.NOT_JUDGED,
        0.0,
        {},
        [],
        f"table {table} is missing: the report has no {what} (CPU capture or --trace without "
        "cuda), so this class cannot be judged",
    )


#: The prediction's fields, as findings.csv, diagnosis.csv and ``diagnose --format json`` name
#: them: the speedup, its interval (low, high), the step after, the clamp and the note.
PREDICTION_FIELDS = tuple(f.name for f in fields(Finding) if f.name.startswith("predict"))
assert len(PREDICTION_FIELDS) == 6
