"""gil_contention end to end through the real CLI on the CPU, profiled under real nsys (issue 43):
the baseline's GIL waits found from its own export, its saving measured against ``ideal``, and
the best fix measured faster than the baseline with an interval whose low end is above 1.

What a loaded 2-core box allows (measured 2026-11-29 with two busy loops beside the run): the
best fix, ``ideal``, still gains 3.99x [2.42-7.42] (idle: 4.9x [4.2-5.5]), but ``process_pool``
falls to 1.68x [0.92-3.26]: its pool process competes for the two cores, so removing the
metrics entirely saves 58% of its step, and the measured truth then expects the class on it
while no GIL wait is there (the verdict reads refuted, naming it). So the verdict is asserted
``confirmed`` only where no fix measured such a gap; on an idle box it is confirmed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from tests._rounds import saving_from_files
from tests.conftest import only_run_dir, run_cli

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("nsys") is None, reason="nsys not installed"),
]

SCENARIO = "gil_contention"
FIXES = ["process_pool", "vectorised", "ideal"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, cache_dir) -> Path:
    results = tmp_path_factory.mktemp("gil")
    proc = run_cli(
        [
            "run",
            f"+scenario={SCENARIO}",
            "size=smoke",
            "harness.repeats=3",
            "harness.progress=false",
            f"harness.results_dir={results}",
            f"harness.cache_dir={cache_dir}",
        ]
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return only_run_dir(results)


def test_the_best_fix_is_measured_faster_with_an_interval(run_dir: Path) -> None:
    runs = pd.read_csv(run_dir / "runs.csv").set_index("variant")
    assert (runs["status"] == "ok").all(), runs["status"]
    assert (runs.loc[FIXES, "paired_rounds"] == 3).all()
    assert runs.loc["ideal", "speedup_ci_low"] > 1.0, runs.loc["ideal"]
    assert (runs.loc[FIXES, "speedup_ci_low"] <= runs.loc[FIXES, "speedup"]).all()


def test_the_truth_is_measured_and_the_verdict_confirmed(run_dir: Path) -> None:
    diag = pd.read_csv(run_dir / "diagnosis.csv").set_index("variant")
    for variant in ["baseline", *FIXES]:
        want = saving_from_files(run_dir, SCENARIO, variant, "ideal")
        assert diag.loc[variant, "measured_saving"] == pytest.approx(want, abs=1e-9)
    assert diag.loc["baseline", "truth_state"] == "fires"
    assert diag.loc["baseline", "primary"] == "gil_contention"
    assert (diag.loc[FIXES, "primary"] == "none").all(), diag.loc[FIXES, "primary"]
    verdict = pd.read_csv(run_dir / "verdicts.csv").set_index("scenario").loc[SCENARIO]
    gapped = [f for f in FIXES if diag.loc[f, "truth_state"] == "fires"]
    if gapped:  # a loaded box: the fix's own work competed for the cores (module docstring)
        assert verdict["verdict"] == "refuted", verdict
        assert all(f"{f}: gil_contention measured" in verdict["reason"] for f in gapped)
    else:
        assert verdict["verdict"] == "confirmed", verdict["reason"]
        assert "baseline: gil_contention measured" in verdict["reason"]
