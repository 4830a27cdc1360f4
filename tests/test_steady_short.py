"""A whole-process capture of a script whose loop is short (40 steps) after a long autotuning
phase: the steady state must still be found, and the autotuning's file reads and trial kernels
must not be judged (issue: such captures fell back to "first to last kernel minus 20%", and the
compiler's reads in that window read as a data stall on a clean GPU-bound model)."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis import trace as T
from analysis.detect import diagnose, load_thresholds
from analysis.detect import view as C
from tests._synthetic import Loop

MS, US = 1_000_000, 1_000


def _script(path: Path, steps: int) -> Path:
    """Weight upload; cuDNN-style autotuning (6 input shapes x 20 layers x 8 algorithms x 3
    trial runs, 0.3 s of host work reading files before each shape); then ``steps`` GPU-bound
    steps of 31 kernels (the algorithms chosen), a sync every 10."""
    lp = Loop()
    for _ in range(20):
        lp.launch(50 * US, "upload")
    lp.sync()
    for _ in range(6):
        lp.host(300 * MS, reads=True)
        for _layer in range(20):
            for algo in range(8):
                for _ in range(3):
                    lp.launch(200 * US, f"conv_algo{algo}")
            lp.sync()
    for i in range(steps):
        lp.launch(20 * US, "begin")
        for j in range(30):
            lp.launch(500 * US, f"conv_algo{j % 8}")
        if i % 10 == 9:
            lp.sync()
    return lp.write(path)


@pytest.mark.parametrize("steps", [40, 60])
def test_short_loop_after_autotuning(tmp_path: Path, steps: int) -> None:
    path = _script(tmp_path / f"short{steps}.sqlite", steps)
    cfg = load_thresholds({"predict": {"untraced": False}})
    with T.open_trace(path) as tr:
        st = C.steady(tr, cfg.window)
        found = diagnose(tr, cfg)
    # the steps after the first (skipped), all of them, none of the autotuning
    assert st.mode == "iterations", st.note
    assert st.n_steps == steps - 2
    assert st.span_ns == pytest.approx((steps - 2) * (20 * US + 30 * 500 * US), rel=0.01)
    assert [f.klass for f in found if f.fired] == []


def test_a_repeating_layer_inside_noise_is_not_the_loop(tmp_path: Path) -> None:
    """What repeats must hold most of its own stretch: a kernel pair that recurs between
    stretches of never-repeating work (14% of the items, everywhere) is a detail, and the window
    falls back (no iterations)."""
    lp = Loop()
    for i in range(200):
        for _ in range(2):
            lp.launch(100 * US, "gemm")
            lp.launch(50 * US, "relu")
        for j in range(10):
            lp.launch(80 * US, f"once_{i}_{j}")
    path = lp.write(tmp_path / "noise.sqlite")
    with T.open_trace(path) as tr:
        st = C.steady(tr, load_thresholds().window)
        loose = C.steady(tr, load_thresholds({"window": {"min_local_cover_share": 0.1}}).window)
    assert st.mode == "activity", st.note
    assert loose.mode == "iterations"  # the rule is what keeps the detail out


def test_window_without_a_launch_call(tmp_path: Path) -> None:
    """A loop whose host queued all its work long before the GPU ran it (1 us launch calls,
    2 ms kernels): no launch call overlaps the steady window, which used to crash the search for
    the window's thread (the argmax of nothing). It is judged, and nothing fires."""
    lp = Loop()
    for _ in range(12):
        lp.launch(20 * US, "begin", call_ns=1_000)
        for _ in range(4):
            lp.launch(2 * MS, call_ns=1_000)
    path = lp.write(tmp_path / "queued.sqlite")
    with T.open_trace(path) as tr:
        st = C.steady(tr, load_thresholds().window)
        found = diagnose(tr)
    assert st.mode == "iterations" and st.step_tid is None
    assert [f.klass for f in found if f.fired] == []
