"""Checking predictions against a run's measurements (harness/judge/predictions.py): the
scenario's class's predicted speedup against the measured removal, the same measurement the
truth is decided on (:class:`harness.judge.measure.Saving` as a speedup)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analysis.findings import Finding
from harness.judge import predictions as P
from harness.judge.measure import Saving
from harness.judge.truth import expect
from scenarios import discover

FOUND = discover()
FORCED = FOUND["forced_sync"]
#: forced_sync's ideal against its baseline on the H100 run of tests/data/h100_run_tables:
#: 1.427x, the saving 1 - 1/1.427 (its interval here hand-made).
MEASURED = 1.4269764281628767
SAVING = Saving(share=1 - 1 / MEASURED, low=0.28, high=0.31, by="ideal", rounds=2)


def _truth(saving: Saving | None = SAVING, variant: str = "baseline"):
    return expect(FORCED, variant, saving, 0.15, "no ideal")


def _finding(speedup: float | None) -> Finding:
    note = "" if speedup else "fewer than 2 iterations"
    return Finding(
        "host_sync", True, 0.3, {}, [], "", predicted_speedup=speedup, prediction_note=note
    )


@pytest.mark.parametrize(
    ("predicted", "check"),
    [
        (1.43, P.Check.WITHIN),
        (1.15, P.Check.WITHIN),
        (1.1, P.Check.OUTSIDE),
        (1.9, P.Check.OUTSIDE),
    ],
)
def test_tolerance_decides(predicted: float, check: P.Check) -> None:
    """forced_sync's ideal measured 1.427x: within 20% means 1.14x..1.71x."""
    cols = P.prediction_columns(FORCED, _truth(), {"host_sync": _finding(predicted)}, 0.2)
    assert cols["prediction"] is check
    assert cols["prediction_error"] == pytest.approx(predicted / MEASURED - 1)
    assert cols["measured_by"] == "ideal" and cols["predicted_class"] == "host_sync"
    assert cols["measured_speedup"] == pytest.approx(MEASURED)
    assert cols["measured_speedup_ci_low"] == pytest.approx(1 / (1 - 0.28))
    assert cols["measured_speedup_ci_high"] == pytest.approx(1 / (1 - 0.31))


def test_missing_prediction_says_why() -> None:
    cols = P.prediction_columns(FORCED, _truth(), {"host_sync": _finding(None)}, 0.2)
    assert cols["prediction"] is P.Check.NOT_CHECKED
    assert cols["prediction_why"] == "fewer than 2 iterations"
    assert cols["prediction_error"] is None and not math.isnan(cols["measured_speedup"])


def test_only_a_measured_cause_is_checked() -> None:
    """Checked where the truth is fires or either (a fix declared clean included); a clear
    variant or one without a measured removal is not, and says its truth."""
    fix = _truth(Saving(share=0.16, low=0.12, high=0.2, by="ideal", rounds=2), "sync_free")
    cols = P.prediction_columns(FORCED, fix, {"host_sync": _finding(1.2)}, 0.2)
    assert cols["prediction"] is P.Check.WITHIN  # either: 1.2 against 1/(1-0.16)
    assert cols["prediction_error"] == pytest.approx(1.2 * (1 - 0.16) - 1)
    clear = _truth(Saving(share=0.0, low=0.0, high=0.0, by="ideal", rounds=2), "ideal")
    cols = P.prediction_columns(FORCED, clear, {}, 0.2)
    assert cols["prediction"] is P.Check.NOT_CHECKED and cols["prediction_why"] == "truth clear"
    assert cols["measured_speedup"] == 1.0  # shown, not checked
    none = P.prediction_columns(FORCED, _truth(None), {}, 0.2)
    assert none["prediction_why"] == "truth no_removal" and none["measured_speedup"] is None


def test_error_summary() -> None:
    s = P.error_summary(pd.Series([0.1, -0.3, None, 0.05]))
    assert s == {"checked": 3, "median_abs_error": pytest.approx(0.1), "max_abs_error": 0.3}
    assert P.error_summary(pd.Series([None]))["median_abs_error"] is None
