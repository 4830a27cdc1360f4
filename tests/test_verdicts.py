"""Verdict and confusion-matrix rules on small hand-made tables (the e2e test runs them on a
real run)."""

from __future__ import annotations

import math

import pandas as pd

import scenarios
from analysis.findings import CLASSES
from harness.verdicts import confusion, verdicts

FOUND = scenarios.discover()


def _diag(rows):
    out = []
    for variant, kind, injected, fired in rows:
        row = {"scenario": "sync_loading", "variant": variant, "kind": kind, "injected": injected}
        for k in CLASSES:
            row[f"{k}_fired"] = k in fired
            row[f"{k}_impact"] = 0.9 if k in fired else 0.0
            row[f"{k}_reason"] = "table missing" if "nocuda" in fired else "measured"
        row["primary"] = next((k for k in CLASSES if k in fired), "none")
        out.append(row)
    return pd.DataFrame(out)


def _runs(ci_low=2.0):
    return pd.DataFrame(
        {
            "scenario": ["sync_loading"] * 3,
            "variant": ["baseline", "async_dataloader", "ideal"],
            "kind": ["baseline", "fix", "ideal"],
            "speedup_ci_low": [0.9, ci_low, 5.0],
        }
    )


def test_confirmed_refuted_inconclusive():
    ok = _diag(
        [
            ("baseline", "baseline", "data_stall", {"data_stall"}),
            ("async_dataloader", "fix", "none", set()),
            ("ideal", "ideal", "none", set()),
        ]
    )
    assert verdicts(ok, _runs(), FOUND)["verdict"].item() == "confirmed"
    leak = _diag(
        [
            ("baseline", "baseline", "data_stall", {"data_stall"}),
            ("async_dataloader", "fix", "none", {"data_stall"}),
            ("ideal", "ideal", "none", set()),
        ]
    )
    v = verdicts(leak, _runs(), FOUND)
    assert v["verdict"].item() == "refuted" and "async_dataloader" in v["reason"].item()
    silent = _diag(
        [
            ("baseline", "baseline", "data_stall", set()),
            ("async_dataloader", "fix", "none", set()),
            ("ideal", "ideal", "none", set()),
        ]
    )
    assert verdicts(silent, _runs(), FOUND)["verdict"].item() == "refuted"
    assert verdicts(ok, _runs(ci_low=1.05), FOUND)["verdict"].item() == "inconclusive"
    nocuda = _diag(
        [
            ("baseline", "baseline", "data_stall", {"nocuda"}),
            ("async_dataloader", "fix", "none", set()),
            ("ideal", "ideal", "none", set()),
        ]
    )
    assert verdicts(nocuda, _runs(), FOUND)["verdict"].item() == "inconclusive"


def test_off_target_findings_are_recorded():
    d = _diag(
        [
            ("baseline", "baseline", "data_stall", {"data_stall", "pageable_copy"}),
            ("async_dataloader", "fix", "none", {"host_sync"}),
            ("ideal", "ideal", "none", set()),
        ]
    )
    v = verdicts(d, _runs(), FOUND)
    assert v["off_target"].item() == "baseline:pageable_copy; async_dataloader:host_sync"


def test_confusion_scores():
    d = _diag(
        [
            ("baseline", "baseline", "data_stall", {"data_stall"}),
            ("async_dataloader", "fix", "none", {"data_stall"}),
            ("ideal", "ideal", "none", set()),
        ]
    )
    matrix, scores = confusion(d)
    assert matrix.loc["data_stall", "data_stall"] == 1
    assert matrix.loc["none", "data_stall"] == 1
    assert matrix.loc["none", "none"] == 1
    s = scores.set_index("class")
    assert s.loc["data_stall", "precision"] == 0.5
    assert s.loc["data_stall", "recall"] == 1.0
    assert math.isclose(s.loc["data_stall", "f1"], 2 / 3)
    assert math.isnan(s.loc["exposed_comm", "precision"])
