"""Checking every prediction against what was measured in the same run.

A finding predicts the speedup of removing its cause entirely (``analysis.detect.predict``).
The suite measured that removal: each scenario names the variant that removes its cause
(``Scenario.removed_by``: ``ideal``, or ``limit`` for an analytic limit such as kernel_flood's
kernel sum), so

- on the **baseline**, the prediction of the scenario's class is checked against the baseline's
  speedup from that variant (or baseline step / limit);
- on a **partial fix**, the finding that is left predicts what is left: it is checked against
  the fix's step over the removal's (the speedup still to be had from the fix to ``ideal``; for a
  scenario with an analytic limit, down to the fix's own GPU work per step).

``prediction_error`` is predicted / measured - 1; ``prediction`` is ``within`` when its size is at
most ``diagnosis.predict.tolerance_share``, ``outside`` otherwise, ``not_checked`` when either
number is missing (``prediction_why`` says which). The wild corpus is checked the same way,
against each script's full-removal switch (``labels.csv``'s ``removes``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from enum import Enum
from typing import Any

import numpy as np
import pandas as pd

from analysis.findings import Finding
from scenarios import Scenario

__all__ = [
    "CORPUS_COLUMNS",
    "PREDICTION_COLUMNS",
    "Check",
    "corpus_checks",
    "error_summary",
    "judge_prediction",
    "measured_removal",
    "prediction_columns",
]

#: LIMIT as ``Scenario.removed_by``: the scenario's analytic limit (gpu_work.csv) removes it.
LIMIT = "limit"


class Check(str, Enum):
    """Whether a prediction held."""

    WITHIN = "within"
    OUTSIDE = "outside"
    NOT_CHECKED = "not_checked"

    def __str__(self) -> str:
        return self.value


#: The columns diagnosis.csv gains (after ``match``), in order.
PREDICTION_COLUMNS: tuple[str, ...] = (
    "predicted_class",
    "predicted_speedup",
    "predicted_speedup_ci_low",
    "predicted_speedup_ci_high",
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


def _row(runs: pd.DataFrame, scenario: str, variant: str) -> Mapping[str, Any] | None:
    hit = runs[(runs["scenario"] == scenario) & (runs["variant"] == variant)]
    return None if hit.empty else hit.iloc[0].to_dict()


def _limit_ms(work: pd.DataFrame | None, scenario: str) -> float | None:
    if work is None or work.empty or "limit_ms_per_step" not in work:
        return None
    vals = pd.to_numeric(work.loc[work["scenario"] == scenario, "limit_ms_per_step"], "coerce")
    vals = vals.dropna()
    return float(vals.iloc[0]) if len(vals) else None


def _own_gpu_ms(work: pd.DataFrame | None, scenario: str, variant: str) -> float | None:
    """A variant's own GPU work per step: its kernels' summed time (graph replays' spans where
    it was traced at graph level and has no kernel rows)."""
    if work is None or work.empty:
        return None
    hit = work[(work["scenario"] == scenario) & (work["variant"] == variant)]
    for col in ("kernel_ms_per_step", "gpu_busy_ms_per_step"):
        if col in hit and len(hit):
            v = _num(hit[col].iloc[0])
            if v is not None and v > 0 and (col != "kernel_ms_per_step" or _replays(hit) == 0):
                return v
    return None


def _replays(hit: pd.DataFrame) -> float:
    v = _num(hit["graph_replays_per_step"].iloc[0]) if "graph_replays_per_step" in hit else None
    return v or 0.0


def measured_removal(
    scen: Scenario,
    variant: str,
    role: str,
    runs: pd.DataFrame,
    work: pd.DataFrame | None,
    metrics: Mapping[tuple[str, str], Mapping[str, float]] | None = None,
) -> tuple[float | None, float | None, float | None, str]:
    """(speedup, CI low, CI high, what measured it) of removing the cause entirely, seen from
    ``variant``; None and the reason where the run cannot say. ``metrics``: each variant's
    result metrics (:func:`harness.judge.truth.measurements`), for a ``Scenario.limit_metric``."""
    mine = _row(runs, scen.name, variant)
    if mine is None or _num(mine.get("step_ms_mean")) is None:
        return None, None, None, f"{variant} has no measured step"
    by = scen.removed_by
    if by == LIMIT and scen.limit_metric:
        # the baseline's bound for the cause removed; a partial fix's own for what is left
        source = "baseline" if role == "bottleneck" else variant
        limit = _num((metrics or {}).get((scen.name, source), {}).get(scen.limit_metric))
        if limit is None or limit <= 0:
            return None, None, None, f"no {scen.limit_metric} measured for {source}"
        what = scen.limit_metric if role == "bottleneck" else f"own {scen.limit_metric}"
        return float(mine["step_ms_mean"]) / limit, None, None, what
    if by == LIMIT and role == "bottleneck":
        limit = _limit_ms(work, scen.name)
        if limit is None:
            return None, None, None, "no analytic limit in gpu_work.csv"
        return float(mine["step_ms_mean"]) / limit, None, None, "limit"
    if by == LIMIT:  # a partial fix: what is left of the cause, down to its own GPU work
        own = _own_gpu_ms(work, scen.name, variant)
        if own is None:
            return None, None, None, f"no GPU work of {variant} in gpu_work.csv"
        return float(mine["step_ms_mean"]) / own, None, None, "own kernel sum"
    other = _row(runs, scen.name, by)
    if other is None or _num(other.get("step_ms_mean")) is None:
        return None, None, None, f"{by} has no measured step"
    if role == "bottleneck":  # the baseline: its speedup from the removal, with its interval
        return (
            _num(other.get("speedup")),
            _num(other.get("speedup_ci_low")),
            _num(other.get("speedup_ci_high")),
            by,
        )
    ratio = float(mine["step_ms_mean"]) / float(other["step_ms_mean"])
    lo = _div(other.get("speedup_ci_low"), mine.get("speedup_ci_high"))
    hi = _div(other.get("speedup_ci_high"), mine.get("speedup_ci_low"))
    return ratio, lo, hi, by


def _div(a: Any, b: Any) -> float | None:
    x, y = _num(a), _num(b)
    return x / y if x is not None and y else None


def prediction_columns(
    scen: Scenario,
    variant: str,
    role: str,
    findings: Mapping[str, Finding] | None,
    runs: pd.DataFrame,
    work: pd.DataFrame | None,
    tolerance: float,
    metrics: Mapping[tuple[str, str], Mapping[str, float]] | None = None,
) -> dict[str, Any]:
    """The :data:`PREDICTION_COLUMNS` of one variant's diagnosis row."""
    out: dict[str, Any] = dict.fromkeys(PREDICTION_COLUMNS)
    out["predicted_class"] = scen.bottleneck
    f = (findings or {}).get(scen.bottleneck)
    if f is not None:
        for k in ("predicted_speedup", "predicted_speedup_ci_low", "predicted_speedup_ci_high"):
            out[k] = getattr(f, k)
        out["predicted_step_ms"] = f.predicted_step_ms
    if role not in ("bottleneck", "partial"):
        out["prediction"], out["prediction_why"] = Check.NOT_CHECKED, f"a {role} variant"
        return out
    m, lo, hi, by = measured_removal(scen, variant, role, runs, work, metrics)
    out.update(measured_speedup=m, measured_speedup_ci_low=lo, measured_speedup_ci_high=hi)
    out["measured_by"] = by if m is not None else ""
    return out | judge_prediction(out["predicted_speedup"], m, tolerance, why=by, finding=f)


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
    "predicted_speedup",
    "predicted_speedup_ci_low",
    "predicted_speedup_ci_high",
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
            for k in ("predicted_speedup", "predicted_speedup_ci_low", "predicted_speedup_ci_high"):
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
