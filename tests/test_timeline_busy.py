"""Timelines that say what the numbers say (issue 51): each panel draws the GPU work launched
inside its steps, where it ran, and draws idle as idle, so the busy share a reader sees is the
busy share gpu_work.csv measured.

On real exports of kernel_flood: the baseline launches ~2,300 kernels of ~1 µs a step (the GPU
~92% idle; it was drawn as a solid bar), and ``cuda_graphs`` replays one graph a step that the
host launches ~90 ms ahead of the GPU (its panel showed no GPU work, "GPU idle 100%"). The
busy share is measured three ways: from the figure's drawn areas, from its pixels, and against
``gpu_work.csv`` of the run the export comes from (``analysis/gpu_work.py``, a computation of
its own over the whole measured window).
"""

from __future__ import annotations

import tarfile

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from analysis.plots.timeline import (
    _BAR_H,
    BUSY_GID,
    GPU_COLORS,
    IDLE_GID,
    plot_pair,
    plot_timeline,
)
from analysis.plots.timeline_data import GPU, GPU_ALL, load_timeline
from tests._fixtures import sqlite_fixture
from tests.conftest import DATA

#: (export, the run's gpu_work.csv, its row): the H100 run of 822d3ef (the export cut to its
#: first 5 steps; the tables in tests/data/h100_run_tables) and the H200 run of 1ee4050
#: (cuda_graphs cut to its measured window, the baseline to 3 of its steps; the tables in
#: tests/data/h200_run_tables.tar.xz).
CASES = {
    "h100 baseline": ("h100/h100_kernel_flood__baseline", "h100", "baseline"),
    "h200 baseline": ("h200/h200_kernel_flood__baseline", "h200", "baseline"),
    "h200 cuda_graphs": ("h200/h200_kernel_flood__cuda_graphs", "h200", "cuda_graphs"),
}


def _gpu_work(run: str, variant: str, tmp_path_factory) -> dict:
    if run == "h100":
        work = pd.read_csv(DATA / "h100_run_tables" / "gpu_work.csv")
    else:
        root = tmp_path_factory.mktemp("h200")
        with tarfile.open(DATA / "h200_run_tables.tar.xz") as tar:
            tar.extractall(root, filter="data")
        work = pd.read_csv(root / "h200_run_tables" / "gpu_work.csv")
    row = work[(work["scenario"] == "kernel_flood") & (work["variant"] == variant)]
    return row.iloc[0].to_dict()


def drawn_share(ax, data, gid: str) -> float:
    """The area the figure draws under ``gid`` (busy or idle), over the GPU span's row area."""
    lo, hi = data.gpu_range_ms
    area = 0.0
    for c in ax.collections:
        if (c.get_gid() or "").startswith(gid + ":"):
            for path in c.get_paths():
                v = path.vertices
                area += np.ptp(v[:, 0]) * np.ptp(v[:, 1])
    return area / (_BAR_H * (hi - lo))


def pixel_share(fig, ax, data) -> float:
    """The share of the pixels of the row holding the GPU's union, over the GPU span, that are
    painted in a GPU-busy colour, in the rendered picture."""
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    img = np.asarray(canvas.buffer_rgba())[:, :, :3].astype(int)
    rows = [i for i, g in enumerate(data.groups) if g in (GPU, GPU_ALL)]
    row = next((i for i in rows if data.groups[i] == GPU_ALL), rows[0])
    lo, hi = data.gpu_range_ms
    (x0, y0), (x1, y1) = ax.transData.transform([(lo, row + _BAR_H / 2), (hi, row - _BAR_H / 2)])
    top, bottom = sorted((img.shape[0] - y0, img.shape[0] - y1))
    band = img[round(top) : round(bottom), round(x0) : round(x1)]
    hit = np.zeros(band.shape[:2], dtype=bool)
    for kind in ("kernel", "graph", "busy"):
        rgb = np.array([int(GPU_COLORS[kind][i : i + 2], 16) for i in (1, 3, 5)])
        hit |= np.abs(band - rgb).sum(axis=2) < 40
    return float(hit.mean())


@pytest.mark.parametrize("case", list(CASES))
def test_the_drawn_busy_share_is_the_measured_one(case, tmp_path_factory):
    """The panel's busy share, as drawn (areas and pixels), is its data's, and its busy time
    per step and idle share are gpu_work.csv's: the baseline ~92% idle, cuda_graphs ~100%
    busy."""
    name, run, variant = CASES[case]
    fig = plot_timeline(sqlite_fixture(name))
    ax, data = fig.axes[0], fig.timelines[0]
    busy = 1 - data.idle_share
    assert drawn_share(ax, data, BUSY_GID) == pytest.approx(busy, abs=1e-6)
    assert drawn_share(ax, data, IDLE_GID) == pytest.approx(data.idle_share, abs=1e-6)
    assert pixel_share(fig, ax, data) == pytest.approx(busy, abs=0.03)
    work = _gpu_work(run, variant, tmp_path_factory)
    per_step = work["window_ms"] / work["steps"]
    csv_busy = work["gpu_busy_ms_per_step"] / per_step
    # two steps against the window's mean: the GPU's busy time per step holds within 3%, the
    # idle share within 3 points (the two steps' lengths vary more than their work)
    assert busy * data.gpu_ms / len(data.step_indices) == pytest.approx(
        work["gpu_busy_ms_per_step"], rel=0.03
    )
    assert busy == pytest.approx(csv_busy, abs=0.03)
    if variant == "baseline":
        assert 0.88 < data.idle_share < 0.95
    else:
        assert data.idle_share < 0.01


@pytest.mark.parametrize("gpu", ["h100", "h200"])
def test_a_solid_looking_flood_is_drawn_low(gpu):
    """Thousands of kernels a step, each narrower than a pixel: no pixel column of the
    baseline's GPU row is drawn more than half full, where they all were before."""
    data = load_timeline(sqlite_fixture(f"{gpu}/{gpu}_kernel_flood__baseline"))
    fig = plot_timeline(data)
    heights = []
    for c in fig.axes[0].collections:
        if (c.get_gid() or "").startswith(BUSY_GID + ":"):
            heights += [np.ptp(p.vertices[:, 1]) / _BAR_H for p in c.get_paths()]
    assert len(heights) > 100 and float(np.median(heights)) < 0.2
    assert max(heights) < 0.5


def test_graph_replays_are_drawn_where_they_run():
    """cuda_graphs: the panel holds the replays its steps launched, on the GPU's time, tens of
    ms after the host's steps, and says how far behind the host they ran; nothing is drawn on
    the GPU rows before its span (other steps' work runs there)."""
    for name in ("h200/h200_kernel_flood__cuda_graphs", "h100/h100_kernel_flood__cuda_graphs"):
        data = load_timeline(sqlite_fixture(name))
        gpu = data.bars[data.bars["kind"] == "graph"]
        assert len(gpu) == len(data.step_indices)  # one replay a step
        lo, hi = data.gpu_range_ms
        assert data.host_ms < 2 and lo > 10 * data.host_ms and data.lag_ms > 50
        assert gpu["start_ms"].min() >= lo and gpu["end_ms"].max() <= hi
        assert data.gpu_ms > 2 * 4.0  # two steps of a ~4-5 ms replay each
        assert "run" in data.describe() and "after launch" in data.describe()
        fig = plot_pair(sqlite_fixture("h100/h100_kernel_flood__baseline"), data)
        for c in fig.axes[1].collections:
            if (c.get_gid() or "").startswith((BUSY_GID, IDLE_GID)):
                xs = np.concatenate([p.vertices[:, 0] for p in c.get_paths()])
                assert xs.min() >= lo - 1e-9
