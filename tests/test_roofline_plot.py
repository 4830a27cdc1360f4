"""The roofline picture renders from the row's real tables (the first H200 run's pages, re-read
by today's code): one panel per variant, baseline first, the step's limit and the time's split
by bound in the panel's title, each kernel where its two shares put it, hollow where no pipe
was busy, the heaviest named (a GEMM by its type and pipe)."""

from __future__ import annotations

import io
import re

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from analysis.plots.roofline import roofline_figure, roofline_figures
from tests import _ncu_dev1


@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> tuple[pd.DataFrame, pd.DataFrame]:
    return _ncu_dev1.recollect(_ncu_dev1.extract(tmp_path_factory.mktemp("ncu")))


def _panels(fig):
    return [ax for ax in fig.axes if ax.get_title()]


def test_a_panel_per_variant_with_its_limit_and_split(tables) -> None:
    kernels, limits = tables
    fig = roofline_figure(kernels, "fp32_matmul", limits)
    axes = _panels(fig)
    assert [ax.get_title().splitlines()[0] for ax in axes] == [
        "baseline", "tf32", "bf16_autocast", "ideal"]  # fmt: skip
    base = limits.set_index(["scenario", "variant"]).loc[("fp32_matmul", "baseline")]
    title = axes[0].get_title()
    assert f"roofline {base['roofline_ms_per_step']:.3g} ms/step" in title
    assert "compute 100% · memory 0% · latency 0% · tensor 0%" in title
    ideal = re.search(r"tensor (\d+)%", axes[3].get_title())
    assert ideal and int(ideal.group(1)) == round(100 * limits.set_index("variant").loc[
        "ideal", "tensor_pipe_share"].iloc[0])  # fmt: skip


def test_each_kernel_sits_at_its_two_shares(tables) -> None:
    kernels, limits = tables
    fig = roofline_figure(kernels, "unfused_chain", limits)
    base = _panels(fig)[0]
    rows = kernels[(kernels["scenario"] == "unfused_chain") & (kernels["variant"] == "baseline")]
    points = np.vstack([c.get_offsets() for c in base.collections if len(c.get_offsets())])
    expected = rows[["memory_throughput_pct", "sm_throughput_pct"]].to_numpy()
    assert np.allclose(points, expected)
    hollow = [c for c in base.collections if len(c.get_offsets())
              and np.allclose(c.get_facecolor()[:, 3], 0)]  # fmt: skip
    assert len(hollow) == int((rows["pipe"] == "none").sum()) == 4  # the chain: no pipe busy
    labels = [t.get_text() for t in base.texts]
    assert "GEMM · tensor 10%" in labels  # nvjet names no type; its pipe says what it did
    assert sum(t.startswith("vectorized_elementwise_ke") for t in labels) == 2
    fp32 = [t.get_text() for t in _panels(roofline_figure(kernels, "fp32_matmul", limits))[0].texts]
    assert "GEMM fp32 · fma 17%" in fp32


def test_it_renders_and_every_scenario_gets_one(tables) -> None:
    kernels, limits = tables
    figs = roofline_figures(kernels, limits)
    assert list(figs) == list(dict.fromkeys(kernels["scenario"]))
    buf = io.BytesIO()
    FigureCanvasAgg(figs["nchw_conv"]).print_png(buf)
    assert buf.getvalue()[:8] == b"\x89PNG\r\n\x1a\n" and len(buf.getvalue()) > 10_000
    assert roofline_figures(pd.DataFrame()) == {}
    with pytest.raises(ValueError):
        roofline_figure(kernels, "nope")
