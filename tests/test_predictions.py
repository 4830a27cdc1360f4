"""Checking predictions against a run's measurements (harness/judge/predictions.py), on the tables of
a real H100 run (tests/data/h100_run_tables: main at 822d3ef, all four single-GPU scenarios)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analysis.findings import Finding
from harness.judge import predictions as P
from scenarios import discover

TABLES = __import__("pathlib").Path(__file__).resolve().parent / "data" / "h100_run_tables"


@pytest.fixture(scope="module")
def runs() -> pd.DataFrame:
    return pd.read_csv(TABLES / "runs.csv")


@pytest.fixture(scope="module")
def work() -> pd.DataFrame:
    return pd.read_csv(TABLES / "gpu_work.csv")


@pytest.fixture(scope="module")
def found():
    return discover()


def _row(runs: pd.DataFrame, scenario: str, variant: str) -> pd.Series:
    return runs[(runs.scenario == scenario) & (runs.variant == variant)].iloc[0]


def test_baseline_is_checked_against_ideal(runs, work, found) -> None:
    m, lo, hi, by = P.measured_removal(found["forced_sync"], "baseline", "bottleneck", runs, work)
    ideal = _row(runs, "forced_sync", "ideal")
    assert by == "ideal"
    assert (m, lo, hi) == (ideal.speedup, ideal.speedup_ci_low, ideal.speedup_ci_high)


def test_kernel_flood_is_checked_against_its_limit(found) -> None:
    """The committed H100 reference run's tables (822d3ef's have no limit: a graph-traced variant
    without kernels left it empty there)."""
    ref = TABLES.parent.parent.parent / "results" / "reference" / "h100"
    runs, work = pd.read_csv(ref / "runs.csv"), pd.read_csv(ref / "gpu_work.csv")
    m, lo, hi, by = P.measured_removal(found["kernel_flood"], "baseline", "bottleneck", runs, work)
    base = _row(runs, "kernel_flood", "baseline")
    limit = work[(work.scenario == "kernel_flood")].limit_ms_per_step.dropna().iloc[0]
    assert by == "limit" and lo is None and hi is None
    assert m == pytest.approx(base.step_ms_mean / limit)


def test_no_limit_is_not_a_number(runs, work, found) -> None:
    m, _, _, by = P.measured_removal(found["kernel_flood"], "baseline", "bottleneck", runs, work)
    assert m is None and by == "no analytic limit in gpu_work.csv"


def test_partial_fix_is_checked_against_what_is_left(runs, work, found) -> None:
    """async_dataloader: its leftover data stall predicts fix step / ideal step."""
    scen = found["sync_loading"]
    m, lo, hi, by = P.measured_removal(scen, "async_dataloader", "partial", runs, work)
    fix, ideal = _row(runs, "sync_loading", "async_dataloader"), _row(runs, "sync_loading", "ideal")
    assert by == "ideal"
    assert m == pytest.approx(fix.step_ms_mean / ideal.step_ms_mean)
    assert lo < m < hi


def _finding(speedup: float | None) -> Finding:
    f = Finding("host_sync", True, 0.3, {}, [], "")
    f.predicted_speedup, f.prediction_note = speedup, "" if speedup else "fewer than 2 iterations"
    return f


@pytest.mark.parametrize(
    ("predicted", "check"),
    [
        (1.43, P.Check.WITHIN),
        (1.15, P.Check.WITHIN),
        (1.1, P.Check.OUTSIDE),
        (1.9, P.Check.OUTSIDE),
    ],
)
def test_tolerance_decides(runs, work, found, predicted: float, check: P.Check) -> None:
    """forced_sync's ideal measured 1.427x: within 20% means 1.14x..1.71x."""
    cols = P.prediction_columns(
        found["forced_sync"], "baseline", "bottleneck", {"host_sync": _finding(predicted)},
        runs, work, 0.2,
    )  # fmt: skip
    assert cols["prediction"] is check
    assert cols["prediction_error"] == pytest.approx(predicted / 1.4269764281628767 - 1)
    assert cols["measured_by"] == "ideal" and cols["predicted_class"] == "host_sync"


def test_missing_prediction_says_why(runs, work, found) -> None:
    cols = P.prediction_columns(
        found["forced_sync"], "baseline", "bottleneck", {"host_sync": _finding(None)},
        runs, work, 0.2,
    )  # fmt: skip
    assert cols["prediction"] is P.Check.NOT_CHECKED
    assert cols["prediction_why"] == "fewer than 2 iterations"
    assert cols["prediction_error"] is None and not math.isnan(cols["measured_speedup"])


def test_clean_variants_are_not_checked(runs, work, found) -> None:
    cols = P.prediction_columns(found["forced_sync"], "ideal", "clean", {}, runs, work, 0.2)
    assert cols["prediction"] is P.Check.NOT_CHECKED and cols["measured_speedup"] is None


def test_error_summary() -> None:
    s = P.error_summary(pd.Series([0.1, -0.3, None, 0.05]))
    assert s == {"checked": 3, "median_abs_error": pytest.approx(0.1), "max_abs_error": 0.3}
    assert P.error_summary(pd.Series([None]))["median_abs_error"] is None


def test_a_measured_limit_metric_is_the_removal(found) -> None:
    """pipeline_imbalance has no ideal: its cause removed is a perfectly balanced cut, whose step
    is the bound each variant measures of itself (``Scenario.limit_metric``); the steps are a
    real CPU run's (results/cpu/pipeline_imbalance), the bounds given here."""
    scen = found["pipeline_imbalance"]
    assert scen.removed_by == "limit" and scen.limit_metric == "balanced_bound_ms"
    runs = pd.read_csv(
        TABLES.parent.parent.parent / "results/cpu/pipeline_imbalance/severity-0.75/runs.csv"
    )
    metrics = {
        ("pipeline_imbalance", "baseline"): {"balanced_bound_ms": 200.0},
        ("pipeline_imbalance", "more_microbatches"): {"balanced_bound_ms": 250.0},
    }
    m, lo, hi, by = P.measured_removal(scen, "baseline", "bottleneck", runs, None, metrics)
    assert by == "balanced_bound_ms" and lo is None and hi is None
    assert m == pytest.approx(_row(runs, "pipeline_imbalance", "baseline").step_ms_mean / 200.0)
    m, _, _, by = P.measured_removal(scen, "more_microbatches", "partial", runs, None, metrics)
    step = _row(runs, "pipeline_imbalance", "more_microbatches").step_ms_mean
    assert by == "own balanced_bound_ms" and m == pytest.approx(step / 250.0)
    m, _, _, by = P.measured_removal(scen, "baseline", "bottleneck", runs, None, {})
    assert m is None and by == "no balanced_bound_ms measured for baseline"
