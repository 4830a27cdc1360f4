"""Whole-process captures whose loop is short beside a long start-up (issue 23 item 5): the
steady state is the loop the program settles into, found by a kernel that runs once a step
however rare it is beside the layers' kernels and the autotuner's trials of them; repeats that
cannot be the loop (a weight upload's copies, a side stream's memsets) are never taken for it,
and where nothing else repeats the report is not judged rather than judged on its start-up."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from analysis import trace as T
from analysis.detect import diagnose, load_thresholds
from analysis.detect import view as C
from analysis.findings import State
from tests._fixtures import sqlite_fixture
from tests._synthetic import Loop

MS, US = 1_000_000, 1_000
STEPS = 40


def _conv_loop(lp: Loop, steps: int) -> None:
    """``steps`` steps of 3 stages x 26 convolutions (each conv 3 times a step, between
    different neighbours) and a loss kernel once a step."""
    for _ in range(steps):
        for stage in range(3):
            for layer in range(26):
                lp.launch(100 * US, f"conv{layer}")
            lp.launch(50 * US, f"bn{stage}")
        lp.launch(20 * US, "loss")


def _autotuned(path: Path) -> Path:
    """cuDNN-style autotuning (every conv tried 20 times, 0.2 s of host work first), then
    ``STEPS`` steps: the 26 convs are the most frequent kernels, and none of them is a step."""
    lp = Loop()
    lp.host(200 * MS, reads=True)
    for _ in range(20):
        for layer in range(26):
            lp.launch(300 * US, f"conv{layer}")
        lp.sync()
    _conv_loop(lp, STEPS)
    return lp.write(path)


def test_a_once_a_step_kernel_is_the_anchor_however_rare(tmp_path: Path) -> None:
    """The 24 most frequent codes are convs whose stretches repeat once a step each but cover
    a third of it: no anchor among them (the window fell back to the span of GPU activity);
    trying every code finds the step (82 items) anchored on `loss` or a `bn`."""
    path = _autotuned(tmp_path / "autotuned.sqlite")
    with T.open_trace(path) as tr:
        st = C.steady(tr, load_thresholds().window)
        top24 = C.steady(tr, load_thresholds({"window": {"anchor_candidates": 24}}).window)
        found = diagnose(tr, {"predict": {"untraced": False}})
    assert st.mode == "iterations", st.note
    assert st.n_steps == STEPS - 2  # the first skipped, the last ends at the capture's edge
    assert "82 items per iteration" in st.note
    assert st.span_ns == pytest.approx((STEPS - 2) * (78 * 100 + 3 * 50 + 20) * US, rel=0.01)
    assert top24.mode == "activity" and top24.untrusted is None  # nothing repeats: last resort
    assert [f.klass for f in found if f.fired] == []


def test_a_weight_upload_is_not_the_loop(tmp_path: Path) -> None:
    """3000 identical copies (a weight upload, 60 ms) repeat over more items than the 40 steps
    after them (240 ms): the most items, but a later run of repeats takes longer, so they are a
    phase the program left, and the loop is the window."""
    lp = Loop()
    for _ in range(3000):
        lp.h2d(1 << 20, 20 * US, pageable=False)
    lp.sync()
    for _ in range(STEPS):
        lp.launch(20 * US, "begin")
        for j in range(19):
            lp.launch(300 * US, f"layer{j % 5}")
    path = lp.write(tmp_path / "upload.sqlite")
    with T.open_trace(path) as tr:
        st = C.steady(tr, load_thresholds().window)
        first_kernel = int(tr.query(f"SELECT MIN(start) FROM {C.KERNEL}")[1][0][0])
        by_cover = C.pick_anchor(C.anchors(C.gpu_sequence(tr)["code"], 5))
    assert st.mode == "iterations" and st.n_steps == STEPS - 2, st.note
    assert st.lo > first_kernel
    assert by_cover is not None and by_cover.code < 0 and by_cover.period == 1  # the upload


def _autotune_only(path: Path) -> Path:
    """A capture that ends inside autotuning: 1100 trial kernels, never the same twice, and a
    workspace memset-like kernel on a side stream every 100 of them."""
    lp = Loop()
    for i in range(1100):
        lp.launch(200 * US, f"trial{i}")
        if i % 100 == 0:
            lp.launch(5 * US, "workspace")
    lp.write(path)
    with sqlite3.connect(path) as db:
        db.execute(
            f"UPDATE {C.KERNEL} SET streamId = 13 WHERE shortName = "
            "(SELECT id FROM StringIds WHERE value = 'workspace')"
        )
    return path


def test_a_side_streams_repeats_are_not_the_loop(tmp_path: Path) -> None:
    """The only repeats are 11 workspace kernels on a side stream among 1100 others: not the
    loop, and with nothing else repeating nothing is judged (the span of GPU activity is all
    autotuning). Allowed to, the side stream's repeats would have been the window."""
    path = _autotune_only(tmp_path / "autotune.sqlite")
    with T.open_trace(path) as tr:
        st = C.steady(tr, load_thresholds().window)
        found = diagnose(tr, {"predict": {"untraced": False}})
        side = C.steady(tr, load_thresholds({"window": {"min_device_share": 0.0}}).window)
        it = C.gpu_iterations(tr, load_thresholds().window)
    assert it is None
    assert st.mode == "activity" and st.untrusted is not None
    assert "holding 1.0% of the GPU's items" in st.untrusted
    assert {f.state for f in found} == {State.NOT_JUDGED}
    assert all(f.reason.startswith("no steady state to judge") for f in found)
    assert side.mode == "iterations" and side.n_steps == 9


def test_nothing_repeating_keeps_the_last_resort(tmp_path: Path) -> None:
    """A report whose GPU work never repeats keeps the span of its activity as its window (only
    repeats that cannot be the loop make the whole report not judged): its shares are read
    there. The classes the time model decides are not judged (one window is no iteration to
    replay), and say why; exposed_comm is judged on the span."""
    lp = Loop()
    for i in range(200):
        lp.launch(200 * US, f"k{i}")
    path = lp.write(tmp_path / "once.sqlite")
    with T.open_trace(path) as tr:
        st = C.steady(tr, load_thresholds().window)
        found = {f.klass: f for f in diagnose(tr, {"predict": {"untraced": False}})}
    assert st.mode == "activity" and st.untrusted is None
    assert found["exposed_comm"].state is not State.NOT_JUDGED
    for klass in ("data_stall", "pageable_copy", "launch_bound", "host_sync"):
        f = found[klass]
        assert f.state is State.NOT_JUDGED and "fewer than 2 steady iterations" in f.reason, klass
        assert "gpu_idle_share" in f.metrics or "pageable_h2d_share" in f.metrics, klass


def test_every_code_is_tried_in_one_pass() -> None:
    """The anchors tried are every code that occurs min_repeats + 1 times, and the grouping
    gives each its positions in order (what the per-code scan of the whole stream gave)."""
    rng = np.random.default_rng(7)
    codes = np.concatenate([rng.integers(0, 500, 3000), np.tile(np.arange(900, 960), 20)])
    uniq, inv, counts = np.unique(codes, return_inverse=True, return_counts=True)
    g = C.group_codes(codes)
    assert (g.uniq == uniq).all() and (g.counts == counts).all() and (g.inv == inv).all()
    for u in range(uniq.size):
        assert (g.by_code[g.bounds[u] : g.bounds[u + 1]] == np.flatnonzero(inv == u)).all()
    anchor = C.pick_anchor(C.anchors(codes, 5))
    assert anchor is not None and anchor.period == 60 and anchor.cover == 19 * 60


CORPUS_EXPORTS = Path(__file__).resolve().parents[1] / "corpus" / "wild" / "exports"
H200 = Path(__file__).resolve().parent / "data" / "h200"


def _window(name: str, where: Path, cfg: dict | None = None) -> tuple[C.Steady, np.ndarray]:
    with T.open_trace(sqlite_fixture(name, where)) as tr:
        st = C.steady(tr, load_thresholds(cfg).window)
    assert st.edges is not None, st.note
    return st, np.diff(st.edges) / MS


@pytest.mark.parametrize("name", ["ue_layernorm_gelu", "ue_swiglu"])
def test_a_one_off_warm_up_stall_is_left_out_of_the_window(name: str) -> None:
    """The committed exports' window is a sub-step (52 and 34 GPU items, ~6 a step) whose 5th
    iteration is the warm-up's stall (85 and 78 ms, 60x the median, 6.6x and 9.3x the longest
    after it, the step's own 8-13 ms iteration): ``_trim`` drops outliers at the very start
    only, so it read as ~60% GPU idle and launch_bound came first (a CUDA-graphs switch
    measured 1.00-1.01x; fusing them 1.83x and 1.49x). Left out, the GPU idles ~12% of the
    window (launch_bound's own reading); the step's periodic long iteration stays. With
    ``stall_factor`` out of reach the stall stays in."""
    st, dur = _window(name, CORPUS_EXPORTS)
    assert "one-off" in st.note and "iteration 5" in st.note, st.note
    assert dur.max() < 20, dur  # the stall is gone, the step's own long iterations stay
    assert (dur > 5 * np.median(dur)).sum() >= 2, dur
    kept, dur_kept = _window(name, CORPUS_EXPORTS, {"window": {"stall_factor": 1000.0}})
    assert "one-off" not in kept.note and dur_kept.max() > 70, dur_kept
    with T.open_trace(sqlite_fixture(name, CORPUS_EXPORTS)) as tr:
        found = {f.klass: f for f in diagnose(tr)}
    assert found["launch_bound"].metrics["gpu_idle_share"] < 0.2, found["launch_bound"].reason


def test_without_the_stall_ue_swiglu_reads_unfused_elementwise() -> None:
    """ue_swiglu's primary on its committed export, the stall left out, is its label, and
    launch_bound does not fire (as on its full capture)."""
    with T.open_trace(sqlite_fixture("ue_swiglu", CORPUS_EXPORTS)) as tr:
        fired = sorted((f for f in diagnose(tr) if f.fired), key=lambda f: -f.impact)
    assert fired and fired[0].klass == "unfused_elementwise", [(f.klass, f.impact) for f in fired]
    assert "launch_bound" not in {f.klass for f in fired}


@pytest.mark.parametrize(
    ("name", "where", "nvtx"),
    [
        ("bio_torch_save", CORPUS_EXPORTS, True),
        ("bio_csv_log", CORPUS_EXPORTS, True),
        ("bio_np_save_acts", CORPUS_EXPORTS, True),
        ("h200_sync_checkpoint__async_save", H200, False),  # its steps found, not its ranges
    ],
)
def test_periodic_work_is_no_one_off_stall(name: str, where: Path, nvtx: bool) -> None:
    """A save every N steps (issue 50) recurs: a later iteration comes near it, so it stays in
    the window and in the mean step: the window is the one without the rule."""
    st, _ = _window(name, where, {"window": {"use_nvtx": nvtx}})
    off, _ = _window(name, where, {"window": {"use_nvtx": nvtx, "stall_factor": 1e9}})
    assert "one-off" not in st.note, st.note
    assert np.array_equal(st.edges, off.edges)


def test_a_run_of_one_short_name_is_not_the_loop(tmp_path: Path) -> None:
    """lb_tiny_layers' shape: 24 equal Linear+ReLU layers and a head, then a per-parameter
    optimizer of 7 elementwise kernels a parameter (50 parameters). CUPTI's short names merge
    every GEMM into one name and every elementwise template instance into another, so no short
    name occurs once a step, and the commonest repeat is one kernel inside the optimizer's run
    of 350 (the step read as one-kernel iterations). On full names the head's GEMM is once a
    step: the step is found, 450 items."""
    vew = "vectorized_elementwise_kernel"
    ops = ["lerp", "mul", "addcmul", "sqrt", "div", "add", "addcdiv"]
    short = {f"adam_{op}": vew for op in ops} | {"relu": vew, "relu_bwd": vew, "mse": vew}
    short |= {"gemm": "gemm", "gemm_head": "gemm", "gemm_bwd": "gemm", "gemm_head_bwd": "gemm"}
    lp = Loop(short=short)
    for _ in range(STEPS):
        for _ in range(24):
            lp.launch(3 * US, "gemm")
            lp.launch(2 * US, "relu")
        for name in ("gemm_head", "mse", "gemm_head_bwd"):
            lp.launch(3 * US, name)
        for _ in range(24):
            lp.launch(2 * US, "relu_bwd")
            lp.launch(3 * US, "gemm_bwd")
        lp.launch(3 * US, "gemm_bwd")
        for _ in range(50):
            for op in ops:
                lp.launch(2 * US, f"adam_{op}")
    path = lp.write(tmp_path / "tiny_layers.sqlite")
    with T.open_trace(path) as tr:
        st = C.steady(tr, load_thresholds().window)
    assert st.mode == "iterations", st.note
    assert "450 items per iteration" in st.note
    assert st.n_steps == STEPS - 2
