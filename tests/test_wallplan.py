"""The wall-time estimator (harness.execution.wallplan) on two real H200 runs of main@1ee4050
(``tests/data/wallplan_runs.tar.xz``: their timings.csv, runs.csv, wall_time.json, manifest and
each unit's warm-up and window steps). Its constants were read off run 1; run 2 (the same plan,
minutes later) checks them."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from harness.core.config import discover_scenarios
from harness.execution import wallplan

DATA = Path(__file__).parent / "data" / "wallplan_runs.tar.xz"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, wallplan.Costs]:
    root = tmp_path_factory.mktemp("wallplan")
    with tarfile.open(DATA) as tar:
        tar.extractall(root, filter="data")
    found = discover_scenarios()
    return {name: wallplan.learn(root / name, found) for name in ("run1", "run2")}


@pytest.mark.parametrize("name", ["run1", "run2"])
def test_the_runs_own_plan_is_predicted_within_ten_percent(runs, name):
    costs = runs[name]
    assert not costs.knobs.slices  # made before sliced rounds: back to back
    assert costs.knobs.repeats == 3 and costs.knobs.max_window_s == 10.0
    predicted = wallplan.total_s(costs)
    assert costs.measured_s is not None
    assert abs(predicted / costs.measured_s - 1) < 0.10, (predicted, costs.measured_s)


def test_each_scenarios_timing_part_is_its_rounds_set_ups_and_spans(runs):
    costs = runs["run1"]
    est = wallplan.estimate(costs).set_index("scenario")
    # the parts the run measured (first launch to last window end of its timing units):
    # forced_sync 53 s, sync_loading 127 s
    assert est.loc["forced_sync", "timing_s"] == pytest.approx(53.3, rel=0.15)
    assert est.loc["sync_loading", "timing_s"] == pytest.approx(127.2, rel=0.15)
    sync = {v.variant: v for v in costs.variants["sync_loading"]}
    assert sync["baseline"].step_s == pytest.approx(1.137, rel=0.01)
    assert sync["baseline"].steps == 32 and sync["baseline"].setup_alone


def test_shorter_sliced_windows_and_fewer_rounds_cost_less(runs):
    costs = runs["run1"]
    k = costs.knobs
    base = wallplan.total_s(costs)
    sliced = wallplan.replace(k, slices=True, window_s=1.0)
    two = wallplan.replace(sliced, repeats=2)
    # forced_sync's rounds are sliced (gil_contention and sync_loading decline slicing)
    more = wallplan.replace(two, extra_rounds={"forced_sync": 3})
    assert wallplan.total_s(costs, two) < wallplan.total_s(costs, sliced) < base
    added = wallplan.total_s(costs, more) - wallplan.total_s(costs, two)
    one_round = wallplan._round_s(costs.variants["forced_sync"], two, True)
    assert added == pytest.approx(3 * one_round)


def test_the_budget_check_counts_what_is_still_queued(runs):
    from harness.core.runfolder import Unit

    costs = runs["run1"]
    k = wallplan.replace(costs.knobs, slices=True, window_s=1.0, profile=False)
    variants = [v.variant for v in costs.variants["gil_contention"]]
    ok, alone = wallplan.fits(costs, k, 100.0, 400.0, "gil_contention", variants, [])
    queue = [Unit("sync_loading", v.variant, "timing-1") for v in costs.variants["sync_loading"]]
    queue += [Unit("nobody", "x", "timing-1")] * 3  # a scenario not measured yet
    p = wallplan.project(costs, k, 100.0, "gil_contention", variants, queue)
    # sync_loading declines slicing (Scenario.slice_rounds): its round is priced back to back
    sync = costs.variants["sync_loading"]
    assert not any(v.sliced for v in sync)
    round_s = wallplan._round_s(sync, k, False) + wallplan._backtoback_setups(sync, k, 1)
    unit, _ = wallplan.unit_prices(costs, k)
    assert p.rest_s == pytest.approx(round_s + 3 * unit)
    # the fair share: one more round of each scenario whose planned rounds are queued
    assert p.reserve_s == pytest.approx(round_s + unit)
    _, more = wallplan.fits(costs, k, 100.0, 400.0, "gil_contention", variants, queue)
    assert ok and more == pytest.approx(alone + p.rest_s + p.reserve_s)
    assert not wallplan.fits(costs, k, 100.0, alone - 1.0, "gil_contention", variants, [])[0]


def test_an_unmeasured_unit_is_priced_from_the_runs_own_means(runs):
    costs = runs["run1"]
    k = wallplan.replace(costs.knobs, slices=True, window_s=1.0)
    none = wallplan.Costs(variants={}, knobs=k)
    assert wallplan.unit_prices(none, k) == (wallplan.UNKNOWN_TIMING_UNIT_S,
                                             wallplan.UNKNOWN_PROFILE_UNIT_S)  # fmt: skip
    timing, profile = wallplan.unit_prices(costs, k)
    units = sum(len(vs) for vs in costs.variants.values())
    per_round = [wallplan._one_round(vs, k) / len(vs) for vs in costs.variants.values()]
    # a weighted mean of the scenarios' per-unit costs, with its safety factor
    assert min(per_round) < timing / wallplan.UNKNOWN_SAFETY < max(per_round)
    assert timing == pytest.approx(wallplan.UNKNOWN_SAFETY * sum(
        wallplan._one_round(vs, k) for vs in costs.variants.values()) / units)  # fmt: skip
    assert profile > 0


def test_an_unmeasured_scenario_that_declines_slicing_costs_the_general_window(runs):
    from harness.core.runfolder import Unit

    costs = runs["run1"]
    k = wallplan.replace(costs.knobs, slices=True, window_s=1.0, warmup_s=1.0, profile=False)
    rest = {s: vs for s, vs in costs.variants.items() if s != "sync_loading"}
    costs = wallplan.replace(costs, variants=rest)
    queue = [Unit("sync_loading", "baseline", "timing-1"), Unit("forced_sync", "x", "timing-1")]
    found = discover_scenarios()
    assert not found["sync_loading"].slice_rounds and found["forced_sync"].slice_rounds
    unit, _ = wallplan.unit_prices(costs, k)
    p = wallplan.project(costs, k, 0.0, "gil_contention", [], queue[1:], found=found)
    q = wallplan.project(costs, k, 0.0, "gil_contention", [], queue, found=found)
    more = (k.max_window_s - 1.0) + (k.max_warmup_s - 1.0)
    assert more > 0 and q.rest_s - p.rest_s == pytest.approx(unit + more)


def test_the_tail_counts_every_profile_of_the_run_and_the_kernels_row(runs):
    from harness.core.runfolder import Unit

    costs = runs["run1"]
    assert costs.profiles_done == sum(len(vs) for vs in costs.variants.values())  # all profiled
    n = costs.profiles_done + 1
    queue = [Unit("gil_contention", "baseline", "profile")]
    one = wallplan.project(costs, wallplan.replace(costs.knobs, diagnose_jobs=1), 0.0,
                           "gil_contention", [], queue)  # fmt: skip
    cpu = wallplan.DIAGNOSIS_FIXED_S + wallplan.TAIL_TOOLS_S
    per = wallplan.DIAGNOSIS_SERIAL_PER_PROFILE_S + wallplan.DIAGNOSIS_PER_PROFILE_S
    assert one.tail_s == pytest.approx(wallplan.TAIL_FIXED_S + cpu + per * n)
    # the diagnosis's reads are split over harness.diagnose_jobs processes
    k8 = wallplan.replace(costs.knobs, diagnose_jobs=8)
    eight = wallplan.project(costs, k8, 0.0, "gil_contention", [], queue)
    share = wallplan.DIAGNOSIS_PER_PROFILE_S * (1 - 1 / 8)
    assert one.tail_s - eight.tail_s == pytest.approx(share * n)
    # the kernels row runs beside the diagnosis and the tools: the longer of the two counts
    for budget in (5.0, 40.0):
        row = wallplan.project(costs, wallplan.replace(k8, kernels_s=budget), 0.0,
                               "gil_contention", [], queue)  # fmt: skip
        beside = max(budget, eight.tail_s - wallplan.TAIL_FIXED_S)
        assert row.tail_s == pytest.approx(wallplan.TAIL_FIXED_S + beside)
    assert eight.tail_s - wallplan.TAIL_FIXED_S > 5.0  # so the short row adds nothing


def test_the_fair_share_grows_with_the_rounds_asked_and_skips_added_ones(runs):
    from harness.core.runfolder import Unit

    costs = runs["run1"]
    k = wallplan.replace(costs.knobs, slices=True, window_s=1.0, profile=False)
    gil = [v.variant for v in costs.variants["gil_contention"]]
    planned = [Unit("forced_sync", v.variant, "timing-1") for v in costs.variants["forced_sync"]]
    added = [Unit("kernel_flood", v.variant, "timing-4") for v in costs.variants["kernel_flood"]]
    one = wallplan._one_round(costs.variants["forced_sync"], k)
    for extra in (1, 3):
        p = wallplan.project(costs, k, 0.0, "gil_contention", gil, planned + added, extra)
        # forced_sync's planned rounds are queued: as many added rounds as gil_contention
        # would have; kernel_flood's queued round is an added one: no share kept for it
        assert p.reserve_s == pytest.approx(extra * one)
    mine = [Unit("gil_contention", v, "timing-4") for v in gil]
    assert wallplan.project(costs, k, 0.0, "gil_contention", gil, mine, 2).reserve_s == 0
