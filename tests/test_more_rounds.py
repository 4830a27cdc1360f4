"""Rounds where the noise is (harness.execution.rounds), through the CLI: after a scenario's
planned rounds, one more round while a pair's interval is wider than the target, up to
``max_rounds``, and none once the suite's budget would be passed. The target and the budget are
set out of reach (a half-width of 0.01%, a budget of 1 s), so what is decided does not depend on
how fast or loaded the box is; rounds.json says each decision and what it read."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.conftest import only_run_dir, smoke_args

#: These tests read no report (tests/test_smoke_all.py's run writes forced_sync's).
NO_REPORT = ("harness.report=false",)


def _run(cli, results, *extra: str, scenario: str = "forced_sync"):
    args = smoke_args(scenario, results, "harness.repeats=2", "harness.timing.max_rounds=4",
                      *NO_REPORT, *extra)  # fmt: skip
    proc = cli(args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = only_run_dir(results)
    return proc, run, json.loads((run / "rounds.json").read_text())


def test_rounds_are_added_while_an_interval_is_wide_up_to_max_rounds(cli, tmp_path):
    proc, run, record = _run(cli, tmp_path / "r", "harness.timing.target_half_width=0.0001")
    whys = [(d["after_round"], d["why"]) for d in record["decisions"]]
    assert whys == [(2, "added"), (3, "added"), (4, "max_rounds")]
    assert record["max_rounds"] == 4
    first = record["decisions"][0]
    assert all(w > 0.0001 for w in first["widths"].values())
    assert first["projected_s"] > 0
    runs = pd.read_csv(run / "runs.csv").set_index("variant")
    assert (runs["repeats"] == 4).all() and (
        runs.loc[["sync_free", "ideal"], "paired_rounds"] == 4
    ).all()
    assert (runs.loc[["baseline", "sync_free"], "share_of_ideal_rounds"] == 4).all()
    assert "one more timing round of" in proc.stderr
    timings = pd.read_csv(run / "timings.csv")
    assert sorted(timings["phase"].unique()) == [f"timing-{r}" for r in (1, 2, 3, 4)]


def test_a_scenario_timed_back_to_back_gets_rounds_too(cli, tmp_path):
    """gil_contention declines slicing (its rounds back to back): its rounds are added as a
    sliced scenario's are."""
    _, run, record = _run(cli, tmp_path / "r", "harness.timing.target_half_width=0.0001",
                          "harness.timing.max_rounds=3", scenario="gil_contention")  # fmt: skip
    whys = [(d["scenario"], d["after_round"], d["why"]) for d in record["decisions"]]
    assert whys == [("gil_contention", 2, "added"), ("gil_contention", 3, "max_rounds")]
    assert (pd.read_csv(run / "runs.csv")["repeats"] == 3).all()


def test_no_round_is_added_past_the_budget(cli, tmp_path):
    _, run, record = _run(cli, tmp_path / "r", "harness.timing.target_half_width=0.0001",
                          "harness.timing.budget_s=1")  # fmt: skip
    (decision,) = record["decisions"]
    assert decision["why"] == "budget" and decision["added"] == []
    assert decision["projected_s"] > 1
    runs = pd.read_csv(run / "runs.csv")
    assert (runs["repeats"] == 2).all()


@pytest.mark.parametrize("device_default", [None])
def test_the_cpu_adds_no_rounds_by_default(cli, tmp_path, device_default):
    proc = cli(smoke_args("forced_sync", tmp_path / "r", "harness.repeats=2", *NO_REPORT))
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = only_run_dir(tmp_path / "r")
    assert not (run / "rounds.json").exists()  # max_rounds: harness.repeats on the CPU
    assert (pd.read_csv(run / "runs.csv")["repeats"] == 2).all()


# -- the budget check replayed on a real H200 run (tests/data/rounds_runs.tar.xz) ---------------


@pytest.fixture(scope="module")
def replays(tmp_path_factory) -> dict[str, pd.DataFrame]:
    """Each decision of an H200 ``+scenario=all`` run (harness.repeats=2, budget_s=480),
    replayed by scripts/replay_budget.py from its trimmed folder (timings, runs, rounds.json,
    wall_time.json, each unit's warm-up and window steps)."""
    import tarfile
    from pathlib import Path

    from scripts.replay_budget import replay

    root = tmp_path_factory.mktemp("rounds")
    with tarfile.open(Path(__file__).parent / "data" / "rounds_runs.tar.xz") as tar:
        tar.extractall(root, filter="data")
    return {name: replay(root / name) for name in ("run1",)}


@pytest.mark.parametrize("name", ["run1"])
def test_the_projection_never_under_predicts_what_the_run_had_left(replays, name):
    table = replays[name]
    assert len(table) >= 8 and (table["remained_s"] > 100).all()
    # the projection of the queued units against what the run's workers took after each
    # decision, less the added rounds (its tail, 118 s, ran the kernels row after the
    # diagnosis and is no model of today's, which runs them side by side: tests/test_wallplan)
    cols = ["scenario", "round", "workers/remained"]
    assert (table["workers/remained"] >= 0.9).all(), table[cols]
    # the old one under-predicted late in the run (the tail of the profiles already run) and
    # over-predicted early (every unmeasured unit at 5 s / 6.5 s)
    assert table["old/remained"].min() < 0.8 and table["old/remained"].iloc[0] > 1.25
    assert table["new/remained"].iloc[0] < table["old/remained"].iloc[0]


@pytest.mark.parametrize("name", ["run1"])
def test_the_replayed_old_check_is_the_one_the_run_recorded(replays, name):
    # late in the run nothing the machine skips is queued any more: the replay then rebuilds
    # the run's own number (its queue, its clock)
    late = replays[name][replays[name]["elapsed_s"] > 300]
    assert len(late) >= 3
    assert ((late["old_s"] - late["recorded_s"]).abs() < 0.02 * late["recorded_s"]).all()


def test_the_fair_share_refuses_early_rounds_the_later_scenarios_need(replays):
    table = replays["run1"]
    first = table.iloc[0]
    # at the first decision nine scenarios' planned rounds are still queued (one round of
    # each kept for them), at kernel_flood's first only unfused_chain's, at the last none
    share = table["checked_s"] - table["new_s"]
    kernel_flood = table.index[table["scenario"] == "kernel_flood"][0]
    assert share.iloc[0] > 5 * share[kernel_flood] > 0 and share.iloc[-1] == 0
    assert not first["new_fits"]


# -- a scenario refused for the budget is asked again once a later one leaves room ---------------


def _more(tmp_path, fits, widths):
    from harness.execution.rounds import MoreRounds
    from scenarios import discover

    found = discover()
    return MoreRounds(
        run_dir=tmp_path, found=found, variants=lambda s: [v.name for v in found[s].variants],
        target=0.05, planned=2, max_rounds=4, fits=fits,
        measure=lambda _run, scen, _names: widths[scen.name],
    )  # fmt: skip


def test_a_refused_scenario_gets_the_round_a_later_one_does_not_need(tmp_path):
    budget = {"forced_sync": [False, True]}  # refused while others are queued, then room

    def fits(scenario, variants, queue, extra):
        return budget[scenario].pop(0), 100.0

    widths = {"forced_sync": {"baseline/sync_free": 0.3, "baseline/ideal": 0.02,
                              "ideal/sync_free": 0.01},
              "fp32_matmul": {"baseline/tf32": 0.01}}  # fmt: skip
    more = _more(tmp_path, fits, widths)
    assert more.after("forced_sync", "timing-2", []) == []
    assert [d.why for d in more.decisions] == ["budget"]
    units = more.after("fp32_matmul", "timing-2", [])  # narrow: its room goes back
    assert {(u.scenario, u.phase) for u in units} == {("forced_sync", "timing-3")}
    assert sorted(u.variant for u in units) == ["baseline", "sync_free"]  # the wide pair only
    assert [(d.scenario, d.why) for d in more.decisions] == [
        ("forced_sync", "budget"),
        ("fp32_matmul", "narrow"),
        ("forced_sync", "revisited"),
    ]
    record = json.loads((tmp_path / "rounds.json").read_text())
    assert record["decisions"][-1]["added"] == [u.variant for u in units]


def test_a_refused_scenario_is_not_asked_again_while_it_still_does_not_fit(tmp_path):
    asked: list[str] = []

    def fits(scenario, variants, queue, extra):
        asked.append(scenario)
        return False, 900.0

    widths = {"forced_sync": {"baseline/sync_free": 0.3}, "fp32_matmul": {"baseline/tf32": 0.2}}
    more = _more(tmp_path, fits, widths)
    assert more.after("forced_sync", "timing-2", []) == []
    assert more.after("fp32_matmul", "timing-2", []) == []
    assert asked == ["forced_sync", "fp32_matmul", "forced_sync"]
    assert [d.why for d in more.decisions] == [
        "budget",
        "budget",
    ]  # a refusal is not recorded twice


def test_a_pair_never_measured_gets_no_round(tmp_path):
    """On the H200 a held GPU made every fp32_matmul variant run out of memory, and the run
    asked for rounds up to max_rounds (widths +-inf%): a pair with no round paired (NaN) is
    not wide, and a scenario with only such pairs is recorded ``unmeasured``."""
    nan = float("nan")
    widths = {"fp32_matmul": {"baseline/tf32": nan, "baseline/ideal": nan},
              "forced_sync": {"baseline/sync_free": nan, "baseline/ideal": 0.3}}  # fmt: skip
    more = _more(tmp_path, lambda *_: (True, 10.0), widths)
    assert more.after("fp32_matmul", "timing-2", []) == []
    units = more.after("forced_sync", "timing-2", [])
    assert sorted(u.variant for u in units) == ["baseline", "ideal"]
    assert [d.why for d in more.decisions] == ["unmeasured", "added"]
    record = json.loads((tmp_path / "rounds.json").read_text())
    assert record["decisions"][0]["widths"] == {"baseline/tf32": None, "baseline/ideal": None}
