"""An nsys-GUI-style timeline of 2-3 steady-state steps, drawn from the SQLite export alone.

Rows, top to bottom, as the nsys GUI nests them: for each host thread (main thread first) its NVTX
ranges stacked by nesting depth (``step``, then ``data_load``/``h2d``/``forward``...) and a row of
its CUDA API calls coloured by category (launch / sync / memcpy / other); then one row per GPU
stream with kernels (NCCL kernels in their own colour), memcpys (pageable HtoD in a colour of its
own) and memsets. Gaps in the union of all GPU activity, the "white space", are shaded, and
their share of the shown span is :attr:`TimelineData.idle_share`.

:func:`load_timeline` does the SQL and arithmetic (it lives in :mod:`analysis.plots.timeline_data`
and is re-exported here), :func:`plot_timeline` draws one trace, :func:`plot_pair` draws a
baseline above a fix on the same time scale. Figures carry what they show: ``fig.timelines``
(list of :class:`TimelineData`) and ``fig.idle_share`` (first panel's).
"""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from analysis import trace as tr
from analysis.plots.numbers import share_fine
from analysis.plots.timeline_data import (
    API,
    GPU,
    GPU_ALL,
    NVTX,
    TimelineData,
    load_timeline,
    merge,
)
from bottlenecks import BACKWARD, DATA_LOAD, FORWARD, H2D, MEASURE, OPTIMIZER, STEP

__all__ = [
    "API_COLORS",
    "GPU_COLORS",
    "NVTX_COLORS",
    "TimelineData",
    "load_timeline",
    "plot_pair",
    "plot_timeline",
]

# --- colours -----------------------------------------------------------------------------------

NVTX_COLORS: dict[str, str] = {
    STEP: "#b8c4d6",
    DATA_LOAD: "#f2a541",
    H2D: "#b07cc6",
    FORWARD: "#5b8fd0",
    BACKWARD: "#3fa796",
    OPTIMIZER: "#8cc265",
    MEASURE: "#dddddd",
}
_NVTX_FALLBACK = ("#e6c36a", "#d98cb3", "#8fb3c9", "#c9a38f", "#a3c98f", "#b3a3d9")

API_COLORS: dict[str, str] = {
    "launch": "#4c72b0",
    "sync": "#c0392b",
    "memcpy": "#e67e22",
    "other": "#9e9e9e",
}
API_LABELS = {
    "launch": "API: kernel launch",
    "sync": "API: synchronize (host blocked)",
    "memcpy": "API: memcpy",
    "other": "API: other (memset, alloc, ...)",
}

GPU_COLORS: dict[str, str] = {
    "kernel": "#1f5fa8",
    "nccl": "#d6336c",
    "htod_pageable": "#ff2d2d",
    "htod": "#2ca02c",
    "dtoh": "#8e44ad",
    "copy_other": "#8c564b",
    "memset": "#7f7f7f",
    "graph": "#174a84",
    "busy": "#1f5fa8",
}
GPU_LABELS = {
    "kernel": "GPU: kernel",
    "nccl": "GPU: NCCL kernel",
    "htod_pageable": "GPU: HtoD copy, pageable",
    "htod": "GPU: HtoD copy, pinned",
    "dtoh": "GPU: DtoH copy",
    "copy_other": "GPU: other copy (DtoD ...)",
    "memset": "GPU: memset",
    "graph": "GPU: CUDA graph replay (its kernels, back to back)",
    "busy": "GPU: any stream busy",
}
IDLE_COLOR = "#ffd9d9"
IDLE_HATCH_COLOR = "#e8a0a0"
BUSY_COLOR = GPU_COLORS["busy"]


def nvtx_color(text: str) -> str:
    """The fixed colour of a harness phase, or a stable colour picked by the name's hash."""
    if text in NVTX_COLORS:
        return NVTX_COLORS[text]
    return _NVTX_FALLBACK[zlib.crc32(text.encode()) % len(_NVTX_FALLBACK)]


# --- drawing -----------------------------------------------------------------------------------

_ROW_IN = 0.32  # inches per row
_LEFT_IN = 2.3  # room for row labels
_FIG_W = 15.0
_LEGEND_COLS = 6


def _kind_color(kind: str) -> str:
    if kind.startswith("api:"):
        return API_COLORS[kind[4:]]
    return GPU_COLORS[kind]


#: Bar height, as a share of a row.
_BAR_H = 0.76

#: The ``gid`` of the drawn busy and idle areas of a row (``gpu-busy:<row>``, ...), so that what
#: a picture draws can be measured from the figure itself.
BUSY_GID, IDLE_GID, API_GID = "gpu-busy", "gpu-idle", "api-busy"


def coverage(starts: np.ndarray, ends: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """The share of each bin (``edges``) that the union of the intervals covers."""
    if not len(starts):
        return np.zeros(len(edges) - 1)
    s, e = merge(np.asarray(starts, float), np.asarray(ends, float))
    pts = np.ravel(np.column_stack([s, e]))
    cum = np.ravel(np.column_stack([np.r_[0.0, np.cumsum(e - s)[:-1]], np.cumsum(e - s)]))
    covered = np.interp(edges, pts, cum, left=0.0, right=float(cum[-1]))
    return np.clip(np.diff(covered) / np.diff(edges), 0.0, 1.0)


def _runs(edges: np.ndarray, shares: np.ndarray, base: np.ndarray | None = None) -> np.ndarray:
    """Rows (start, width, share, base) for the runs of bins of one share and one base (the
    part of the bar below it), to the percent; bins of no share left out."""
    base = np.zeros_like(shares) if base is None else base
    q, qb = np.round(shares, 2), np.round(base, 2)
    change = np.r_[True, (q[1:] != q[:-1]) | (qb[1:] != qb[:-1])]
    first = np.flatnonzero(change)
    last = np.r_[first[1:], len(q)]
    mean = np.add.reduceat(shares * np.diff(edges), first) / (edges[last] - edges[first])
    keep = mean > 1e-12
    return np.column_stack([edges[first], edges[last] - edges[first], mean, base[first]])[keep]


def _rects(row: int, runs: np.ndarray, *, top: bool = False) -> np.ndarray:
    """Rectangles of ``runs`` in row ``row``: from the bar's bottom (over its base) up, as tall
    as the share; ``top``: from there up to the bar's top (an idle share above a busy one)."""
    h, bottom = _BAR_H, row + _BAR_H / 2  # the y axis grows downwards
    x, w, sh, base = (runs[:, i] for i in range(4))
    y0 = bottom - h * (1 - sh) if top else bottom - h * base
    y1 = np.full_like(x, row - h / 2) if top else y0 - h * sh
    out = np.empty((len(runs), 4, 2))
    out[:, :, 0] = np.column_stack([x, x, x + w, x + w])
    out[:, :, 1] = np.column_stack([y0, y1, y1, y0])
    return out


def _density_row(ax: Axes, data: TimelineData, row: int, edges: np.ndarray, gid: str) -> np.ndarray:
    """Draw one row of calls or GPU work as pixel-wide bins as tall as the share of their time
    it was busy, kinds stacked; returns the row's busy share per bin."""
    bars = data.bars[data.bars["row"] == row]
    total = np.zeros(len(edges) - 1)
    for kind, grp in bars.groupby("kind", sort=False):
        sh = coverage(grp["start_ms"].to_numpy(float), grp["end_ms"].to_numpy(float), edges)
        sh = np.minimum(sh, 1.0 - total)
        runs = _runs(edges, sh, total)
        if len(runs):
            color = BUSY_COLOR if kind == "busy" else _kind_color(str(kind))
            ax.add_collection(PolyCollection(_rects(row, runs), facecolors=color, linewidths=0,
                                             antialiased=False, zorder=2, gid=f"{gid}:{row}"))  # fmt: skip
        total += sh
    return total


def _gpu_block(ax: Axes, data: TimelineData, ms_per_px: float) -> None:
    """The GPU rows over the steps' GPU span: each row's work by its busy share per pixel, and
    in the row that holds the union (the only stream, else ``all streams``) the idle share
    above it, hatched. Nothing is drawn outside the span: other steps' work runs there."""
    span = data.gpu_range_ms
    rows = [i for i, g in enumerate(data.groups) if g in (GPU, GPU_ALL)]
    if span is None or not rows:
        return
    lo, hi = span
    edges = np.arange(lo, hi + ms_per_px, ms_per_px)
    edges[-1] = hi
    if len(edges) < 2:
        return
    union_row = next((i for i in rows if data.groups[i] == GPU_ALL), rows[0])
    for row in rows:
        busy = _density_row(ax, data, row, edges, BUSY_GID)
        if row == union_row:
            idle = _runs(edges, 1.0 - busy)
            ax.add_collection(PolyCollection(
                _rects(row, idle, top=True), facecolors=IDLE_COLOR, edgecolors=IDLE_HATCH_COLOR,
                hatch="////", linewidths=0, antialiased=False, zorder=1, gid=f"{IDLE_GID}:{row}"))  # fmt: skip
    if lo > 0.15 * ax.get_xlim()[1]:
        ax.text(lo / 2, (min(rows) + max(rows)) / 2, "work launched outside these steps:\nnot drawn",
                ha="center", va="center", fontsize=7.5, style="italic", color="#888888")  # fmt: skip


def _host_block(ax: Axes, data: TimelineData, ms_per_px: float) -> None:
    """NVTX ranges as bars (at least a pixel wide: there are few), CUDA API rows by their busy
    share per pixel over the shown steps."""
    edges = np.arange(0.0, data.host_ms + ms_per_px, ms_per_px)
    for i, g in enumerate(data.groups):
        if g == API and len(edges) > 1:
            _density_row(ax, data, i, edges, API_GID)
    nvtx = data.bars[data.bars["kind"] == "nvtx"]
    h = _BAR_H
    for row, grp in nvtx.groupby("row", sort=False):
        starts = grp["start_ms"].to_numpy(float)
        widths = np.maximum(grp["end_ms"].to_numpy(float) - starts, ms_per_px * 0.8)
        texts = grp["text"].astype(str).to_numpy()
        for name in np.unique(texts):
            sel = texts == name
            ax.broken_barh(list(zip(starts[sel], widths[sel], strict=True)), (row - h / 2, h),
                           facecolors=nvtx_color(name), edgecolor="white", linewidth=0.6,
                           zorder=2)  # fmt: skip
        shown = grp["label"].fillna(grp["text"]).astype(str).to_numpy()
        for x, w, name in zip(starts, widths, shown, strict=True):
            if w / ms_per_px >= len(name) * 6.2 + 6:  # ~7.5 pt text at 100 dpi
                ax.text(x + w / 2, row, name, ha="center", va="center", fontsize=7.5,
                        color="#1a1a1a", clip_on=True, zorder=3)  # fmt: skip


def _frame(ax: Axes, data: TimelineData, ms_per_px: float) -> None:
    """Step bounds (the host's over the host rows, the GPU span's over the GPU rows), the faint
    band of wide GPU gaps over the host rows, separators between thread groups."""
    n = len(data.rows)
    gpu_rows = [i for i, g in enumerate(data.groups) if g in (GPU, GPU_ALL)]
    top_gpu = min(gpu_rows) - 0.5 if gpu_rows else n - 0.5
    wide = [(s, e - s) for s, e in data.idle if e - s >= 4 * ms_per_px]
    ax.broken_barh(wide, (-0.5, top_gpu + 0.5), facecolors="#fff2f2", linewidth=0, zorder=0)
    style = {"color": "#555555", "linestyle": (0, (2, 3)), "linewidth": 0.8, "zorder": 1}
    ax.vlines(data.step_bounds_ms, -0.5, top_gpu, **style)
    ax.vlines(data.gpu_bounds_ms, top_gpu, n - 0.5, **style)
    for i in range(1, n):
        new_block = data.rows[i] != "" and (
            (data.groups[i] in (GPU, GPU_ALL) and data.groups[i - 1] not in (GPU, GPU_ALL))
            or data.groups[i] == NVTX
        )
        ax.axhline(i - 0.5, color="#888888" if new_block else "#e3e3e3",
                   linewidth=0.8 if new_block else 0.5, zorder=1)  # fmt: skip
    if not data.has_gpu:
        ax.text(ax.get_xlim()[1] / 2, n - 1, "no GPU activity recorded", ha="center",
                va="center", fontsize=9, style="italic", color="#666666")  # fmt: skip


def _labels(ax: Axes, data: TimelineData, title: str | None) -> None:
    n = len(data.rows)
    ax.set_yticks(range(n))
    ax.set_yticklabels([_short(r) for r in data.rows], fontsize=8)
    ax.tick_params(axis="y", length=0)
    ax.tick_params(axis="x", labelsize=8)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    first = data.step_indices[0] if data.step_indices else None
    ax.set_xlabel(f"time since the start of step {first} on the host (ms)" if first is not None
                  else "time since the start of the measured window (ms)", fontsize=8)  # fmt: skip
    ax.set_title(f"{title} — {data.describe()}" if title else data.describe(), fontsize=10,
                 loc="left")  # fmt: skip
    gpu_rows = [i for i, g in enumerate(data.groups) if g in (GPU, GPU_ALL)]
    if data.idle_share is not None and gpu_rows:
        ax.text(1.002, (n - 1 - (min(gpu_rows) + max(gpu_rows)) / 2 + 0.5) / n,
                f"idle\n{share_fine(data.idle_share)}", transform=ax.transAxes, fontsize=8,
                color="#b03030", va="center", ha="left")  # fmt: skip


def draw_timeline(
    data: TimelineData, ax: Axes, *, xlim_ms: float | None = None, title: str | None = None
) -> set[str]:
    """Draw ``data`` into ``ax``; returns the legend keys used (colour kinds and NVTX names).

    Calls and GPU work are drawn per pixel, as tall as the share of the pixel's time they were
    busy: a stretch of a thousand 1 µs kernels 10 µs apart is a low strip over idle, not a
    solid bar. The GPU's idle share is hatched above the busy part of the row that holds the
    union of its streams."""
    n = len(data.rows)
    xmax = xlim_ms if xlim_ms is not None else data.span_ms
    pad = xmax * 0.005
    ax.set_xlim(-pad, xmax + pad)
    ax.set_ylim(n - 0.5, -0.5)
    fig = ax.get_figure()
    width_px = ax.get_window_extent().width or fig.get_figwidth() * fig.dpi
    ms_per_px = (xmax + 2 * pad) / width_px
    _frame(ax, data, ms_per_px)
    _host_block(ax, data, ms_per_px)
    _gpu_block(ax, data, ms_per_px)
    _labels(ax, data, title)
    return legend_keys(data)


_MAX_LABEL = 36  # characters of a row label that fit the left margin at 8 pt


def _short(label: str) -> str:
    """A row label cut to the margin: the thread name shortened, its tid and kind kept."""
    if len(label) <= _MAX_LABEL:
        return label
    head, sep, tail = label.rpartition(" (tid ")
    if sep:
        keep = _MAX_LABEL - len(sep + tail) - 1
        if keep >= 8:
            return head[:keep] + "…" + sep + tail
    return label[: _MAX_LABEL - 1] + "…"


def legend_keys(data: TimelineData) -> set[str]:
    """The legend entries a drawing of ``data`` needs: colour kinds, ``nvtx:<name>``, ``idle``."""
    b = data.bars
    keys = {str(k) for k in b.loc[b["kind"] != "nvtx", "kind"].unique()}
    keys |= {f"nvtx:{t}" for t in b.loc[b["kind"] == "nvtx", "text"].dropna().unique()}
    if data.idle_share:
        keys.add("idle")
    return keys


#: Most NVTX names listed one by one in the legend; past this, names other than the harness'
#: phases (a library's own ranges: DALI, NCCL, PyTorch's per-operator ranges) share one entry.
_MAX_OTHER_NVTX = 6


def _nvtx_entries(used: set[str]) -> list[tuple[str, str]]:
    """(label, colour) legend entries for the NVTX names in ``used``."""
    names = [k[5:] for k in sorted(used) if k.startswith("nvtx:")]
    known = [n for n in NVTX_COLORS if n in names]
    others = sorted(set(names) - set(known))
    out = [(f"NVTX: {n}", nvtx_color(n)) for n in known]
    if len(others) <= _MAX_OTHER_NVTX:
        out += [(f"NVTX: {n}", nvtx_color(n)) for n in others]
    else:
        out.append(
            (
                f"NVTX: {len(others)} other range names (library threads; named in the bar)",
                _NVTX_FALLBACK[0],
            )
        )
    return out


def _legend_rows(used: set[str]) -> int:
    n = len([k for k in used if not k.startswith("nvtx:")]) + len(_nvtx_entries(used))
    return max(1, -(-n // _LEGEND_COLS))


def _legend(fig: Figure, used: set[str]) -> None:
    handles: list[Patch] = []
    for label, color in _nvtx_entries(used):
        handles.append(Patch(facecolor=color, label=label))
    for cat in API_COLORS:
        if f"api:{cat}" in used:
            handles.append(Patch(facecolor=API_COLORS[cat], label=API_LABELS[cat]))
    for kind in GPU_COLORS:
        if kind in used:
            handles.append(Patch(facecolor=GPU_COLORS[kind], label=GPU_LABELS[kind]))
    if "idle" in used:
        handles.append(
            Patch(facecolor=IDLE_COLOR, edgecolor=IDLE_HATCH_COLOR, hatch="////", label="GPU idle")
        )
    if handles:
        fig.legend(
            handles=handles,
            loc="lower center",
            ncol=min(_LEGEND_COLS, len(handles)),
            fontsize=8,
            frameon=False,
            bbox_to_anchor=(0.5, 0.0),
        )


def _figure(
    heights: list[int], n_legend_rows: int = 3, *, top_in: float = 0.45
) -> tuple[Figure, list[Axes]]:
    """A figure with one timeline axes per entry of ``heights`` (rows), margins in inches."""
    gap_in, bottom_in = 0.95, 0.75 + 0.2 * n_legend_rows
    axes_in = [max(r, 1) * _ROW_IN for r in heights]
    total = top_in + bottom_in + sum(axes_in) + gap_in * (len(heights) - 1)
    fig = Figure(figsize=(_FIG_W, total), dpi=100)
    axes, y = [], total - top_in
    for a in axes_in:
        y -= a
        axes.append(
            fig.add_axes((_LEFT_IN / _FIG_W, y / total, 1 - (_LEFT_IN + 0.5) / _FIG_W, a / total))
        )
        y -= gap_in
    return fig, axes


def plot_timeline(
    trace_or_path: tr.Trace | str | Path | TimelineData,
    *,
    steps: int = 2,
    ax: Axes | None = None,
    title: str | None = None,
    xlim_ms: float | None = None,
) -> Figure:
    """A timeline picture of ``steps`` steady-state steps of one nsys export.

    Draws into ``ax`` when given (its figure is returned, with no legend added), else into a new
    figure sized to the number of rows. The figure gets ``timelines`` (the drawn
    :class:`TimelineData`) and ``idle_share`` attributes.
    """
    data = (
        trace_or_path
        if isinstance(trace_or_path, TimelineData)
        else load_timeline(trace_or_path, steps=steps)
    )
    if ax is None:
        fig, (ax,) = _figure([len(data.rows)], _legend_rows(legend_keys(data)))
        own = True
    else:
        fig = ax.get_figure()
        own = False
    draw_timeline(data, ax, xlim_ms=xlim_ms, title=title)
    if own:
        _legend(fig, legend_keys(data))
    fig.timelines = [*getattr(fig, "timelines", []), data]
    fig.idle_share = fig.timelines[0].idle_share
    return fig


def plot_pair(
    baseline: tr.Trace | str | Path | TimelineData,
    fix: tr.Trace | str | Path | TimelineData,
    *,
    steps: int = 2,
    labels: tuple[str, str] = ("baseline", "fix"),
    title: str | None = None,
    zoom: bool = False,
    note: str = "",
    out: str | Path | None = None,
) -> Figure:
    """Baseline above the fix on the SAME time scale, so the fix's shorter steps show as such.

    With ``zoom`` a third panel repeats the fix on its own time scale, to read its detail.
    ``note`` is written above the fix's panel, on the right (the report: the fix's measured
    speedup, as its tables write it; the profiled steps' lengths are no speedup).
    Saves to ``out`` (.png, .svg, ... by suffix) when given. ``fig.timelines`` holds the
    :class:`TimelineData` of the panels; ``fig.idle_share`` is the baseline's.
    """
    datas = [
        d if isinstance(d, TimelineData) else load_timeline(d, steps=steps) for d in (baseline, fix)
    ]
    b, f = datas
    panels = [(b, labels[0]), (f, f"{labels[1]} (same time scale)")]
    if zoom:
        panels.append((f, f"{labels[1]} (zoomed)"))
    used = legend_keys(b) | legend_keys(f)
    fig, axes = _figure(
        [len(d.rows) for d, _ in panels], _legend_rows(used), top_in=0.8 if title else 0.45
    )
    xmax = max(b.span_ms, f.span_ms)
    for i, (ax, (d, label)) in enumerate(zip(axes, panels, strict=True)):
        draw_timeline(d, ax, xlim_ms=xmax if i < 2 else None, title=label)
    if note:
        axes[1].annotate(note, xy=(1.0, 1.0), xycoords="axes fraction", xytext=(0, 20),
                         textcoords="offset points", fontsize=9, va="bottom", ha="right",
                         color="#333333")  # fmt: skip
    if title:
        fig.text(0.005, 1 - 0.1 / fig.get_figheight(), title, fontsize=13, va="top", weight="bold")
    _legend(fig, used)
    fig.timelines = datas
    fig.idle_share = b.idle_share
    if out is not None:
        fig.savefig(out)
    return fig
