"""pipeline_imbalance end to end through the real CLI on the CPU: 2 gloo ranks under torchrun,
smoke size, timed three times per variant and profiled under real nsys.

Issue 24's done-when, and issue 43's: every variant's expectation from its own export, the cut
and the bound each rank reports, a verdict that is confirmed, and balancing measured faster
with an interval above 1. The gain of balancing on 2 CPU ranks is a gain of running both cores
at once, which other work on the box takes back; the smoke size raises the ranks' scheduling
priority (``PipeSize.hold_cores``), and each variant reports how much of its compute its ranks
spent on a core (``compute_cpu_share_min``) and, per rank, how long its loop waited for one
(result.json ``sched``; runs.csv ``loop_runqueue_wait_share``: the rank that waited most).

Measured 2026-11-29 on the shared 2-core box (load ~5-7 from other engineers' jobs), 2 rounds:
beside two busy loops, balanced 1.26x [1.24-1.29] and confirmed (the balanced cut 10% [7-12%]
to its bound, clear; the ranks' loops waited for a core 5-13% of the window); without them
1.32x [1.17-1.45] and confirmed (balanced 9% [5-15%], either). The margin to
``verdict_min_ci_low`` (1.1x) was 0.07 at the low end, and a full suite run (the other test
worker beside it) measured 0.92: the verdict and the interval above 1 are asserted only where
the rounds were steady (test_confirmed).
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest

from tests._rounds import round_means
from tests.conftest import only_run_dir, run_cli
from tests.test_smoke_all import check_every_variant

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("nsys") is None, reason="nsys not installed"),
]

SCENARIO = "pipeline_imbalance"
#: A timed run counts when each rank spent at least this share of its compute on a core
#: (0.82-0.94 measured beside a busy process with the priority raised).
MIN_CPU_SHARE = 0.8
VARIANTS = ["baseline", "balanced", "more_microbatches"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, cache_dir) -> Path:
    results = tmp_path_factory.mktemp("pipeline")
    proc = run_cli(
        [
            "run",
            f"+scenario={SCENARIO}",
            "size=smoke",
            # three rounds: a Student-t interval of two (1 degree of freedom, 12.7 standard
            # errors) reaches above verdict_min_ci_low only where the rounds agree within 1%
            "harness.repeats=3",
            # the set-up's block timings (which only balanced's cut reads, of 8 equal blocks and
            # a head a seventh of one: 4:4 by far) the fastest of 5 passes, as on the GPU, not
            # 10; one warm-up step fewer (2, as tests/test_e2e_smoke.py): 12 two-rank units
            f"scenario.{SCENARIO}.smoke.cost_rounds=5",
            f"scenario.{SCENARIO}.smoke.warmup_steps=2",
            "harness.max_window_s=null",
            "harness.profile_max_window_s=null",
            f"harness.results_dir={results}",
            f"harness.cache_dir={cache_dir}",
            "harness.progress=false",
        ]
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return only_run_dir(results)


def _metrics(run_dir: Path, variant: str) -> list[dict[str, float]]:
    folder = run_dir / SCENARIO / variant
    return [
        json.loads(p.read_text())["metrics"] for p in sorted(folder.glob("timing-*/result.json"))
    ]


def _ranks_had_their_cores(run_dir: Path) -> bool:
    timed = [m for v in ("baseline", "balanced") for m in _metrics(run_dir, v)]
    return all(m["cores_held"] == 1 and m["compute_cpu_share_min"] >= MIN_CPU_SHARE for m in timed)


#: The most each rank's compute per step may vary across the timed rounds (max / min) for the
#: machine to count as steady: a rank can hold its core and still run a third slower where the
#: core itself is shared (a full run measured balanced's rank 0 at 324, 267 and 245 ms in its
#: three rounds with ``compute_cpu_share_min`` 0.91-0.98; the interval's low end read 0.94).
STEADY = 1.05


def _steady(run_dir: Path) -> bool:
    """The ranks held their cores, and each rank's compute per step of baseline and balanced
    agreed across the rounds within :data:`STEADY`: what a speedup's interval needs."""
    if not _ranks_had_their_cores(run_dir):
        return False
    for v in ("baseline", "balanced"):
        for rank in (0, 1):
            ms = [m[f"compute_ms_per_step_rank{rank}"] for m in _metrics(run_dir, v)]
            if max(ms) > STEADY * min(ms):
                return False
    return True


def test_every_variant_as_expected(run_dir: Path) -> None:
    """The truth is each variant's step against its own balanced bound (``balanced_bound_ms``
    of each round), derived here from the result files; the cut 7:1 leaves the baseline and
    more_microbatches far above their bar. The balanced cut's gap to its bound (gloo's hand-offs
    are not in it: 11-22% on the committed CPU export) straddles the bar, so its state is not
    asserted, only that its judgement follows from it."""
    diag = pd.read_csv(run_dir / "diagnosis.csv").set_index("variant")
    assert list(diag.index) == VARIANTS
    assert diag.loc["baseline", "primary"] == "stage_imbalance"
    assert diag.loc["baseline", "stage_imbalance_state"] == "fired"
    assert diag.loc["balanced", "stage_imbalance_state"] == "clear"
    assert diag.loc["more_microbatches", "expected_role"] == "partial"
    assert diag.loc["more_microbatches", "stage_imbalance_state"] == "fired"
    for variant in VARIANTS:
        row = diag.loc[variant]
        assert row["measured_by"] == "own balanced_bound_ms"
        means = round_means(run_dir, SCENARIO, variant)
        bounds = {int(p.parent.name.split("-")[1]): m["balanced_bound_ms"] for p, m in
                  zip(sorted((run_dir / SCENARIO / variant).glob("timing-*/result.json")),
                      _metrics(run_dir, variant), strict=True)}  # fmt: skip
        logs = [math.log(bounds[r] / means[r]) for r in means]
        assert row["measured_saving"] == pytest.approx(1 - math.exp(sum(logs) / len(logs)))
    for variant in ("baseline", "more_microbatches"):
        assert diag.loc[variant, "truth_state"] == "fires"
        assert bool(diag.loc[variant, "match"])
    balanced = diag.loc["balanced"]
    if balanced["truth_state"] == "fires":  # the detector clear against a measured gap
        assert not bool(balanced["match"])
    elif balanced["truth_state"] == "clear":
        assert bool(balanced["match"])


def test_every_variant_runs(run_dir: Path) -> None:
    """What tests/test_smoke_all.py checks of every other scenario, on this module's run."""
    check_every_variant(run_dir, SCENARIO)


def test_confirmed(run_dir: Path) -> None:
    """Never refuted, and every fix's speedup measured with an interval; confirmed, with
    balancing measured faster (an interval above 1), only where the run's own evidence says
    the machine was steady (:func:`_steady`). The gain of balancing is the gain of running
    both cores at once, which other work on the box takes back: full runs beside the other
    test worker measured the interval's low end at 0.92 and 0.94, the ranks on their cores but
    a round a third slower (inconclusive, which is then the right verdict). The balanced cut's
    gap to its bound straddles the bar at most (either: not judged), so a refuted verdict is a
    wrong judgement, loaded box or not."""
    runs = pd.read_csv(run_dir / "runs.csv").set_index("variant")
    assert (runs.loc[VARIANTS, "status"] == "ok").all()
    assert runs.loc[VARIANTS, "profiled"].all()
    verdict = pd.read_csv(run_dir / "verdicts.csv").set_index("scenario").loc[SCENARIO]
    assert verdict["verdict"] in ("confirmed", "inconclusive"), verdict["reason"]
    fixes = runs.loc[["balanced", "more_microbatches"]]
    assert (fixes["speedup"] > 0).all(), fixes
    assert (fixes["speedup_ci_low"] <= fixes["speedup"]).all(), fixes
    if verdict["verdict"] == "inconclusive":  # only ever for want of a fast enough fix
        assert "speedup CI lower bound" in verdict["reason"], verdict["reason"]
    if _steady(run_dir):
        assert verdict["verdict"] == "confirmed", verdict["reason"]
        assert runs.loc["balanced", "speedup_ci_low"] > 1.0, runs.loc["balanced"]
    # each rank's run-queue wait was counted (schedstat), the rank that waited most reported
    assert (runs.loc[VARIANTS, "loop_runqueue_wait_share"].between(0, 1)).all()


def test_the_baseline_reports_its_cut_and_bound(run_dir: Path) -> None:
    cores = _ranks_had_their_cores(run_dir)
    for m in _metrics(run_dir, "baseline"):
        assert (m["blocks_rank0"], m["blocks_rank1"], m["microbatches"]) == (7, 1, 8)
        # the heavy stage's compute is several times the light one's (2.0x-3x measured on a
        # 2-core box at a 6:2 cut, the low end beside another test process; the light stage also
        # carries the head and the loss; a wall-clock ratio, so only asserted
        # where each rank held its core), and the balanced bound lies between the light and
        # the heavy rank's compute per step
        assert m["compute_ms_per_step_rank1"] < m["balanced_bound_ms"]
        if cores:
            assert m["compute_ms_per_step_rank0"] > 1.5 * m["compute_ms_per_step_rank1"]
            assert m["balanced_bound_ms"] < m["compute_ms_per_step_rank0"]
    for m in _metrics(run_dir, "more_microbatches"):
        assert (m["blocks_rank0"], m["blocks_rank1"], m["microbatches"]) == (7, 1, 16)


def test_the_finding_reads_both_ranks_of_the_profile(run_dir: Path) -> None:
    findings = pd.read_csv(run_dir / "findings.csv")
    mine = findings[(findings["class"] == "stage_imbalance") & (findings["variant"] == "baseline")]
    got = dict(zip(mine["metric"], mine["value"], strict=True))
    assert got["ranks"] == 2
    assert got["busy_share_rank0"] > got["busy_share_rank1"]  # rank 0 holds 7 of 8 blocks
    assert got["observed_step_ms"] > got["balanced_step_ms"] > 0
