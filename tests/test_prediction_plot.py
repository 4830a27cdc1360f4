"""The predicted-against-measured picture (analysis/plots/prediction.py) on real pairs: the
detectors' predictions on committed wild-corpus exports against the corpus's measured removals."""

from __future__ import annotations

import csv
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from analysis import trace as T
from analysis.detect import diagnose
from analysis.plots.prediction import prediction_figure
from harness.judge import predictions as P
from harness.judge.labels import parse_removes
from tests._fixtures import sqlite_fixture

WILD = Path(__file__).resolve().parent.parent / "corpus" / "wild"
SCRIPTS = ("hs_item_checks", "hs_step_logging")


@pytest.fixture(scope="module")
def checks() -> pd.DataFrame:
    labels = {r["script"]: r for r in csv.DictReader(open(WILD / "labels.csv"))}
    removes = {s: parse_removes(labels[s]["removes"]) for s in SCRIPTS}
    rows = []
    for s in SCRIPTS:
        with T.open_trace(sqlite_fixture(s, WILD / "exports")) as tr:
            row: dict[str, object] = {"report": s}
            for f in diagnose(tr):
                for k in (
                    "predicted_speedup",
                    "predicted_speedup_ci_low",
                    "predicted_speedup_ci_high",
                ):
                    row[f"{k}:{f.klass}"] = getattr(f, k)
            rows.append(row)
    predicted = pd.DataFrame(rows)
    measured = pd.read_csv(WILD / "measured.csv")
    return P.corpus_checks(removes, predicted, measured, 0.2)


def test_every_labelled_cause_is_a_row(checks: pd.DataFrame) -> None:
    assert sorted(zip(checks["report"], checks["class"], strict=True)) == [
        ("hs_item_checks", "data_stall"),
        ("hs_item_checks", "fp32_math"),  # its amp switch, timed on the H200 (timing.csv amp-*)
        ("hs_item_checks", "host_sync"),
        ("hs_step_logging", "data_stall"),
        ("hs_step_logging", "fp32_math"),
        ("hs_step_logging", "host_sync"),
    ]
    assert (checks["predicted_speedup"] > 1).all()


def test_figure_draws_each_measured_pair(checks: pd.DataFrame, tmp_path: Path) -> None:
    rows = checks.assign(
        label=checks["report"] + " " + checks["class"],
        predicted=checks["predicted_speedup"],
        measured=checks["measured_speedup"],
        group=checks["class"],
    )
    fig = prediction_figure(rows, tolerance=0.2)
    ax = fig.axes[0]
    measured = rows["measured"].notna().sum()
    drawn = sum(len(line.get_xdata()) for line in ax.lines if line.get_marker() == "o")
    assert drawn == measured
    assert ax.get_xscale() == ax.get_yscale() == "log"
    inside = int((rows["predicted"] / rows["measured"] - 1).abs().le(0.2).sum())
    assert ax.get_title() == f"{inside} of {measured} predictions within 20%"
    out = tmp_path / "p.png"
    FigureCanvasAgg(fig).print_png(out)
    assert out.stat().st_size > 10_000
