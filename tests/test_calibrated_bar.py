"""Where the program's untraced step is known, the prediction calibrated to it is the number that
decides: a finding the trace alone would fire is clear when its calibrated saving is under its
class's bar, and the reason prints that saving.

The fixture is the wild corpus's clean_cudnn_short, captured whole on the H100: a cuDNN-autotuned
convolutional model whose 1,029-launch step took 46-54 ms under nsys and 28.3 ms without it
(corpus/wild/timing.csv), with the GPU busy ~24 ms of it. From the trace alone (nsys's default
7 us a call) an instant host would save about 40%, over launch_bound's 25%; with the measured step
the replay fits nsys's cost at ~20 us a call and predicts 1.18x, a saving of 15% (1.21x before the GPU's
turnaround between queued kernels was replayed: the graph keeps the ones recorded). Its label (no
switch helps) stands."""

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


def _saving(f) -> float:
    return 1 - 1 / f.predicted_speedup


def test_the_trace_alone_fires_launch_bound() -> None:
    f = _launch_bound(None)
    assert f.state is State.FIRED
    assert f.impact == pytest.approx(_saving(f), abs=1e-4)
    assert f.impact >= 0.25
    assert "from the trace alone" in f.reason
    assert f"a saving of {f.impact:.1%} of the step (>= 25%)" in f.reason


def test_calibrated_to_the_untraced_step_it_is_clear() -> None:
    f = _launch_bound(STEP_MS)
    assert f.state is State.CLEAR
    assert f.predicted_speedup == pytest.approx(1.18, abs=0.03)
    assert f.impact == 0.0
    assert f.metrics["predicted_saving_share"] == pytest.approx(_saving(f), abs=1e-4)
    share = f.metrics["predicted_saving_share"]
    assert "calibrated to the untraced step" in f.reason
    assert f"a saving of {share:.1%} of the step (< 25%)" in f.reason


def test_without_calibration_the_trace_alone_decides() -> None:
    f = _launch_bound(STEP_MS, calibrate=False)
    assert f.state is State.FIRED
    assert f.impact == pytest.approx(_launch_bound(None).impact)
