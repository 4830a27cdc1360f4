"""Timing rounds (issue 41): the variants of a round run back to back in an order that
alternates between rounds (harness.execution.plan.plan_units), and runs.csv's speedups and
shares of ``ideal`` are paired within rounds, with the round spread, ``unstable`` and the host
probes beside them (harness.execution.collect), on a small run folder written by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.core import runfolder as rf
from harness.core.config import compose, discover_scenarios
from harness.core.runfolder import Unit
from harness.core.stats import UNSTABLE_SPREAD, ratio_ci
from harness.execution.collect import build_runs_table, build_timings_table, unstable_marks
from harness.execution.plan import plan_units, round_order

SCEN = "forced_sync"
VARIANTS = ["baseline", "sync_free", "ideal"]


def _suite(*extra: str):
    """The hand-made folders below hold three of forced_sync's variants: the suite runs those."""
    picked = f"scenario.{SCEN}.variants=[{','.join(VARIANTS)}]"
    return compose([f"+scenario={SCEN}", "size=smoke", picked, *extra])[1]


def test_rounds_alternate_their_variant_order():
    suite = _suite("harness.repeats=4", "harness.timing.spread_rounds=false")
    units = plan_units(suite, [SCEN], {SCEN: VARIANTS}, profiled=True)
    timing = [u for u in units if rf.is_timing(u.phase)]
    for r in range(1, 5):
        ran = [u.variant for u in timing if u.phase == rf.timing_phase(r)]
        assert ran == (VARIANTS if r % 2 else VARIANTS[::-1]), r
    # each round's variants back to back, rounds in order, profiles last in variant order
    assert [rf.timing_round(u.phase) for u in timing] == [1] * 3 + [2] * 3 + [3] * 3 + [4] * 3
    assert [u.variant for u in units[len(timing) :]] == VARIANTS
    assert all(u.phase == rf.PROFILE for u in units[len(timing) :])
    assert round_order(["a"], 2) == ["a"]
    assert rf.timing_round("profile") is None and rf.timing_round("timing-12") == 12


def test_planned_rounds_are_spread_over_the_scenarios_by_default():
    """Round-major: round 1 of every scenario, then round 2...; compiling scenarios (``last``)
    after the others' profiles, their own rounds spread the same way."""
    names = ["forced_sync", "gil_contention", "kernel_flood"]
    suite = compose(["+scenario=[forced_sync,gil_contention,kernel_flood]", "harness.repeats=2"])[1]
    assert suite.harness.timing.spread_rounds
    variants = {n: ["a", "b"] for n in names}
    units = plan_units(suite, names, variants, profiled=True, last=frozenset({"kernel_flood"}))
    got = [(u.scenario[0], u.variant, rf.timing_round(u.phase)) for u in units]
    first = [
        (s, v, r) for r in (1, 2) for s in "fg" for v in (["a", "b"] if r == 1 else ["b", "a"])
    ]
    profiles = [(s, v, None) for s in "fg" for v in "ab"]
    last = [("k", "a", 1), ("k", "b", 1), ("k", "b", 2), ("k", "a", 2), ("k", "a", None),
            ("k", "b", None)]  # fmt: skip
    assert got == first + profiles + last


def test_three_rounds_by_default():
    from harness.core.config import HarnessConfig

    assert HarnessConfig().repeats == 3
    assert HarnessConfig().unstable_spread == UNSTABLE_SPREAD
    with pytest.raises(ValueError, match=r"harness\.host_probe\.launches must be >= 1"):
        _suite("harness.host_probe.launches=0")
    with pytest.raises(ValueError, match=r"harness\.diagnose_jobs must be >= 1"):
        _suite("harness.diagnose_jobs=0")


# -- runs.csv on a hand-made run folder ------------------------------------------------------

#: Each round's mean step ms: the host ran slow in round 1 and fast in round 2, which moves the
#: host-bound baseline and fix alike (their ratio is about 2 in every round); ``ideal``, bound
#: by the device, hardly moves.
MEANS = {
    "baseline": {1: 30.0, 2: 20.0, 3: 25.0},
    "sync_free": {1: 15.0, 2: 10.2, 3: 12.4},
    "ideal": {1: 9.0, 2: 9.4, 3: 9.1},
}
#: Host probes (launch us, python ms) before and after each round's window.
PROBES = {1: ((12.0, 70.0), (11.0, 66.0)), 2: ((7.0, 44.0), (7.4, 46.0)), 3: ((9.0, 55.0), (9.2, 57.0))}  # fmt: skip
PROFILE_PROBE = ((14.0, 80.0), (13.0, 76.0))


def _steps(mean: float, seed: int, n: int = 20) -> list[float]:
    return list(np.random.default_rng(seed).normal(mean, mean * 0.01, n))


def _probe(pair: tuple[tuple[float, float], tuple[float, float]]) -> dict:
    return {
        when: {"launch_us": v[0], "python_ms": v[1]}
        for when, v in zip(("before", "after"), pair, strict=True)
    }


def _write_unit(run: Path, variant: str, phase: str, steps: list[float], probe: dict) -> None:
    out = Unit(SCEN, variant, phase).dir(run)
    out.mkdir(parents=True)
    rf.write_json(out / rf.STATUS, {"status": "ok", "wall_s": 1.0, "launched_at": 0.0})
    result = {
        "scenario": SCEN, "variant": variant, "phase": phase, "size": "smoke", "device": "cpu",
        "step_ms": steps, "window_s": sum(steps) / 1e3, "samples_per_step": 4, "setup_s": 0.1,
        "timing": {"probe_s": 0.05}, "host_probe": probe,
    }  # fmt: skip
    rf.write_json(out / rf.RESULT, result)


@pytest.fixture
def run_folder(tmp_path: Path) -> tuple[Path, dict[str, dict[int, list[float]]]]:
    """Three rounds of every variant and a profile of the baseline; the baseline's round 3
    failed (no result), so its ratios pair rounds 1 and 2 only."""
    steps: dict[str, dict[int, list[float]]] = {}
    for i, (variant, means) in enumerate(MEANS.items()):
        for r, mean in means.items():
            if variant == "baseline" and r == 3:
                continue
            s = _steps(mean, seed=10 * i + r)
            steps.setdefault(variant, {})[r] = s
            _write_unit(tmp_path, variant, rf.timing_phase(r), s, _probe(PROBES[r]))
    _write_unit(tmp_path, "baseline", rf.PROFILE, _steps(33.0, 99), _probe(PROFILE_PROBE))
    return tmp_path, steps


def _table(run: Path) -> pd.DataFrame:
    suite = _suite()
    found = discover_scenarios()
    return build_runs_table(run, found, suite, [SCEN], bootstrap=500).set_index("variant")


def test_speedups_are_paired_within_rounds(run_folder):
    run, steps = run_folder
    table = _table(run)
    base = steps["baseline"]
    for variant in ("sync_free", "ideal"):
        mine = steps[variant]
        paired = variant == "sync_free"  # the host's drift moved both sides alike
        per_round = [np.mean(base[r]) / np.mean(mine[r]) for r in (1, 2)]  # round 3: no baseline
        row = table.loc[variant]
        assert row["speedup"] == pytest.approx(np.exp(np.mean(np.log(per_round))))
        assert row["paired_rounds"] == 2
        assert row["speedup_ci_low"] <= row["speedup"] <= row["speedup_ci_high"]
        # pairing cancels a drift both sides share: the unpaired interval over the same
        # processes spans the baseline's 30 ms and 20 ms rounds, the paired one does not (its
        # two rounds' ratios, 2.00 and 1.96, give a Student-t interval of 1 degree of freedom:
        # 12.7 standard errors); against ideal, which did not drift, the rounds' ratios differ
        # (3.3 and 2.1), and the paired interval is the wider
        _, lo, hi = ratio_ci([base[1], base[2]], [mine[1], mine[2]], resamples=500)
        width = row["speedup_ci_high"] - row["speedup_ci_low"]
        assert bool(width < (hi - lo) / 2) is paired, (width, hi - lo)
        logs = np.log(per_round)
        half = 12.7062 * np.std(logs, ddof=1) / np.sqrt(2)
        assert np.log(row["speedup_ci_high"] / row["speedup"]) == pytest.approx(half, rel=1e-3)
    assert table.loc["baseline", "speedup"] == pytest.approx(1.0)
    ideal, fix = steps["ideal"], steps["sync_free"]
    shares = [np.mean(ideal[r]) / np.mean(fix[r]) for r in (1, 2, 3)]
    row = table.loc["sync_free"]
    assert row["share_of_ideal"] == pytest.approx(np.exp(np.mean(np.log(shares))))
    assert row["share_of_ideal_ci_low"] <= row["share_of_ideal"] <= row["share_of_ideal_ci_high"]
    assert table.loc["ideal", "share_of_ideal"] == pytest.approx(1.0)


def test_round_spread_unstable_and_probes(run_folder):
    run, steps = run_folder
    table = _table(run)
    means = {v: [np.mean(s) for s in rounds.values()] for v, rounds in steps.items()}
    for variant, m in means.items():
        spread = max(m) / min(m) - 1
        assert table.loc[variant, "round_spread"] == pytest.approx(spread)
        assert bool(table.loc[variant, "unstable"]) == bool(spread > UNSTABLE_SPREAD)
    assert table.loc["baseline", "unstable"] and not table.loc["ideal", "unstable"]
    marks = unstable_marks(table.reset_index())
    spread = table["round_spread"]
    assert marks == [f"{spread['baseline']:.0%}", f"{spread['sync_free']:.0%}", ""]
    # the median over the rounds a variant ran of each round's mean of before and after
    launch = {r: np.mean([b[0], a[0]]) for r, (b, a) in PROBES.items()}
    python = {r: np.mean([b[1], a[1]]) for r, (b, a) in PROBES.items()}
    base = table.loc["baseline"]
    assert base["probe_launch_us"] == pytest.approx(np.median([launch[1], launch[2]]))
    assert table.loc["ideal", "probe_python_ms"] == pytest.approx(np.median(list(python.values())))
    assert base["profile_probe_launch_us"] == pytest.approx(13.5)
    assert base["profile_probe_python_ms"] == pytest.approx(78.0)
    assert pd.isna(table.loc["ideal", "profile_probe_launch_us"])  # not profiled
    # the step in launch-probe units: each round's mean step over that round's own probe, the
    # median over rounds (a round on a slow host has a slow probe too)
    per_round = [np.mean(steps["baseline"][r]) * 1e3 / launch[r] for r in (1, 2)]
    assert base["step_launches"] == pytest.approx(np.median(per_round))


def test_a_stricter_bar_flags_more_and_one_round_flags_none(run_folder):
    run, _ = run_folder
    suite = _suite("harness.unstable_spread=0.01")
    table = build_runs_table(run, discover_scenarios(), suite, [SCEN], bootstrap=200)
    assert table.set_index("variant")["unstable"].all()
    for variant in MEANS:  # keep round 1 only
        for r in (2, 3):
            folder = Unit(SCEN, variant, rf.timing_phase(r)).dir(run)
            for f in folder.glob("*"):
                f.unlink()
    table = build_runs_table(run, discover_scenarios(), suite, [SCEN], bootstrap=200)
    assert table["round_spread"].isna().all() and not table["unstable"].any()
    assert (table["paired_rounds"] == 1).all()


def test_timings_table_has_each_workers_probes(run_folder):
    run, _ = run_folder
    units = [Unit(SCEN, v, p) for v in MEANS for p in rf.phases(3, True)]
    table = build_timings_table(run, units).set_index(["variant", "phase"])
    row = table.loc[("sync_free", "timing-2")]
    (lb, pb), (la, pa) = PROBES[2]
    assert (row["probe_launch_us_before"], row["probe_launch_us_after"]) == (lb, la)
    assert (row["probe_python_ms_before"], row["probe_python_ms_after"]) == (pb, pa)
    assert row["probe_s"] == 0.05  # the probes' own time, a part of the worker's wall time
    prof = table.loc[("baseline", "profile")]
    assert prof["probe_launch_us_before"] == PROFILE_PROBE[0][0]
