"""Hierarchical bootstrap: the interval carries the spread between processes."""

from __future__ import annotations

import numpy as np
import pytest

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
