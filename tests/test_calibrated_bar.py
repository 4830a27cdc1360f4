"""A finding that fires on the traced timeline but whose prediction, calibrated to the program's
untraced step, saves less than its class's bar is cleared (``diagnosis.predict.calibrated_bar``).

The fixture is the wild corpus's clean_cudnn_short, captured whole on the H100: a cuDNN-autotuned
convolutional model whose 1,029-launch step took 46-54 ms under nsys and 28.3 ms without it
(corpus/wild/timing.csv), with the GPU busy ~24 ms of it. On the trace alone launch_bound fires;
with the measured step the replay fits nsys's cost at ~20 us a call and predicts 1.21x, a saving
under launch_bound's 25%. Its label (no switch helps) stands."""

from __future__ import annotations

import pytest

from analysis import trace as T
from analysis.detect import diagnose, load_thresholds
from analysis.findings import State
from tests._fixtures import sqlite_fixture
from tests.conftest import REPO

EXPORT = "clean_cudnn_short"
#: The mean of its two untraced `none` rounds on the H100 (corpus/wild/timing.csv).
STEP_MS = 28.26


def _launch_bound(step_ms: float | None, **predict: object):
    cfg = load_thresholds({"predict": predict} if predict else None)
    with T.open_trace(sqlite_fixture(EXPORT, REPO / "corpus" / "wild" / "exports")) as tr:
        found = diagnose(tr, cfg, step_ms=step_ms)
    return next(f for f in found if f.klass == "launch_bound")


def test_the_trace_alone_fires_launch_bound() -> None:
    f = _launch_bound(None)
    assert f.state is State.FIRED
    assert f.impact >= 0.25


def test_calibrated_to_the_untraced_step_it_is_cleared() -> None:
    f = _launch_bound(STEP_MS)
    assert f.state is State.CLEAR
    assert f.predicted_speedup == pytest.approx(1.21, abs=0.03)
    assert f.impact == pytest.approx(1 - 1 / f.predicted_speedup, abs=1e-3)
    assert "cleared: calibrated to the untraced step" in f.reason


def test_the_bar_can_be_switched_off() -> None:
    assert _launch_bound(STEP_MS, calibrated_bar=False).state is State.FIRED
