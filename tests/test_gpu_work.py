"""analysis.gpu_work on the committed exports, checked against plain SQL over the same window."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from analysis import trace as T
from analysis.gpu_work import COLUMNS, gpu_work
from analysis.packed_export import SUFFIX
from harness.judge.pipeline import gpu_work_table
from scenarios import discover
from tests._fixtures import DATA, sqlite_fixture
from tests._rounds import write_rounds

GPU = [sqlite_fixture(p.name.removesuffix(SUFFIX)) for p in sorted(DATA.glob(f"gpu_*{SUFFIX}"))]


@pytest.mark.parametrize("path", GPU, ids=lambda p: p.stem)
def test_kernels_and_their_time_per_step_match_sql(path: Path) -> None:
    with T.open_trace(path) as tr:
        frame = gpu_work(tr)
        row = frame.iloc[0]
        lo, hi = T.window(tr)
        steps = T.step_ranges(tr)
    n_steps = int(((steps["start_ns"] >= lo) & (steps["end_ns"] <= hi)).sum())
    con = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)  # the shared cached fixture
    count, total_ns = con.execute(
        'SELECT COUNT(*), SUM(MIN("end", ?) - MAX(start, ?)) FROM CUPTI_ACTIVITY_KIND_KERNEL '
        'WHERE start < ? AND "end" > ?',
        (hi, lo, hi, lo),
    ).fetchone()
    con.close()
    assert list(frame.columns) == list(COLUMNS)
    assert row["window_mode"] == "nvtx" and row["steps"] == n_steps == 3
    assert row["kernels_per_step"] == pytest.approx(count / n_steps)
    assert row["kernel_ms_per_step"] == pytest.approx(total_ns / 1e6 / n_steps)
    # the busy union covers the kernels (overlaps counted once) and never exceeds the window
    assert row["gpu_busy_ms_per_step"] * n_steps <= row["window_ms"] + 1e-9
    assert row["median_kernel_us"] > 0


def test_a_cpu_export_has_no_gpu_work_and_says_why() -> None:
    with T.open_trace(sqlite_fixture("cpu_nsys2022_sync_loading")) as tr:
        with pytest.raises(T.TraceError, match="no GPU activity"):
            gpu_work(tr)


def test_limit_is_each_variants_own_gpu_busy_time_only_without_an_ideal(tmp_path: Path) -> None:
    """gpu_work_table on a run folder holding the committed exports: sync_loading has an
    ideal, so no limit; posing as kernel_flood's fixes (removed by their launch limit) each
    variant's limit is its own GPU busy time per step (the launch overhead removed entirely
    leaves the variant's own GPU work), and share_of_limit divides it by the variant's timed
    mean step (its timing rounds'); kernel_flood's baseline is removed by a timed variant
    (``cuda_graphs``), so it has no limit."""
    found = discover()
    rows = []
    exports = (
        ("sync_loading", "baseline", "baseline", "gpu_nsys2025_sync_loading", 1000.0),
        ("sync_loading", "async_dataloader", "fix", "gpu_nsys2025_sync_loading_async_dataloader", 20.0),
        ("kernel_flood", "baseline", "baseline", "gpu_nsys2025_sync_loading", 1000.0),
        ("kernel_flood", "torch_compile", "fix", "gpu_nsys2025_sync_loading", 1000.0),
        ("kernel_flood", "cuda_graphs", "fix", "gpu_nsys2025_sync_loading_async_dataloader", 20.0),
    )  # fmt: skip
    for scenario, variant, kind, stem, step_ms in exports:
        folder = tmp_path / scenario / variant / "profile"
        folder.mkdir(parents=True)
        (folder / "x.sqlite").write_bytes(sqlite_fixture(stem).read_bytes())
        write_rounds(tmp_path, scenario, variant, {1: [step_ms - 1, step_ms + 1]})
        rows.append({"scenario": scenario, "variant": variant, "kind": kind, "profiled": True})
    work = gpu_work_table(tmp_path, found, pd.DataFrame(rows)).set_index(["scenario", "variant"])
    # sync_loading has an ideal variant: no limit; kernel_flood's baseline a timed removal
    assert work.loc["sync_loading", "limit_ms_per_step"].isna().all()
    assert pd.isna(work.loc[("kernel_flood", "baseline"), "limit_ms_per_step"])
    for variant, step_ms in (("torch_compile", 1000.0), ("cuda_graphs", 20.0)):
        r = work.loc[("kernel_flood", variant)]
        assert r["step_ms_mean"] == pytest.approx(step_ms)
        assert r["limit_ms_per_step"] == r["gpu_busy_ms_per_step"] > 0
        assert r["share_of_limit"] == pytest.approx(r["gpu_busy_ms_per_step"] / step_ms)
    busy = work.xs("kernel_flood")["gpu_busy_ms_per_step"]
    assert busy["torch_compile"] != busy["cuda_graphs"]  # each its own, not the baseline's


SIDE = DATA / "side_streams"


def test_side_stream_work_is_what_other_threads_put_on_streams_the_loop_never_uses() -> None:
    """sync_loading's dali on the H100: DALI's executor threads decode and resize on streams of
    their own; the loop's thread (and the autograd thread, on the loop's stream) train. The
    side-stream columns must match plain SQL: kernels on the streams that no launch call of
    the step thread reaches, over the same window."""
    path = sqlite_fixture("h100_sync_loading__dali", SIDE)
    with T.open_trace(path) as tr:
        row = gpu_work(tr).iloc[0]
        from analysis.detect import load_thresholds
        from analysis.detect import view as C

        st = C.steady(tr, load_thresholds(None).window)
    con = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    own = {
        s
        for (s,) in con.execute(
            "SELECT DISTINCT k.streamId FROM CUPTI_ACTIVITY_KIND_KERNEL AS k JOIN "
            "CUPTI_ACTIVITY_KIND_RUNTIME AS r ON r.correlationId = k.correlationId "
            "WHERE r.globalTid = ?",
            (st.step_tid,),
        )
    }
    (side_ns,) = con.execute(
        f'SELECT SUM(MIN("end", ?) - MAX(start, ?)) FROM CUPTI_ACTIVITY_KIND_KERNEL '
        f'WHERE start < ? AND "end" > ? AND streamId NOT IN ({",".join(map(str, own))})',
        (st.hi, st.lo, st.hi, st.lo),
    ).fetchone()
    con.close()
    assert row["steps"] == st.n_steps > 0
    assert row["side_streams"] >= 4  # DALI's executor streams
    assert row["side_kernel_ms_per_step"] == pytest.approx(side_ns / 1e6 / st.n_steps)
    # copies (JPEG bytes up, decoded batches) and the kernels, overlaps counted once
    assert row["side_copies_per_step"] > 0
    assert row["side_busy_ms_per_step"] >= row["side_kernel_ms_per_step"] * (1 - 1e-9)
    assert row["gpu_idle_ms_per_step"] == pytest.approx(
        row["window_ms"] / st.n_steps - row["gpu_busy_ms_per_step"]
    )


@pytest.mark.parametrize("path", GPU, ids=lambda p: p.stem)
def test_a_loop_that_feeds_itself_has_no_side_stream_work(path: Path) -> None:
    with T.open_trace(path) as tr:
        row = gpu_work(tr).iloc[0]
    assert row["side_streams"] == 0 and row["side_kernel_ms_per_step"] == 0.0


def test_the_side_bound_needs_an_ideal_and_charges_the_side_kernels() -> None:
    from analysis.gpu_work import add_side_bound

    table = pd.DataFrame(
        {
            "scenario": ["s", "s", "s", "t"],
            "variant": ["ideal", "dali", "idle_gpu", "x"],
            "kind": ["ideal", "fix", "fix", "fix"],
            "step_ms_mean": [20.0, 25.0, 30.0, 9.0],
            "gpu_busy_ms_per_step": [19.0, 21.0, 10.0, 5.0],
            "side_kernel_ms_per_step": [0.0, 3.0, 0.5, 2.0],
        }
    )
    out = add_side_bound(table).set_index("variant")["side_bound_share_of_ideal"]
    assert out["ideal"] == 1.0  # no side work: nothing in the way
    assert out["dali"] == pytest.approx(20.0 / (19.0 + 3.0))  # the GPU must do both
    assert out["idle_gpu"] == 1.0  # 19.5 ms of GPU work fits in ideal's 20 ms step
    assert pd.isna(out["x"])  # no ideal in its scenario
