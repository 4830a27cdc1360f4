"""analysis.gpu_work on the committed exports, checked against plain SQL over the same window."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from analysis import trace as T
from analysis.gpu_work import COLUMNS, gpu_work
from harness.verdicts import gpu_work_table
from scenarios import discover
from tests._fixtures import DATA, sqlite_fixture

GPU = [
    sqlite_fixture(p.name.removesuffix(".sqlite.xz")) for p in sorted(DATA.glob("gpu_*.sqlite.xz"))
]


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


def test_limit_is_the_baseline_kernel_sum_only_without_an_ideal(tmp_path: Path) -> None:
    """gpu_work_table on a run folder holding the committed exports: sync_loading has an
    ideal, so no analytic limit; posing as kernel_flood (no ideal) the limit is the baseline's
    kernel-sum per step and share_of_limit divides it by each variant's unprofiled step time."""
    found = discover()
    rows = []
    for variant, kind, stem, step_ms in (
        ("baseline", "baseline", "gpu_nsys2025_sync_loading", 1000.0),
        ("cuda_graphs", "fix", "gpu_nsys2025_sync_loading_async_dataloader", 20.0),
    ):
        for scenario in ("sync_loading", "kernel_flood"):
            folder = tmp_path / scenario / variant / "profile"
            folder.mkdir(parents=True)
            (folder / "x.sqlite").write_bytes(sqlite_fixture(stem).read_bytes())
            rows.append(
                {"scenario": scenario, "variant": variant, "kind": kind, "profiled": True}
                | {"step_ms_mean": step_ms}
            )
    work = gpu_work_table(tmp_path, found, pd.DataFrame(rows)).set_index(["scenario", "variant"])
    # sync_loading has an ideal variant: no analytic limit
    assert work.loc["sync_loading", "limit_ms_per_step"].isna().all()
    limit = work.loc[("kernel_flood", "baseline"), "kernel_ms_per_step"]
    for variant, step_ms in (("baseline", 1000.0), ("cuda_graphs", 20.0)):
        r = work.loc[("kernel_flood", variant)]
        assert r["limit_ms_per_step"] == limit
        assert r["share_of_limit"] == pytest.approx(limit / step_ms)
