"""gil_contention end to end through the real CLI on the CPU, profiled under real nsys (issue 43):
the baseline's GIL waits found from its own export, its saving measured against ``ideal``, the
best fix measured faster than the baseline with an interval whose low end is above 1, and the
verdict ``confirmed``; on a box loaded past its cores (a load average of 4-7), the baseline's
gap may itself be its loop's wait for a core: then it reads ``oversubscribed`` with the numbers
that say so, and the verdict is never refuted.

What a loaded 2-core box does, and why the verdict holds there: ``process_pool``'s pool process
(and ``vectorised``'s numpy thread) compete with the training loop for the two cores, so
removing the metrics entirely (``ideal``) still saves much of the fix's step. Each worker counts
how long its loop thread was runnable without a core (``loop_runqueue_wait_share``, schedstat);
where that extra wait over ideal's explains the gap, the fix's truth is ``oversubscribed`` (not
judged, named with its numbers) instead of ``fires`` (which read refuted before).

Measured 2026-11-29 at the smoke size of width 24 with the sorted numpy scoring (3 rounds, the
box otherwise idle / beside one / two busy loops): best fix vectorised 2.60x [2.33-2.88] / 2.75x
[2.47-3.07] / 3.11x [2.24-4.15], ideal 2.77x / 2.99x / 3.73x; vectorised's gap to ideal 6% (clear)
/ 8% [-6-19%] / 17% [1-29%] (either); process_pool -0% [-19-17%] (either) / 61% [54-68%] with its
loop waiting for a core 50% of its step more than ideal's / 53% [43-60%], 47% more (oversubscribed
both); the baseline 64% / 67% / 73%, fires, found. At width 8 with an n x k comparison matrix
(~1 ms of a core per step against a 3.3 ms loop), CI measured vectorised 34% [20-43%] with too
little run-queue wait to explain it (fires: refuted); its loop's own CPU time grows too while
another thread runs beside it, which schedstat does not count as a wait.
Before ``diagnosis.gil_contention.max_timeout_late_share`` the loaded baseline's GIL timeouts
(returning up to 8 ms after they began, not 5) were not read as GIL waits at all."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from tests._rounds import saving_from_files
from tests.conftest import only_run_dir, run_cli
from tests.test_smoke_all import check_every_variant

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
            # five rounds: on a loaded box the baseline's saving, less its loop's extra wait for
            # a core, must keep its interval's low end over the bar (truth.oversubscribed), and a
            # Student-t interval of three rounds is 4.3 standard errors wide each way
            "harness.repeats=5",
            "harness.progress=false",
            f"harness.results_dir={results}",
            f"harness.cache_dir={cache_dir}",
        ]
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return only_run_dir(results)


def test_every_variant_runs(run_dir: Path) -> None:
    """What tests/test_smoke_all.py checks of every other scenario, on this module's run."""
    check_every_variant(run_dir, SCENARIO)


def test_the_best_fix_is_measured_faster_with_an_interval(run_dir: Path) -> None:
    runs = pd.read_csv(run_dir / "runs.csv").set_index("variant")
    assert (runs["status"] == "ok").all(), runs["status"]
    assert (runs.loc[FIXES, "paired_rounds"] == 5).all()
    assert runs.loc["ideal", "speedup_ci_low"] > 1.0, runs.loc["ideal"]
    best = runs.loc[["process_pool", "vectorised"], "speedup_ci_low"].max()  # a fix, not ideal
    assert best > 1.0, runs.loc[FIXES, ["speedup", "speedup_ci_low"]]
    assert (runs.loc[FIXES, "speedup_ci_low"] <= runs.loc[FIXES, "speedup"]).all()


def test_the_truth_is_measured_and_the_verdict_confirmed(run_dir: Path) -> None:
    diag = pd.read_csv(run_dir / "diagnosis.csv").set_index("variant")
    for variant in ["baseline", *FIXES]:
        want = saving_from_files(run_dir, SCENARIO, variant, "ideal")
        assert diag.loc[variant, "measured_saving"] == pytest.approx(want, abs=1e-9)
    assert diag.loc["baseline", "primary"] == "gil_contention"
    assert (diag.loc[FIXES, "primary"] == "none").all(), diag.loc[FIXES, "primary"]
    verdict = pd.read_csv(run_dir / "verdicts.csv").set_index("scenario").loc[SCENARIO]
    assert "baseline: gil_contention measured" in verdict["reason"]
    base = diag.loc["baseline", "truth_state"]
    if base == "oversubscribed":
        # a box loaded past its two cores (a load average of 4-7 beside other work): the
        # baseline's gap to ideal is its loop's extra wait for a core, with the numbers that
        # say so: the baseline is shown, not judged, and the verdict never refuted
        extra = diag.loc["baseline", ["extra_runqueue_wait_share", "extra_loop_cpu_share"]].sum()
        assert extra >= 0.5 * diag.loc["baseline", "measured_saving"] > 0
        assert verdict["verdict"] in ("confirmed", "inconclusive"), verdict["reason"]
        assert "(oversubscribed)" in verdict["reason"]
    else:
        assert base == "fires", base
        assert verdict["verdict"] == "confirmed", verdict["reason"]
    # a fix whose gap to ideal is its loop's extra wait for a core (a loaded box) is named
    # oversubscribed, with its numbers, and not judged; it never reads fires
    # a GIL wait is asleep: the loop's extra CPU time is measured beside its extra wait
    assert diag.loc[["baseline", *FIXES], "extra_loop_cpu_share"].notna().all()
    assert diag.loc["ideal", "extra_loop_cpu_share"] == 0.0
    for fix in FIXES:
        state = diag.loc[fix, "truth_state"]
        assert state in ("clear", "either", "oversubscribed"), (fix, state)
        if state == "oversubscribed":
            extra = diag.loc[fix, ["extra_runqueue_wait_share", "extra_loop_cpu_share"]].sum()
            assert extra >= 0.5 * diag.loc[fix, "measured_saving"] > 0
            assert f"{fix} oversubscribed" in verdict["reason"]
