"""The measured window's length: the size's steps, or fewer for slow steps, never too few."""

from __future__ import annotations

import pytest

from harness.config import HarnessConfig
from harness.worker import window_steps


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
