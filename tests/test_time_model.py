"""The time model (analysis/detect/_model.py) on small synthetic loops with known answers.

Each loop is written step by step (tests/_synthetic.py) so that its step time, and the step time
without one cause, follow from the numbers in the test. The model must find them from the export
alone; each test fails if the replay stops removing that cause, stops overlapping the host with
the GPU, or reads a speedup off a share of the window instead of a time model.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from analysis import trace as T
from analysis.detect import TraceView, diagnose, load_thresholds
from analysis.detect import timemodel as M
from tests._synthetic import Loop

DATA = Path(__file__).resolve().parent / "data"

MS = 1_000_000
US = 1_000
#: the synthetic calls carry no nsys overhead: predict for the trace as it is
TRACED = {"predict": {"untraced": False}}


def _export(tmp_path: Path, loop: Loop, name: str) -> Path:
    return loop.write(tmp_path / f"{name}.sqlite")


def _findings(path: Path, over: dict | None = None) -> dict:
    with T.open_trace(path) as tr:
        return {f.klass: f for f in diagnose(tr, {**TRACED, **(over or {})})}


def _step(loop: Loop, body) -> Loop:
    """12 iterations of ``body(loop)``; each starts with a kernel named ``begin`` (the anchor
    the iteration search finds)."""
    for _ in range(12):
        loop.launch(20 * US, "begin")
        body(loop)
    return loop


def _observed_step(path: Path) -> float:
    with T.open_trace(path) as tr:
        tl = M.timeline(TraceView(tr, load_thresholds(TRACED)))
        return float(tl.edges[-1] - tl.edges[0]) / tl.n_iterations


def test_syncs_removed_overlap_host_and_gpu(tmp_path: Path) -> None:
    """Per step: 2 ms of host work, four 1 ms kernels, a sync. The sync makes the step host +
    GPU (~6 ms); without it the host's 2 ms run under the GPU's 4 ms: the step is the GPU's."""

    def body(lp: Loop) -> None:
        lp.host(2 * MS)
        for _ in range(4):
            lp.launch(1 * MS)
        lp.sync()

    path = _export(tmp_path, _step(Loop(), body), "sync")
    f = _findings(path)["host_sync"]
    gpu_step = 4 * MS + 20 * US
    assert f.fired, f.reason
    assert f.predicted_step_ms == pytest.approx(gpu_step / MS, rel=0.02)
    assert f.predicted_speedup == pytest.approx(_observed_step(path) / gpu_step, rel=0.02)
    assert f.predicted_speedup_ci_low <= f.predicted_speedup <= f.predicted_speedup_ci_high
    assert f.metrics["model_fit"] == pytest.approx(1.0, abs=0.01)


def test_syncs_removed_host_bound_floor(tmp_path: Path) -> None:
    """The same loop with 6 ms of host work: without the sync the host, not the GPU, sets the
    step (6 ms + the launch calls), so removing the syncs saves only the GPU's tail."""

    def body(lp: Loop) -> None:
        lp.host(6 * MS)
        for _ in range(4):
            lp.launch(1 * MS)
        lp.sync()

    path = _export(tmp_path, _step(Loop(), body), "sync_host")
    f = _findings(path)["host_sync"]
    host_step = 6 * MS + 5 * 10 * US  # host work and five 10 us launch calls
    assert f.predicted_step_ms == pytest.approx(host_step / MS, rel=0.02)
    assert f.predicted_speedup == pytest.approx(_observed_step(path) / host_step, rel=0.02)


def _input_bound(tmp_path: Path, name: str) -> Path:
    """Per step: 100 ms reading input, a pinned 4 MB batch copy, 40 launches of 50 us kernels
    (2 ms of GPU work, 0.4 ms of launch calls)."""

    def body(lp: Loop) -> None:
        lp.host(100 * MS, reads=True)
        lp.h2d(4 << 20, 200 * US, pageable=False)
        for _ in range(40):
            lp.launch(50 * US)

    return _export(tmp_path, _step(Loop(), body), name)


def test_input_share_near_one_is_not_a_runaway_speedup(tmp_path: Path) -> None:
    """The input-bound loop: input is ~98% of the step, which read as a share gives
    1 / (1 - 0.98) ~ 50x or more; removed, the host's 0.4 ms run under the GPU's 2 ms, so the
    answer is step / 2.02 ms."""
    path = _input_bound(tmp_path, "near_one")
    f = _findings(path)["data_stall"]
    assert f.fired and f.impact > 0.95, f.reason
    after = 20 * US + 40 * 50 * US  # the GPU's step: the host hides under it
    assert f.predicted_step_ms == pytest.approx(after / MS, rel=0.02)
    assert f.predicted_speedup == pytest.approx(_observed_step(path) / after, rel=0.02)


def test_partial_fix_predicts_what_is_left(tmp_path: Path) -> None:
    """A loader that keeps up only partly: each step waits 12 ms for input while the GPU works
    8 ms on the previous batch (no sync, so the two overlap). The step is ~12 ms; the input
    removed, the GPU's 8 ms are left: 1.5x, not the 12 / (12 - 12) a share would say."""

    def body(lp: Loop) -> None:
        lp.host(12 * MS, reads=True)
        for _ in range(8):
            lp.launch(1 * MS)

    path = _export(tmp_path, _step(Loop(), body), "partial")
    f = _findings(path)["data_stall"]
    gpu_step = 8 * MS + 20 * US
    assert f.predicted_step_ms == pytest.approx(gpu_step / MS, rel=0.03)
    assert f.predicted_speedup == pytest.approx(_observed_step(path) / gpu_step, rel=0.03)
    assert 1.4 < f.predicted_speedup < 1.6


def test_launch_bound_down_to_the_kernels(tmp_path: Path) -> None:
    """200 launches of 5 us kernels, 20 us of host time each: the step is the host's 4 ms; with
    every kernel queued at once (one graph replay) it is the kernels' 1 ms."""

    def body(lp: Loop) -> None:
        for _ in range(200):
            lp.launch(5 * US, call_ns=20 * US)

    path = _export(tmp_path, _step(Loop(), body), "launch")
    f = _findings(path)["launch_bound"]
    assert f.fired, f.reason
    kernels = 200 * 5 * US + 20 * US
    assert f.predicted_step_ms == pytest.approx(kernels / MS, rel=0.03)
    assert f.predicted_speedup == pytest.approx(_observed_step(path) / kernels, rel=0.03)


def test_pageable_copy_removed(tmp_path: Path) -> None:
    """A pageable 64 MB copy holds the host 10 ms, then 5 ms of kernels: without the copy the
    step is the kernels' 5 ms (the host launches the next step while they run)."""

    def body(lp: Loop) -> None:
        lp.h2d(64 << 20, 10 * MS, pageable=True)
        for _ in range(5):
            lp.launch(1 * MS)

    path = _export(tmp_path, _step(Loop(), body), "pageable")
    f = _findings(path)["pageable_copy"]
    assert f.fired, f.reason
    gpu_step = 5 * MS + 20 * US
    assert f.predicted_step_ms == pytest.approx(gpu_step / MS, rel=0.03)


def test_untraced_takes_the_trace_overhead_off_each_call(tmp_path: Path) -> None:
    """The launch-bound loop above, predicted for the program without nsys: each call's host
    time loses ``trace_overhead_us``, so the recorded 4 ms step is 200 x (20 - 7) us untraced
    while the kernels stay 1 ms: 2.6x instead of 4x."""

    def body(lp: Loop) -> None:
        for _ in range(200):
            lp.launch(5 * US, call_ns=20 * US)

    path = _export(tmp_path, _step(Loop(), body), "untraced")
    over = {"predict": {"untraced": True, "trace_overhead_us": 7.0}}
    traced = _findings(path)["launch_bound"]
    untraced = _findings(path, over)["launch_bound"]
    kernels = 200 * 5 * US + 20 * US
    untraced_step = _observed_step(path) * 13 / 20
    assert untraced.predicted_speedup == pytest.approx(untraced_step / kernels, rel=0.03)
    assert traced.predicted_speedup / untraced.predicted_speedup == pytest.approx(20 / 13, rel=0.03)


def _launch_bound(tmp_path: Path, name: str) -> Path:
    """200 launches of 5 us kernels, 20 us of host time each (the loop above)."""

    def body(lp: Loop) -> None:
        for _ in range(200):
            lp.launch(5 * US, call_ns=20 * US)

    return _export(tmp_path, _step(Loop(), body), name)


def _calibrated(path: Path, step_ms: float, over: dict | None = None) -> dict:
    cfg = {"predict": {"untraced": True, "trace_overhead_us": 7.0, **(over or {})}}
    with T.open_trace(path) as tr:
        return {f.klass: f for f in diagnose(tr, cfg, step_ms=step_ms)}


def test_calibration_fits_nsys_cost_to_the_measured_step(tmp_path: Path) -> None:
    """The launch-bound loop whose program, timed without nsys, took half its traced step: nsys
    cost it 10 us of each call's 20, not the default 7. Calibrated, the replay finds those
    10 us, and the speedup is the measured step's: 2.01 ms / 1.02 ms, not the 2.6 ms the
    default cost would leave."""
    path = _launch_bound(tmp_path, "calibrate")
    measured = _observed_step(path) / 2
    f = _calibrated(path, measured / MS)["launch_bound"]
    kernels = 200 * 5 * US + 20 * US
    assert f.metrics["trace_overhead_us"] == pytest.approx(10.0, abs=0.3)
    assert f.predicted_speedup == pytest.approx(measured / kernels, rel=0.02)
    assert "calibrated to the measured untraced step" in f.prediction_note
    assert "cost fitted to it" in f.prediction_note
    off = _calibrated(path, measured / MS, {"calibrate": False})["launch_bound"]
    assert off.metrics["trace_overhead_us"] == pytest.approx(7.0)
    assert off.predicted_speedup == pytest.approx(
        _observed_step(path) * 13 / 20 / kernels, rel=0.03
    )


def test_calibration_of_a_loop_of_few_calls_scales_its_stretches(tmp_path: Path) -> None:
    """A loop of few calls (the input-bound one: 41 calls a step): a measured step 5% off the
    traced one is the spread of its host work between processes, not 25 us a call. The cost per
    call keeps its default; the host's stretches are scaled until the replay takes the measured
    step, and the input removed leaves the same GPU-bound step: the speedup is the measured
    step's over it. A measured step ten times the traced iteration is not the iteration found:
    the default cost is kept, and the note says why."""
    few = _input_bound(tmp_path, "few_calls")
    measured = _observed_step(few) * 0.95
    f = _calibrated(few, measured / MS)["data_stall"]
    alone = _calibrated(few, measured / MS, {"calibrate": False})["data_stall"]
    assert f.metrics["trace_overhead_us"] == pytest.approx(7.0)
    assert 0.9 < f.metrics["host_stretch_scale"] < 0.99
    assert "too few to fit it" in f.prediction_note and "stretches scaled" in f.prediction_note
    assert f.predicted_step_ms == pytest.approx(alone.predicted_step_ms, rel=0.01)
    assert f.predicted_speedup == pytest.approx(measured / MS / f.predicted_step_ms, rel=0.01)
    other = _launch_bound(tmp_path, "other_step")
    g = _calibrated(other, _observed_step(other) * 10 / MS)["launch_bound"]
    assert g.metrics["trace_overhead_us"] == pytest.approx(7.0)
    assert "is not the measured" in g.prediction_note


def test_removed_input_takes_its_side_effects_with_it(tmp_path: Path) -> None:
    """Per step: 30 ms of input reads, a pinned batch copy, then 20 launches of 50 us kernels
    with 10 us of dispatch before each; the first launch after the copy comes 3 ms late (the
    host batch released, a thread woken from the load). With the input gone that 3 ms goes too:
    the host's 0.4 ms hide under the GPU's 1 ms. The same 3 ms in a loop with no input work is
    the loop's own host work and stays."""

    def body(lp: Loop, reads: bool) -> None:
        if reads:
            lp.host(30 * MS, reads=True)
            lp.h2d(4 << 20, 100 * US, pageable=False)
        lp.host(3 * MS)
        for _ in range(20):
            lp.launch(50 * US)
            lp.host(10 * US)

    fed = _export(tmp_path, _step(Loop(), lambda lp: body(lp, True)), "side_effects")
    f = _findings(fed)["data_stall"]
    gpu_step = 20 * US + 20 * 50 * US
    assert f.predicted_step_ms == pytest.approx(gpu_step / MS, rel=0.05)
    own = _export(tmp_path, _step(Loop(), lambda lp: body(lp, False)), "own_host_work")
    g = _findings(own)["data_stall"]
    assert g.predicted_speedup == pytest.approx(1.0, abs=0.01)


def test_launch_removal_keeps_the_way_back_from_each_sync(tmp_path: Path) -> None:
    """100 launches of 5 us kernels at 20 us each, a sync, then 300 us of Python before the
    next step's first launch. A host that issues instantly (one graph replay) still waits at
    the sync and still comes back from it: the step is the 0.52 ms of kernels plus the 0.3 ms
    way back and that launch, not the kernels alone."""

    def body(lp: Loop) -> None:
        for _ in range(100):
            lp.launch(5 * US, call_ns=20 * US)
        lp.sync()
        lp.host(300 * US)

    path = _export(tmp_path, _step(Loop(), body), "way_back")
    f = _findings(path)["launch_bound"]
    assert f.fired, f.reason
    back = 300 * US + 10 * US + 3 * US  # the gap, the first launch's call, its latency
    kernels = 20 * US + 100 * 5 * US
    assert f.predicted_step_ms == pytest.approx((kernels + back) / MS, rel=0.05)


def test_no_prediction_without_gpu_activity_says_why(tmp_path: Path) -> None:
    """A CPU capture (OS-runtime calls, no CUDA tables): nothing is judged, nothing predicted."""
    lp = Loop()
    lp.host(1 * MS, reads=True)
    path = lp.write(tmp_path / "cpu.sqlite")
    with sqlite3.connect(path) as db:
        for table in ("RUNTIME", "KERNEL", "MEMCPY"):
            db.execute(f"DROP TABLE CUPTI_ACTIVITY_KIND_{table}")
    for f in _findings(path).values():
        assert f.predicted_speedup is None and f.predicted_step_ms is None
        assert f.prediction_note, f.klass


def test_json_and_tables_carry_the_prediction() -> None:
    """``harness diagnose --format json`` names the fields as findings.csv does, on a real
    H100 export (the forced_sync baseline: removing its syncs leaves the GPU's step)."""
    from harness.judge.diagnose import diagnose_report
    from tests._fixtures import sqlite_fixture

    result = diagnose_report(sqlite_fixture("h100_forced_sync__baseline", DATA / "h100"))
    by = {f["class"]: f for f in result["findings"]}
    sync = by["host_sync"]
    assert sync["fired"]
    assert 1.2 < sync["predicted_speedup_ci_low"] <= sync["predicted_speedup"]
    assert sync["predicted_speedup"] <= sync["predicted_speedup_ci_high"] < 1.7
    assert sync["predicted_step_ms"] == pytest.approx(
        sync["metrics"]["observed_step_ms"] * 29.4 / 45.1, rel=0.1
    )  # the GPU's 29.4 ms of a 45.1 ms recorded step
    # no GIL waits in this loop: nothing to cut, nothing saved
    assert by["gil_contention"]["predicted_speedup"] == 1.0
    assert by["gil_contention"]["state"] == "clear"


def test_graph_turn_share_leaves_time_between_a_graphs_kernels() -> None:
    """``predict.graph_turn_share``: under the launch-bound removal (one graph replay), the
    kernels whose turnaround the trace did not record keep that share of the median between
    them. On a real launch-bound capture (lb_manual_sgd: ~1,480 kernels a step, few queued)
    the replayed step grows with it, so the predicted speedup falls; 0 is the default."""
    from tests._fixtures import sqlite_fixture

    path = sqlite_fixture(
        "lb_manual_sgd", Path(__file__).resolve().parents[1] / "corpus/wild/exports"
    )

    def speedup(share: float | None) -> float:
        over = {} if share is None else {"predict": {"graph_turn_share": share}}
        with T.open_trace(path) as tr:
            found = {f.klass: f for f in diagnose(tr, over)}
        return found["launch_bound"].predicted_speedup

    default, off, some, all_of_it = speedup(None), speedup(0.0), speedup(0.3), speedup(1.0)
    assert default == off
    assert all_of_it < some < off
    assert off / some > 1.05  # ~1,480 gaps a step, each a share of a ~1 us turnaround


def test_a_gpu_bound_step_keeps_the_default_cost_per_call() -> None:
    """clean_pinned_side_stream (fp32 GEMMs hold 93% of its GPU time, the GPU idle 0.6% of the
    window): its traced step is the GPU's, so no cost per call moves the replay to the measured
    untraced step and the measured step cannot fit one. The default cost is kept: the fp32
    removal, which leaves the host the bound, is the trace-alone prediction over the measured
    step. A fit run to its bound (50 us a call) found the host nearly free there (a step of
    1.2 ms against 2.3)."""
    from tests._fixtures import sqlite_fixture

    path = sqlite_fixture(
        "clean_pinned_side_stream", Path(__file__).resolve().parents[1] / "corpus/wild/exports"
    )
    with T.open_trace(path) as tr:
        alone = {f.klass: f for f in diagnose(tr, {})}["fp32_math"]
        fitted = {f.klass: f for f in diagnose(tr, {}, step_ms=8.158)}["fp32_math"]
    assert "kept: the GPU's work sets the replayed step" in fitted.prediction_note
    assert fitted.metrics["trace_overhead_us"] == alone.metrics["trace_overhead_us"]
    assert fitted.predicted_step_ms == pytest.approx(alone.predicted_step_ms, rel=0.01)
