"""The pictures: nsys-style timelines from the fixture exports, and the speedup matrix."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from analysis import trace as tr
from analysis.plots import load_timeline, plot_pair, plot_timeline, speedup_matrix
from tests._fixtures import sqlite_fixture
from tests.conftest import DATA

GPU_BASE = sqlite_fixture("gpu_nsys2025_sync_loading")
GPU_FIX = sqlite_fixture("gpu_nsys2025_sync_loading_async_dataloader")
CPU_BASE = sqlite_fixture("cpu_nsys2022_sync_loading")
CPU_FIX = sqlite_fixture("cpu_nsys2022_sync_loading_async_dataloader")
RUNS = DATA / "h100_sync_loading" / "runs.csv"  # an earlier H100 run, kept as a fixture


def _png(fig, path) -> np.ndarray:
    """Save ``fig`` as PNG, read it back with PIL and return its pixels (asserting it decodes)."""
    fig.savefig(path)
    with Image.open(path) as img:
        img.verify()
    with Image.open(path) as img:
        assert img.format == "PNG"
        pixels = np.asarray(img.convert("RGB"), dtype=float)
    assert pixels.shape[0] > 100 and pixels.shape[1] > 100
    return pixels


def _labels(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.get_yticklabels()]


def _texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts] + [t.get_text() for t in fig.texts]


@pytest.mark.parametrize("path", [GPU_BASE, GPU_FIX], ids=["baseline", "async_dataloader"])
def test_gpu_timeline_rows_and_image(path, tmp_path):
    fig = plot_timeline(path, title=path.stem)
    labels = _labels(fig)
    assert any(lbl.startswith("main thread") and "NVTX" in lbl for lbl in labels), labels
    assert "CUDA API · main" in labels, labels
    assert any(lbl.startswith("GPU 0 · stream") for lbl in labels), labels
    data = fig.timelines[0]
    assert len(data.step_indices) == 2
    # Steady-state steps from inside the measure window, the first shown at t=0.
    w0, w1 = tr.window(tr.open_trace(path))
    assert w0 <= data.t0_ns < data.t1_ns <= w1
    assert set(data.bars["text"].dropna()) >= {"step", "data_load", "forward", "backward"}
    assert data.bars["start_ms"].min() >= 0 and data.bars["end_ms"].max() <= data.span_ms + 1e-9
    pixels = _png(fig, tmp_path / "timeline.png")
    assert pixels.std() > 20, "the picture looks blank"
    assert fig.legends and fig.legends[0].get_texts()


def _projected_idle(path, data) -> float:
    """The GPU's idle share over the shown steps, recomputed in SQL: the kernels, copies and
    memsets whose correlation id is that of a CUDA API call inside one of the steps (and the
    step before them, whose work's end starts the span), unioned by a +1/-1 sweep."""
    import sqlite3

    db = sqlite3.connect(path)
    steps = db.execute(
        'SELECT n.start, n."end" FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId '
        "WHERE s.value = 'step' ORDER BY n.start"
    ).fetchall()
    first = next(i for i, (s0, _) in enumerate(steps) if s0 == data.t0_ns)
    shown = steps[first : first + len(data.step_indices)]

    def work(ranges):
        out = []
        for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                  "CUPTI_ACTIVITY_KIND_MEMSET"):  # fmt: skip
            for lo, hi in ranges:
                out += db.execute(
                    f'SELECT g.start, g."end" FROM {t} g JOIN CUPTI_ACTIVITY_KIND_RUNTIME r '
                    "ON r.correlationId = g.correlationId WHERE r.start >= ? AND r.start <= ?",
                    (lo, hi),
                ).fetchall()
        return out

    busy = work(shown)
    t0 = max(data.t0_ns, max((e for _, e in work(steps[first - 1 : first])), default=0))
    t1 = max(e for _, e in busy)
    assert (t0, t1) == (data.gpu_t0_ns, data.gpu_t1_ns)
    busy = [(max(s, t0), e) for s, e in busy if e > t0]
    times = np.array([t for s, e in busy for t in (s, e)] + [t0, t1])
    steps_ = np.array([d for _ in busy for d in (1, -1)] + [0, 0])
    order = np.lexsort((-steps_, times))
    times, running = times[order], np.cumsum(steps_[order])
    return float(np.sum(np.diff(times)[running[:-1] == 0]) / (t1 - t0))


def test_idle_share_baseline_larger_than_fix():
    """The idle share is the gaps in the GPU work the shown steps launched, over that work's
    span, recomputed here from the export in SQL."""
    base = load_timeline(GPU_BASE)
    fix = load_timeline(GPU_FIX)
    assert base.idle_share is not None and fix.idle_share is not None
    assert 0 <= fix.idle_share < base.idle_share <= 1
    assert base.idle_share > 0.8  # JPEG decode on the training thread: GPU mostly idle
    for path, data in ((GPU_BASE, base), (GPU_FIX, fix)):
        assert data.idle_share == pytest.approx(_projected_idle(path, data), abs=1e-9)
        assert sum(e - s for s, e in data.idle) == pytest.approx(data.idle_share * data.gpu_ms)


def test_baseline_shows_long_data_load_over_an_idle_gpu():
    data = load_timeline(GPU_BASE)
    loads = data.bars[data.bars["text"] == "data_load"]
    longest = (loads["end_ms"] - loads["start_ms"]).max()
    assert longest > 0.4 * data.span_ms / len(data.step_indices)
    pageable = data.bars[data.bars["kind"] == "htod_pageable"]
    assert not pageable.empty  # the pageable HtoD copies have their own colour


def test_pair_same_time_scale(tmp_path):
    out = tmp_path / "pair.png"
    fig = plot_pair(GPU_BASE, GPU_FIX, labels=("baseline", "async_dataloader"), out=out)
    assert out.exists()
    top, bottom = fig.axes[:2]
    assert top.get_xlim() == bottom.get_xlim()
    base, fix = fig.timelines
    assert fix.span_ms < base.span_ms / 5
    assert fig.idle_share == base.idle_share
    assert not any("shorter than" in t for t in _texts(fig))  # profiled spans are no speedup
    noted = plot_pair(GPU_BASE, GPU_FIX, note="async_dataloader: 16.4x [11.8-27.0] faster")
    assert "async_dataloader: 16.4x [11.8-27.0] faster" in _texts(noted)
    assert _png(fig, tmp_path / "again.png").std() > 20
    svg = tmp_path / "pair.svg"
    plot_pair(GPU_BASE, GPU_FIX, zoom=True, out=svg)
    assert svg.read_text().lstrip().startswith(("<?xml", "<svg"))


@pytest.mark.parametrize("path", [CPU_BASE, CPU_FIX], ids=["baseline", "async_dataloader"])
def test_cpu_timeline_without_cuda_tables(path, tmp_path):
    fig = plot_timeline(path, steps=3)
    labels = _labels(fig)
    assert any(lbl.startswith("main thread") and "NVTX" in lbl for lbl in labels), labels
    assert not any(lbl.startswith("CUDA API") for lbl in labels)
    assert "no GPU activity recorded" in _texts(fig)
    assert fig.idle_share is None
    assert {"step", "data_load"} <= set(fig.timelines[0].bars["text"].dropna())
    assert _png(fig, tmp_path / "cpu.png").std() > 20


def test_matrix_on_reference_run(tmp_path):
    runs = pd.read_csv(RUNS)
    fig = speedup_matrix(runs)
    assert fig.matrix.shape == (1, 3)
    assert list(fig.matrix.columns) == ["async_dataloader", "dali", "ideal"]
    texts = _texts(fig)
    assert "44.0x\n[37.9-50.9]" in texts, texts
    assert any("15.0x" in t for t in texts) and any("55.6x" in t for t in texts)
    assert _png(fig, tmp_path / "matrix.png").std() > 20


def test_matrix_greys_absent_and_failed_pairs():
    runs = pd.read_csv(RUNS)
    other = runs[runs["variant"] != "dali"].assign(scenario="forced_sync")
    other.loc[other["variant"] == "ideal", "status"] = "failed"
    fig = speedup_matrix(pd.concat([runs, other]))
    assert fig.matrix.shape == (2, 3)
    assert np.isnan(fig.matrix.loc["forced_sync", "dali"])
    assert np.isnan(fig.matrix.loc["forced_sync", "ideal"])
    texts = _texts(fig)
    assert "n/a" in texts and "failed" in texts


def test_matrix_of_baselines_only_says_so(tmp_path):
    """A run that holds only a baseline (`scenario.X.variants=[baseline]`) has no column."""
    runs = pd.read_csv(RUNS)
    fig = speedup_matrix(runs[runs["kind"] == "baseline"])
    assert fig.matrix.shape[1] == 0
    assert "no fix or ideal in this run" in _texts(fig)
    assert _png(fig, tmp_path / "empty.png").std() > 5


def test_matrix_when_nothing_finished():
    runs = pd.read_csv(RUNS)
    runs.loc[runs["kind"] != "baseline", "status"] = "skipped"
    fig = speedup_matrix(runs)
    assert fig.matrix.isna().all().all()
    assert _texts(fig).count("skipped") == len(runs) - 1


def test_expectation_figure_colours_follow_the_states():
    """Green where a detector did what is expected of it on that variant, red where not, grey
    where it could not judge; the overall column is the variant's outcome."""
    from analysis.findings import CLASSES
    from analysis.plots.diagnosis import expectation_figure
    from harness.report.diagnosis import expectation_table
    from harness.report.load import RunFolder

    exp = expectation_table(RunFolder.load(DATA / "h100_run_tables"))
    fig = expectation_figure(exp)
    out = fig.outcomes
    assert out.shape == (len(exp), len(CLASSES) + 1)
    for i, r in enumerate(exp.to_dict("records")):
        for j, k in enumerate(CLASSES):
            state = r[k]
            if state in ("not_judged", ""):  # "": a class the run predates
                assert out.iloc[i, j] == "notjudged"
            else:
                agrees = (state == "fired") == (k == r["expected"])
                assert out.iloc[i, j] == ("match" if agrees else "mismatch"), (r["variant"], k)
        assert out.iloc[i, -1] == r["outcome"]
    assert {"match", "mismatch"} <= set(out.to_numpy().ravel())


def test_probe_effect_with_and_without_interval(tmp_path):
    from analysis.plots.probe import probe_effect_figure

    runs = pd.read_csv(RUNS).drop(columns=["probe_effect_ci_low", "probe_effect_ci_high"])
    plain = probe_effect_figure(runs)
    assert "95% CI" not in plain.axes[0].get_xlabel()
    pe = runs["probe_effect"]
    with_ci = probe_effect_figure(
        runs.assign(probe_effect_ci_low=pe * 0.9, probe_effect_ci_high=pe * 1.2)
    )
    ax = with_ci.axes[0]
    assert "95% CI" in ax.get_xlabel()
    assert ax.get_xlim()[1] >= float((pe * 1.2).max())
    assert _png(with_ci, tmp_path / "probe.png").std() > 15
