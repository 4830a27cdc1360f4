"""The run report's prediction section: each checked finding's predicted speedup against the
speedup the run measured for removing that cause entirely (diagnosis.csv's prediction columns,
``harness.judge.predictions``).

One number, one interval: where the removal is measured against the baseline itself (the
baseline's row, measured by ``ideal`` or a fix), the measured speedup is that variant's speedup
in runs.csv, with runs.csv's interval, as the matrix and the variants table show it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from harness.report.doc import Badge, Doc
from harness.report.fmt import num, signed_share, speedup_ci, speedup_of
from harness.report.load import EITHER, FIRES, NOT_CHECKED, OUTSIDE, WITHIN, RunFolder

__all__ = ["measured_text", "predicted_text", "prediction_section"]

_KIND = {WITHIN: "ok", OUTSIDE: "refuted", NOT_CHECKED: "skipped"}

#: The truth states on which a prediction is checked (harness.judge.predictions.CHECKED_STATES).
_CHECKED = (FIRES, EITHER)


def predicted_text(r: Mapping[str, Any]) -> str:
    """A diagnosis.csv row's predicted speedup with its interval."""
    return speedup_ci(r.get("predicted_speedup"), r.get("predicted_speedup_ci_low"),
                      r.get("predicted_speedup_ci_high"))  # fmt: skip


def _same_as_runs(run: RunFolder, r: Mapping[str, Any]) -> dict[str, Any] | None:
    """The runs.csv row whose speedup is this row's measured speedup (the baseline measured by
    a variant of its scenario: the same ratio of the same rounds), else None."""
    by, runs = r.get("measured_by"), run.runs
    if str(r.get("kind")) != "baseline" or not isinstance(by, str) or runs is None:
        return None
    sel = runs[(runs["scenario"] == str(r.get("scenario"))) & (runs["variant"] == by)]
    return sel.iloc[0].to_dict() if not sel.empty else None


def measured_text(run: RunFolder, r: Mapping[str, Any]) -> str:
    """A diagnosis.csv row's measured speedup with its interval (runs.csv's, where it holds the
    same speedup: :func:`_same_as_runs`)."""
    same = _same_as_runs(run, r)
    if same is not None:
        return speedup_of(same)
    return speedup_ci(r.get("measured_speedup"), r.get("measured_speedup_ci_low"),
                      r.get("measured_speedup_ci_high"))  # fmt: skip


def _checked_rows(diag: pd.DataFrame) -> pd.DataFrame:
    """The variants where the removal left a cause to predict (truth fires or either)."""
    if "truth_state" in diag:
        return diag[diag["truth_state"].astype(str).isin(_CHECKED)]
    return diag[diag["expected_role"].astype(str).isin(["bottleneck", "partial"])]


def _figure(doc: Doc, run: RunFolder, checked: pd.DataFrame, tolerance: float) -> None:
    """The picture of the checked pairs, with the intervals the table shows."""
    from analysis.plots.prediction import prediction_figure

    same = [_same_as_runs(run, r) for r in checked.to_dict("records")]

    def measured(col: str, runs_col: str) -> list[float]:
        return [num(s[runs_col]) if s is not None else num(v)
                for s, v in zip(same, checked[col], strict=True)]  # fmt: skip

    pairs = checked.assign(
        label=checked["scenario"] + " · " + checked["variant"],
        predicted=checked["predicted_speedup"],
        measured=measured("measured_speedup", "speedup"),
        predicted_ci_low=checked["predicted_speedup_ci_low"],
        predicted_ci_high=checked["predicted_speedup_ci_high"],
        measured_ci_low=measured("measured_speedup_ci_low", "speedup_ci_low"),
        measured_ci_high=measured("measured_speedup_ci_high", "speedup_ci_high"),
        group=checked["predicted_class"],
    )
    doc.image(
        "predictions",
        prediction_figure(pairs, tolerance),
        "predicted against measured speedup",
        "Each point: the finding of the scenario's class on a profiled variant predicts the "
        "speedup of removing that cause entirely (from the trace alone); the run measured it "
        "(each variant whose timed saving carries the cause against the variant that removes "
        "it, or its own measured limit: a ratio of mean step times, paired within timing "
        f"rounds). The band is +-{tolerance:.0%}.",
        width_px=560,
    )


def prediction_section(doc: Doc, run: RunFolder, tolerance: float = 0.2) -> None:
    """A predicted-against-measured picture and one row per variant with a cause to predict."""
    diag = run.tables.get("diagnosis.csv")
    if diag is None or diag.empty or "prediction" not in diag:
        doc.note(run.why_missing("diagnosis.csv") if diag is None else
                 "diagnosis.csv has no prediction columns (written before predictions existed)")  # fmt: skip
        return
    rows = _checked_rows(diag)
    if rows.empty:
        doc.note("no profiled variant measured a cause to remove: nothing to check", kind="caveat")
        return
    checked = diag[diag["prediction"].astype(str) != NOT_CHECKED]
    if not checked.empty:
        _figure(doc, run, checked, tolerance)
    doc.table(
        ["scenario", "variant", "class", "predicted speedup [95% CI]",
         "measured speedup [95% CI]", "by", "error", "check"],
        (
            [
                str(r["scenario"]), str(r["variant"]), str(r["predicted_class"]),
                predicted_text(r), measured_text(run, r),
                str(r["measured_by"]) if isinstance(r.get("measured_by"), str) else "",
                signed_share(r.get("prediction_error")),
                Badge(str(r["prediction"]), _kind(r["prediction"])),
            ]
            for r in rows.to_dict("records")
        ),
        numeric=(3, 4, 6),
    )  # fmt: skip
    doc.p(
        "Speedups are ratios of mean step times. error: predicted / measured - 1; check: within "
        f"where its size is at most {tolerance:.0%}; not_checked where either number is missing "
        "(diagnosis.csv's prediction_why says which). Rows: the variants whose measured truth "
        "leaves a cause to predict (fires or either).",
        cls="sub",
    )


def _kind(check: Any) -> str:
    return _KIND.get(str(check), "skipped")
