"""The measured window's length: the size's steps, or fewer for slow steps, never too few."""

from __future__ import annotations

import json
import shutil

import pytest

from harness.core.config import HarnessConfig
from harness.execution.hostprobe import SLICE_PROBE_KEYS
from harness.execution.worker import MIN_WARMUP_STEPS, warmup_done, window_steps
from tests.conftest import FAULTY_ENV, faulty_args, only_run_dir, smoke_args


@pytest.mark.parametrize(
    ("steps", "step_s", "budget", "min_steps", "expected"),
    [
        (32, 0.02, 10.0, 5, 32),  # fits: unchanged
        (32, 1.35, 10.0, 5, 7),  # sync_loading's baseline on the H100: 7 steps of 1.35 s
        (32, 5.0, 10.0, 5, 5),  # very slow: the floor
        (3, 5.0, 10.0, 5, 3),  # never more than the size asks for
        (32, 1.35, None, 5, 32),  # budget off
        (32, 0.0, 10.0, 5, 32),  # no estimate
    ],
)
def test_window_steps(steps, step_s, budget, min_steps, expected):
    assert window_steps(steps, step_s, budget, min_steps) == expected


def test_window_budget_is_validated():
    with pytest.raises(ValueError, match="max_window_s"):
        HarnessConfig(max_window_s=0)
    with pytest.raises(ValueError, match="min_steps"):
        HarnessConfig(min_steps=0)
    with pytest.raises(ValueError, match="export_workers"):
        HarnessConfig(export_workers=0)
    with pytest.raises(ValueError, match="max_warmup_s"):
        HarnessConfig(max_warmup_s=0)
    with pytest.raises(ValueError, match="profile_max_window_s"):
        HarnessConfig(profile_max_window_s=-1)


@pytest.mark.parametrize(
    ("budget", "done", "elapsed", "expected"),
    [
        (5.0, 3, 9.0, False),  # past the budget, but fewer than MIN_WARMUP_STEPS
        (5.0, MIN_WARMUP_STEPS, 5.5, True),  # past the budget with enough steps
        (5.0, 9, 4.0, False),  # within the budget
        (None, 50, 100.0, False),  # budget off: every planned step
    ],
)
def test_warmup_done(budget, done, elapsed, expected):
    assert warmup_done(budget, done, elapsed) is expected


def test_window_budget_per_phase():
    cfg = HarnessConfig(max_window_s=10.0, profile_max_window_s=3.0)
    assert cfg.window_budget_s("timing-1") == 10.0
    assert cfg.window_budget_s("profile") == 3.0
    assert HarnessConfig(profile_max_window_s=None).window_budget_s("profile") == 10.0


SLOW = {**FAULTY_ENV, "FAULTY_SLOW_S": "0.25"}
#: No report: these tests read none (tests/test_report.py reads a run's report).
SLOW_SIZE = ("scenario.faulty.smoke.warmup_steps=12", "scenario.faulty.smoke.steps=40",
             "harness.report=false")  # fmt: skip
#: The window tests' size: the fewest warm-up steps (their 0.25 s each are wall time).
SHORT_WARMUP = (*SLOW_SIZE, f"scenario.faulty.smoke.warmup_steps={MIN_WARMUP_STEPS}")


def _slow_result(cli, results, window_s: float, warmup_s: str) -> dict:
    """The 'slow' variant's timing result.json for these window and warm-up budgets."""
    # harness.timing.window_s=null: a sliced round's window takes harness.max_window_s, the
    # budget under test (its own 1 s default would cut it)
    args = faulty_args(
        results, "scenario.faulty.variants=[slow]", *SLOW_SIZE, f"harness.max_window_s={window_s}",
        "harness.timing.window_s=null",
    )  # fmt: skip
    proc = cli([*args, f"harness.max_warmup_s={warmup_s}"], env=SLOW)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads((only_run_dir(results) / "faulty/slow/timing-1/result.json").read_text())


def test_a_slow_warmup_ends_at_its_budget(cli, tmp_path):
    res = _slow_result(cli, tmp_path / "r", 2, "1.0")
    # 0.25 s steps: past 1 s after the 5th step (the 4th ends at ~1.0 s), not all 12
    assert MIN_WARMUP_STEPS <= res["warmup_steps"] <= 6, res["warmup_steps"]
    assert 6 <= res["steps"] <= 8  # the window budget: 2 s of steps a little over 0.25 s
    assert _slow_result(cli, tmp_path / "off", 1, "null")["warmup_steps"] == 12


@pytest.mark.skipif(shutil.which("nsys") is None, reason="nsys not installed")
def test_the_profiled_window_has_its_own_budget(cli, tmp_path):
    results = tmp_path / "r"
    args = [
        *smoke_args("faulty", results, "scenario.faulty.variants=[slow]", *SHORT_WARMUP),
        "nsys.enabled=true",
        "harness.max_window_s=3",
        "harness.timing.window_s=null",  # the sliced timing window takes max_window_s
        "harness.profile_max_window_s=1",
    ]
    proc = cli(args, env=SLOW)
    assert proc.returncode == 0, proc.stderr[-2000:]
    run = only_run_dir(results) / "faulty/slow"
    timing = json.loads((run / "timing-1/result.json").read_text())
    profile = json.loads((run / "profile/result.json").read_text())
    assert 10 <= timing["steps"] <= 12  # 3 s of steps a little over 0.25 s
    assert profile["steps"] == 5  # 1 s / 0.25 s = 4, raised to min_steps


def test_a_sliced_window_has_its_own_budget(cli, tmp_path):
    """harness.timing.window_s (1 s by default) is a sliced round's window budget, at most
    harness.max_window_s: 0.25 s steps measure 4 (1 s), and never fewer than
    harness.timing.min_steps; harness.timing.slice_probes records the host's speed around
    every slice."""
    res = _slow_result_sliced(cli, tmp_path / "r", "harness.max_window_s=10")
    assert res["steps"] == 4 and sum(res["slices"]["steps"]) == 4
    assert "probes" not in res["slices"]  # harness.timing.slice_probes is off by default
    res = _slow_result_sliced(cli, tmp_path / "m", "harness.max_window_s=10",
                              "harness.timing.min_steps=6",
                              "harness.timing.slice_probes=true")  # fmt: skip
    assert res["steps"] == 6
    # one probe before and one after each slice, each key a time (the helper core's loop only
    # where threads are pinned: harness.timing.pin)
    probes = res["slices"]["probes"]
    assert len(probes) == len(res["slices"]["steps"])
    for p in probes:
        for when in ("before", "after"):
            assert {"python_ms", "copy_ms", "launch_us"} <= set(p[when]) <= set(SLICE_PROBE_KEYS)
            assert all(v > 0 for v in p[when].values())


def _slow_result_sliced(cli, results, *extra: str) -> dict:
    args = faulty_args(results, "scenario.faulty.variants=[slow]", *SHORT_WARMUP, *extra)
    proc = cli(args, env=SLOW)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads((only_run_dir(results) / "faulty/slow/timing-1/result.json").read_text())


def test_a_back_to_back_window_is_whole_periods():
    from types import SimpleNamespace

    from harness.execution.worker import whole_periods

    assert whole_periods(37, SimpleNamespace(period_steps=10)) == 30
    assert whole_periods(7, SimpleNamespace(period_steps=10)) == 10  # at least one period
    assert whole_periods(37, SimpleNamespace()) == 37  # a workload without periodic work
