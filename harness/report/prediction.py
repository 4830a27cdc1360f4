"""The run report's prediction section: each checked finding's predicted speedup against the
speedup the run measured for removing that cause entirely (diagnosis.csv's prediction columns,
``harness.judge.predictions``)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from harness.report.doc import Badge, Doc
from harness.report.load import RunFolder

__all__ = ["prediction_section"]

_KIND = {"within": "ok", "outside": "refuted", "not_checked": "skipped"}


def _fmt(v: object, digits: int = 3) -> str:
    x = pd.to_numeric(pd.Series([v]), errors="coerce").iloc[0]
    return "–" if pd.isna(x) else f"{x:.{digits}g}"


def _with_ci(value: Any, low: Any, high: Any) -> str:
    """``1.32 [1.26-1.4]``; the value alone where there is no interval (an analytic limit)."""
    if pd.isna(pd.to_numeric(pd.Series([low, high]), errors="coerce")).any():
        return _fmt(value)
    return f"{_fmt(value)} [{_fmt(low)}-{_fmt(high)}]"


def prediction_section(doc: Doc, run: RunFolder, tolerance: float = 0.2) -> None:
    """A predicted-against-measured picture and one row per checked variant."""
    from analysis.plots.prediction import prediction_figure

    diag = run.tables.get("diagnosis.csv")
    if diag is None or diag.empty or "prediction" not in diag:
        doc.note(run.why_missing("diagnosis.csv") if diag is None else
                 "diagnosis.csv has no prediction columns (written before predictions existed)")  # fmt: skip
        return
    checked = diag[diag["prediction"].astype(str) != "not_checked"]
    if "truth_state" in diag:  # the measured truth: where the removal left a cause to predict
        rows = diag[diag["truth_state"].astype(str).isin(["fires", "either"])]
    else:  # a table written before the truth was measured
        rows = diag[diag["expected_role"].astype(str).isin(["bottleneck", "partial"])]
    if rows.empty:
        doc.note("no profiled variant measured a cause to remove: nothing to check", kind="caveat")
        return
    pairs = checked.assign(
        label=checked["scenario"] + " · " + checked["variant"],
        predicted=checked["predicted_speedup"],
        measured=checked["measured_speedup"],
        predicted_ci_low=checked["predicted_speedup_ci_low"],
        predicted_ci_high=checked["predicted_speedup_ci_high"],
        measured_ci_low=checked["measured_speedup_ci_low"],
        measured_ci_high=checked["measured_speedup_ci_high"],
        group=checked["predicted_class"],
    )
    if not pairs.empty:
        doc.image(
            "predictions",
            prediction_figure(pairs, tolerance),
            "predicted against measured speedup",
            "Each point: the finding of the scenario's class on a profiled variant predicts the "
            "speedup of removing that cause entirely (from the trace alone); the run measured it "
            "(each variant whose timed saving carries the cause against the variant that removes "
            "it, or its own measured limit, paired within timing rounds). The band is "
            f"+-{tolerance:.0%}.",
            width_px=560,
        )
    doc.table(
        ["scenario", "variant", "class", "predicted [95% CI]", "measured [95% CI]", "by",
         "error", "check"],
        (
            [
                str(r.scenario), str(r.variant), str(r.predicted_class),
                _with_ci(r.predicted_speedup, r.predicted_speedup_ci_low,
                         r.predicted_speedup_ci_high),
                _with_ci(r.measured_speedup, r.measured_speedup_ci_low,
                         r.measured_speedup_ci_high),
                str(r.measured_by) if isinstance(r.measured_by, str) else "",
                "–" if pd.isna(r.prediction_error) else f"{r.prediction_error:+.0%}",
                Badge(str(r.prediction), _KIND.get(str(r.prediction), "skipped")),
            ]
            for r in rows.itertuples()
        ),
        numeric=(3, 4, 6),
    )  # fmt: skip
