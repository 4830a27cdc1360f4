"""Hierarchical bootstrap: the interval carries the spread between processes."""

from __future__ import annotations

import numpy as np
import pytest

from harness.core import stats
from harness.core.stats import as_groups, probe_effect_ci, speedup_ci, summarize


def _proc(mean: float, n: int = 100, sd: float = 0.5, seed: int = 0) -> list[float]:
    return list(np.random.default_rng(seed).normal(mean, sd, n))


def test_processes_with_different_means_widen_the_interval():
    base = [_proc(40.0, seed=1), _proc(46.0, seed=2)]  # two processes, 15% apart
    fix = [_proc(20.0, seed=3), _proc(20.0, seed=4)]
    _, lo_h, hi_h = speedup_ci(base, fix)
    _, lo_p, hi_p = speedup_ci(base[0] + base[1], fix[0] + fix[1])  # pooled: steps only
    assert hi_h - lo_h > 3 * (hi_p - lo_p)
    # the hierarchical interval reaches both processes' own ratios
    assert lo_h <= np.mean(base[0]) / np.mean(fix[0]) * 1.01
    assert hi_h >= np.mean(base[1]) / np.mean(fix[1]) * 0.99


def test_identical_processes_give_about_the_pooled_interval():
    base = [_proc(40.0, seed=1), _proc(40.0, seed=2)]
    fix = [_proc(20.0, seed=3), _proc(20.0, seed=4)]
    p_h, lo_h, hi_h = speedup_ci(base, fix)
    p_p, lo_p, hi_p = speedup_ci(base[0] + base[1], fix[0] + fix[1])
    assert p_h == pytest.approx(p_p)
    assert hi_h - lo_h == pytest.approx(hi_p - lo_p, rel=0.5)
    assert lo_h < p_h < hi_h


def test_ratio_direction_and_determinism():
    base, fix = [_proc(40.0, seed=1), _proc(41.0, seed=2)], [_proc(20.0, seed=3)]
    point, lo, hi = speedup_ci(base, fix, seed=7)
    assert 1.9 < lo < point < hi < 2.2  # faster variant: speedup above 1
    assert speedup_ci(base, fix, seed=7) == (point, lo, hi)
    slow, _, hi_s = speedup_ci(fix, base)
    assert slow == pytest.approx(1 / point) and hi_s < 1


def test_probe_effect_over_timed_processes():
    profiled = _proc(44.0, seed=5)
    timed = [_proc(40.0, seed=1), _proc(40.4, seed=2)]
    point, lo, hi = probe_effect_ci(profiled, timed)
    assert lo < point < hi
    assert point == pytest.approx(np.mean(profiled) / np.mean(timed[0] + timed[1]))
    assert lo > 1.05  # nsys slowed it by ~10%, well outside the noise


def test_groups_and_errors():
    assert len(as_groups([1.0, 2.0])) == 1
    assert [g.size for g in as_groups([[1.0], [2.0, 3.0], []])] == [1, 2]
    with pytest.raises(ValueError, match="both sides"):
        speedup_ci([], [1.0])
    assert summarize([1.0, 3.0])["step_ms_mean"] == 2.0


def test_paired_rounds_cancel_drift_that_pooled_processes_do_not():
    # the host drifts between rounds (30, 40, 35 ms) and both variants move alike: the paired
    # ratio is 3 in every round, so its interval is tight; the unpaired one spans the drift
    rng = np.random.default_rng(1)
    base = {r: list(m + rng.normal(0, 0.3, 40)) for r, m in ((1, 30.0), (2, 40.0), (3, 35.0))}
    fix = {r: list(np.asarray(s) / 3.0) for r, s in base.items()}
    point, lo, hi = stats.paired_ratio_ci(base, fix)
    assert point == pytest.approx(3.0, rel=1e-9)
    assert lo <= point <= hi and hi - lo < 0.05  # step noise only
    _, ulo, uhi = stats.ratio_ci(list(base.values()), list(fix.values()))
    assert uhi - ulo > 0.5


def test_paired_ratio_uses_only_rounds_both_sides_ran():
    num = {1: [10.0, 10.0], 2: [20.0, 20.0], 3: [30.0]}
    den = {1: [5.0, 5.0], 3: [10.0], 4: [1.0]}
    assert stats.paired_rounds(num, den) == [1, 3]
    assert stats.round_ratios(num, den) == {1: 2.0, 3: 3.0}
    point, lo, hi = stats.paired_ratio_ci(num, den)
    assert point == pytest.approx(6.0**0.5)  # the geometric mean of 2 and 3
    assert 2.0 - 1e-9 <= lo <= point <= hi <= 3.0 + 1e-9  # within the rounds' own ratios
    with pytest.raises(ValueError, match="at least one round"):
        stats.paired_ratio_ci({1: [1.0]}, {2: [1.0]})


def test_round_spread_flags_rounds_apart_by_more_than_ten_percent():
    assert stats.round_spread({1: [10.0, 10.0]}) == 0.0
    assert stats.round_spread({1: [10.0], 2: [10.5]}) == pytest.approx(0.05)
    assert stats.round_spread({1: [10.0], 2: [12.0], 3: [11.0]}) > stats.UNSTABLE_SPREAD
