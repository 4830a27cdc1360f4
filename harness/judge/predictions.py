"""Checking every prediction against what was measured in the same run.

A finding predicts the speedup of removing its cause entirely (``analysis.detect.decide``).
The suite measured that removal: each scenario names the variant that removes its cause
(``Scenario.removed_by``: ``ideal``, or ``limit`` for a limit measured of each variant). On
every variant whose measured truth is ``fires`` or ``either`` (:mod:`harness.judge.truth`),
the scenario's class's prediction is checked against the variant's step over the removal's,
paired within timing rounds (:mod:`harness.judge.measure`): the baseline's whole removal, or
what a fix leaves (down to ``ideal``, or to the variant's own measured limit).

``prediction_error`` is predicted / measured - 1; ``prediction`` is ``within`` when its size is at
most ``diagnosis.predict.tolerance_share``, ``outside`` otherwise, ``not_checked`` when either
number is missing (``prediction_why`` says which). The wild corpus is checked the same way,
against each script's full-removal switch (``labels.csv``'s ``removes``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from analysis.findings import PREDICTION_FIELDS, Finding
from harness.core.enums import StrEnum
from harness.judge.measure import LIMIT
from harness.judge.truth import Truth, TruthState
from scenarios import Scenario

__all__ = [
    "CHECKED_STATES",
    "CORPUS_COLUMNS",
    "LIMIT",
    "PREDICTION_COLUMNS",
    "Check",
    "corpus_checks",
    "error_summary",
    "judge_prediction",
    "prediction_columns",
]


class Check(StrEnum):
    """Whether a prediction held."""

    WITHIN = "within"
    OUTSIDE = "outside"
    NOT_CHECKED = "not_checked"


#: A finding's predicted speedup and its 95% interval: the first three of
#: :data:`analysis.findings.PREDICTION_FIELDS`, the names every table and reader uses.
SPEEDUP_FIELDS: tuple[str, str, str] = PREDICTION_FIELDS[:3]  # type: ignore[assignment]
SPEEDUP, SPEEDUP_CI_LOW, SPEEDUP_CI_HIGH = SPEEDUP_FIELDS

#: The columns diagnosis.csv gains (after ``match``), in order.
PREDICTION_COLUMNS: tuple[str, ...] = (
    "predicted_class",
    *SPEEDUP_FIELDS,
    "predicted_step_ms",
    "measured_speedup",
    "measured_speedup_ci_low",
    "measured_speedup_ci_high",
    "measured_by",
    "prediction_error",
    "prediction",
    "prediction_why",
    "trace_only_speedup",
)


def _num(value: Any) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


#: The truth states on which the scenario's class's prediction is checked: where the removal
#: measured a cause to remove (on ``clear`` there is next to nothing to predict).
CHECKED_STATES = (TruthState.FIRES, TruthState.EITHER)


def prediction_columns(
    scen: Scenario, truth: Truth, findings: Mapping[str, Finding] | None, tolerance: float
) -> dict[str, Any]:
    """The :data:`PREDICTION_COLUMNS` of one variant's diagnosis row: the scenario's class's
    prediction against the measured removal (``truth.saving`` as a speedup, the same
    measurement the truth is decided on)."""
    out: dict[str, Any] = dict.fromkeys(PREDICTION_COLUMNS)
    out["predicted_class"] = scen.bottleneck
    f = (findings or {}).get(scen.bottleneck)
    if f is not None:
        for k in SPEEDUP_FIELDS:
            out[k] = getattr(f, k)
        out["predicted_step_ms"] = f.predicted_step_ms
    s = truth.saving
    if s is not None:
        out.update(measured_speedup=s.speedup, measured_speedup_ci_low=s.speedup_low,
                   measured_speedup_ci_high=s.speedup_high, measured_by=s.by)  # fmt: skip
    if truth.state not in CHECKED_STATES:
        out["prediction"], out["prediction_why"] = Check.NOT_CHECKED, f"truth {truth.state}"
        return out
    return out | judge_prediction(out["predicted_speedup"], s.speedup if s else None, tolerance,
                                  why=s.by if s else "", finding=f)  # fmt: skip


def judge_prediction(
    predicted: float | None,
    measured: float | None,
    tolerance: float,
    *,
    why: str = "",
    finding: Finding | None = None,
) -> dict[str, Any]:
    """``prediction_error``, ``prediction`` and ``prediction_why`` of one pair."""
    if predicted is None:
        note = finding.prediction_note if finding is not None else "no finding"
        return {"prediction_error": None, "prediction": Check.NOT_CHECKED, "prediction_why": note}
    if measured is None or measured <= 0:
        return {"prediction_error": None, "prediction": Check.NOT_CHECKED, "prediction_why": why}
    err = predicted / measured - 1.0
    ok = abs(err) <= tolerance
    return {
        "prediction_error": err,
        "prediction": Check.WITHIN if ok else Check.OUTSIDE,
        "prediction_why": f"{'within' if ok else 'outside'} {tolerance:.0%} of the measured "
        f"{measured:.3g}x",
    }


def error_summary(errors: pd.Series) -> dict[str, float | int | None]:
    """Median and largest absolute prediction error over the checked pairs, and their count."""
    e = pd.to_numeric(errors, errors="coerce").dropna().abs()
    if e.empty:
        return {"checked": 0, "median_abs_error": None, "max_abs_error": None}
    return {
        "checked": int(e.size),
        "median_abs_error": float(np.median(e)),
        "max_abs_error": float(e.max()),
    }


#: Columns of a corpus check (one row per report and labelled cause).
CORPUS_COLUMNS: tuple[str, ...] = (
    "report",
    "class",
    "switch",
    *SPEEDUP_FIELDS,
    "measured_speedup",
    "measured_speedup_min",
    "measured_speedup_max",
    "prediction_error",
    "prediction",
    "prediction_why",
    "trace_only_speedup",
    "trace_only_error",
)


def corpus_checks(
    removes: Mapping[str, Mapping[str, str]],
    predicted: pd.DataFrame,
    measured: pd.DataFrame,
    tolerance: float,
) -> pd.DataFrame:
    """Per report and each cause its labels name a full-removal switch for: the finding's
    predicted speedup (``predicted``: one row per report, ``predicted_speedup:<class>`` and its
    interval columns, as ``harness score`` collects them) against the switch's measured speedup
    (``measured.csv``: script, fix, speedup, speedup_min, speedup_max)."""
    rows = []
    by_report = predicted.set_index("report") if "report" in predicted else predicted
    for report, by_class in removes.items():
        have = report in by_report.index
        for klass, switch in by_class.items():
            row: dict[str, Any] = {"report": report, "class": klass, "switch": switch}
            for k in SPEEDUP_FIELDS:
                col = f"{k}:{klass}"
                row[k] = _num(by_report.at[report, col]) if have and col in by_report else None
            hit = measured[(measured["script"] == report) & (measured["fix"] == switch)]
            for k in ("", "_min", "_max"):
                row[f"measured_speedup{k}"] = _num(hit[f"speedup{k}"].iloc[0]) if len(hit) else None
            m = row["measured_speedup"]
            why = f"--fix {switch} not measured" if m is None else f"--fix {switch}"
            note = "no prediction" if have else "no export"
            judged = judge_prediction(row["predicted_speedup"], m, tolerance, why=why)
            if row["predicted_speedup"] is None:
                judged["prediction_why"] = note
            col = f"trace_only_speedup:{klass}"
            alone = _num(by_report.at[report, col]) if have and col in by_report else None
            judged["trace_only_speedup"] = alone
            judged["trace_only_error"] = alone / m - 1.0 if alone and m else None
            rows.append(row | judged)
    return pd.DataFrame(rows, columns=list(CORPUS_COLUMNS))
