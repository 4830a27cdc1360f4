"""One number decides (issue 36): on a GPU capture, the five classes the time model replays fire
on the saving their prediction gives, ``1 - 1 / predicted_speedup``, that saving is the impact
and the reason prints it; where the model cannot run the class is not judged.

Real H100 exports (tests/data/h100, nsys 2025.3): the forced_sync baseline (175 blocking reads a
step), the pageable_copies baseline (a 154 MB pageable batch copy a step, no input work) and its
``pinned_prefetch`` fix (the next batch copied on a side stream while a step computes; the host
runs 8 steps ahead of its GPU). How each was made: tests/data/README.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis import trace as T
from analysis.detect import diagnose
from analysis.findings import State
from tests._fixtures import sqlite_fixture

H100 = Path(__file__).resolve().parent / "data" / "h100"
MODEL = ("data_stall", "pageable_copy", "launch_bound", "host_sync", "gil_contention")


def _found(name: str, cfg: dict | None = None, step_ms: float | None = None) -> dict:
    with T.open_trace(sqlite_fixture(name, H100)) as tr:
        return {f.klass: f for f in diagnose(tr, cfg, step_ms=step_ms)}


@pytest.mark.parametrize("step_ms", [None, 14.72, 14.72 * 1.2], ids=["trace", "step", "off"])
def test_a_loop_with_nothing_to_remove_predicts_one(step_ms: float | None) -> None:
    """pinned_prefetch hides its copy: every removal leaves the GPU's 14.6 ms a step. The replay
    reproduces the step (its copy on a side stream runs when launched, while the loop's stream
    is 8 steps behind; the window holds the kernels its last steps launched), and calibrated to
    a measured step, even one 20% off, a removal that changes nothing is 1.00x: the speedup is
    base over after, both replays fitted alike. (Over the measured step, as before, this export
    read 1.58x for pageable_copy and 5.2x for launch_bound.)"""
    found = _found("h100_pageable_copies__pinned_prefetch", step_ms=step_ms)
    for klass in ("data_stall", "pageable_copy", "launch_bound", "host_sync"):
        f = found[klass]
        assert f.state is State.CLEAR, (klass, f.reason)
        assert f.predicted_speedup == pytest.approx(1.0, abs=0.01), klass
        assert 0.97 <= f.metrics["model_fit"] <= 1.01, klass
        assert f.metrics["observed_step_ms"] == pytest.approx(14.8, abs=0.2), klass


def test_the_impact_is_the_saving_the_reason_prints() -> None:
    """forced_sync: the syncs removed, 1.40x, a 28.6% saving, while the share read off the
    window (``sync_exposed_share``, 20.6%) stays a metric."""
    f = _found("h100_forced_sync__baseline")["host_sync"]
    saving = 1 - 1 / f.predicted_speedup
    assert f.state is State.FIRED
    assert f.impact == f.metrics["predicted_saving_share"]
    assert f.impact == pytest.approx(saving, abs=1e-4)
    assert f"a saving of {f.impact:.1%} of the step (>= 15%)" in f.reason
    assert f.metrics["sync_exposed_share"] == pytest.approx(0.206, abs=0.001)
    assert f.metrics["sync_exposed_share"] < f.impact


def test_a_batch_copy_without_input_work_is_no_data_stall() -> None:
    """pageable_copies' baseline copies a batch every step but loads nothing: removing the
    input work removes nothing (the copy is pageable_copy's, which fires)."""
    found = _found("h100_pageable_copies__baseline")
    assert found["data_stall"].predicted_speedup == 1.0
    assert found["data_stall"].state is State.CLEAR
    assert found["pageable_copy"].fired and found["pageable_copy"].predicted_speedup > 2


def test_without_predictions_the_model_classes_are_not_judged() -> None:
    found = _found("h100_forced_sync__baseline", {"predict": {"enabled": False}})
    for klass in MODEL:
        f = found[klass]
        assert f.state is State.NOT_JUDGED and "predictions are off" in f.reason, klass
        assert f.impact == 0.0 and f.predicted_speedup is None
    assert found["exposed_comm"].state is State.CLEAR
