"""The speedup matrix faceted by GPU: the same scenarios x fixes, one panel per run.

``runs_by_label`` maps a facet label (the GPU, e.g. ``h100 · full``) to that run's table
(``runs.csv``). Every panel gets the same rows, columns and colour scale, so a cell can be
compared across panels by eye; :func:`compare_cells` is the long table behind it and
:func:`compare_forest` draws the same numbers as points with their 95% CIs on one axis.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis.plots.matrix import draw_matrix, matrix_layout, matrix_norm, matrix_table
from analysis.plots.numbers import speedup_ci

__all__ = ["compare_cells", "compare_forest", "compare_matrix", "compare_wide"]

_MARKERS = ("o", "s", "D", "^", "v", "P")
_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


def compare_cells(runs_by_label: dict[str, pd.DataFrame], columns: str = "auto") -> pd.DataFrame:
    """Long table: gpu, scenario, column, variant, speedup, ci_low, ci_high, status, text.

    Rows and columns are the union over all runs (in first-seen order); a pair missing from one
    run is ``n/a`` there.
    """
    if not runs_by_label:
        raise ValueError("nothing to compare")
    both = pd.concat(list(runs_by_label.values()), ignore_index=True)
    layout = matrix_layout(both, columns)
    union = matrix_table(both, layout)
    scenarios = list(dict.fromkeys(union["scenario"]))
    cols = list(dict.fromkeys(union["column"]))
    parts = []
    for label, runs in runs_by_label.items():
        cells = matrix_table(runs, layout).set_index(["scenario", "column"])
        full = cells.reindex(
            pd.MultiIndex.from_product([scenarios, cols], names=["scenario", "column"])
        )
        absent = full["text"].isna()
        full.loc[absent, ["variant", "status", "text"]] = ["", "n/a", "n/a"]
        parts.append(full.reset_index().assign(gpu=label))
    out = pd.concat(parts, ignore_index=True)
    out["layout"] = layout
    return out[
        [
            "gpu",
            "scenario",
            "column",
            "variant",
            "speedup",
            "ci_low",
            "ci_high",
            "status",
            "text",
            "layout",
        ]
    ]


def compare_wide(cells: pd.DataFrame) -> pd.DataFrame:
    """One row per scenario x column, one ``speedup [CI]`` text column per GPU (for Markdown)."""

    def text(r: pd.Series) -> str:
        if pd.isna(r["speedup"]):
            return str(r["status"])
        return speedup_ci(r["speedup"], r["ci_low"], r["ci_high"])

    c = cells.assign(shown=cells.apply(text, axis=1))
    gpus = list(dict.fromkeys(c["gpu"]))
    wide = c.pivot_table(
        index=["scenario", "column"], columns="gpu", values="shown", aggfunc="first", sort=False
    )
    names = c.pivot_table(
        index=["scenario", "column"], columns="gpu", values="variant", aggfunc="first", sort=False
    )
    wide = wide.reindex(columns=gpus)
    variant = names.apply(lambda r: next((v for v in r if isinstance(v, str) and v), ""), axis=1)
    order = list(dict.fromkeys(zip(c["scenario"], c["column"], strict=True)))
    wide = wide.reindex(pd.MultiIndex.from_tuples(order, names=["scenario", "column"]))
    wide.insert(0, "variant", variant.reindex(wide.index).fillna(""))
    absent = (wide[gpus] == "n/a").all(axis=1)  # a pair that exists in none of the runs
    return wide[~absent].reset_index()


def compare_matrix(
    runs_by_label: dict[str, pd.DataFrame],
    *,
    columns: str = "auto",
    title: str | None = None,
    labels: dict[str, str] | None = None,
) -> Figure:
    """One speedup heatmap per GPU, same rows, columns and colour scale.

    Side by side while they fit 16 inches, else stacked (one panel per row, shared columns).
    """
    cells = compare_cells(runs_by_label, columns)
    gpus = list(dict.fromkeys(cells["gpu"]))
    n_rows = cells["scenario"].nunique()
    n_cols = cells["column"].nunique()
    lines = 3 if cells["layout"].iloc[0] == "slot" else 2
    panel_w = max(3.6, 1.75 * n_cols + 0.6)
    panel_h = max(1.6, (0.28 * lines + 0.3) * n_rows + 1.0)
    side = panel_w * len(gpus) + 3.4 <= 16
    if side:
        size = (panel_w * len(gpus) + 3.4, panel_h + 1.0)
    else:
        size = (panel_w + 3.6, (panel_h + 0.3) * len(gpus) + 0.8)
    fig = Figure(figsize=size, dpi=100, layout="constrained")
    grid = fig.subplots(1 if side else len(gpus), len(gpus) if side else 1, squeeze=False)
    axes = list(grid[0] if side else grid[:, 0])
    norm = matrix_norm(cells["speedup"])
    for i, (ax, gpu) in enumerate(zip(axes, gpus, strict=True)):
        part = cells[cells["gpu"] == gpu]
        draw_matrix(part, ax, norm=norm, labels=labels, cbar=i == len(gpus) - 1 if side else True)
        ax.set_title(gpu, fontsize=11, weight="bold", loc="left", pad=6 if not side else 22)
        ax.set_xlabel("")
        ax.set_ylabel("scenario" if (i == 0 or not side) else "")
        if side and i:
            ax.tick_params(axis="y", labelleft=False)
        if not side and i:
            ax.tick_params(axis="x", labeltop=False)
    fig.suptitle(
        title or "Speedup over baseline by GPU (95% CI; same colour scale in every panel)",
        x=0.01,
        ha="left",
        fontsize=12,
    )
    fig.cells = cells
    return fig


def compare_forest(cells: pd.DataFrame, *, title: str | None = None) -> Figure:
    """Every scenario x fix as a row, one marker per GPU with its 95% CI, log speedup axis."""
    ok = cells[cells["speedup"].notna()]
    # Rows with a number on at least one GPU (pairs that exist nowhere are left out).
    keys = list(dict.fromkeys(zip(ok["scenario"], ok["column"], strict=True)))
    keys = [
        k for k in dict.fromkeys(zip(cells["scenario"], cells["column"], strict=True)) if k in keys
    ]
    gpus = list(dict.fromkeys(cells["gpu"]))
    fig = Figure(
        figsize=(10.5, max(2.6, 0.42 * len(keys) * max(1, len(gpus)) ** 0.5 + 1.6)),
        dpi=100,
        layout="constrained",
    )
    ax = fig.add_subplot()
    if ok.empty:
        ax.text(
            0.5, 0.5, "no speedups to compare", ha="center", va="center", transform=ax.transAxes
        )
        ax.set_axis_off()
        return fig
    step = 0.7 / max(1, len(gpus))
    for g, gpu in enumerate(gpus):
        d = ok[ok["gpu"] == gpu]
        ys = [
            keys.index((s, c)) + (g - (len(gpus) - 1) / 2) * step
            for s, c in zip(d["scenario"], d["column"], strict=True)
        ]
        x = d["speedup"].to_numpy(float)
        lo = np.where(d["ci_low"].notna(), d["ci_low"], x).astype(float)
        hi = np.where(d["ci_high"].notna(), d["ci_high"], x).astype(float)
        ax.errorbar(
            x, ys, xerr=[np.clip(x - lo, 0, None), np.clip(hi - x, 0, None)],
            ls="", marker=_MARKERS[g % len(_MARKERS)], color=_COLORS[g % len(_COLORS)],
            ms=7, capsize=3, label=gpu, zorder=3,
        )  # fmt: skip
    labels = []
    for s, c in keys:
        names = cells[(cells["scenario"] == s) & (cells["column"] == c)]["variant"]
        v = next((n for n in names if isinstance(n, str) and n), "")
        labels.append(f"{s} · {v}" if v and v != c else f"{s} · {c}")
    ax.set_yticks(range(len(keys)))
    ax.set_yticklabels(labels, fontsize=9)
    ax.set_ylim(len(keys) - 0.5, -0.5)
    ax.set_xscale("log")
    ax.axvline(1.0, color="#555555", ls=":", lw=1)
    vals = ok["speedup"].to_numpy(float)
    lo_all = np.nanmin(np.r_[vals, ok["ci_low"].dropna().to_numpy(float), 1.0])
    hi_all = np.nanmax(np.r_[vals, ok["ci_high"].dropna().to_numpy(float), 1.0])
    ax.set_xlim(lo_all / 1.4, hi_all * 1.4)
    ticks = [
        t
        for t in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200)
        if lo_all / 1.4 <= t <= hi_all * 1.4
    ]
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{t:g}x" for t in ticks])
    ax.xaxis.set_minor_formatter("")
    for i in range(1, len(keys)):
        ax.axhline(i - 0.5, color="#eeeeee", lw=0.8, zorder=0)
    ax.grid(axis="x", color="#eeeeee", zorder=0)
    ax.set_xlabel("speedup over the baseline of the same run (log scale; bars: 95% CI)")
    ax.legend(loc="lower right", fontsize=9, frameon=True, framealpha=0.9)
    ax.set_title(title or "Speedup by GPU", fontsize=11, loc="left")
    fig.n_points = len(ok)
    return fig
