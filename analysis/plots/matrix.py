"""The speedup matrix: scenarios x fixes (plus ``ideal``), each cell a speedup with its 95% CI.

Built from a run table (``runs.csv``): one row per scenario x variant with ``speedup``,
``speedup_ci_low``/``speedup_ci_high``, ``kind`` (baseline / fix / ideal) and ``status``.
Colour is log speedup centred on 1x (red = slower, green = faster). Cells where the pair does
not apply (no such variant for that scenario) or the variant did not finish (skipped, failed,
oom, ...) are grey and say why.

Columns: fix names differ per scenario, so there are two layouts. ``columns="variant"`` gives one
column per variant name (few scenarios, or scenarios sharing fix names; absent pairs are grey);
``columns="slot"`` gives ``fix 1``, ``fix 2``, ... and ``ideal``, each cell naming its variant
(many scenarios with fixes of their own, where one column per name would be mostly grey).
``"auto"`` picks ``slot`` when one column per name would grey out more cells than it fills.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.colors import Normalize, TwoSlopeNorm
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from analysis.plots.numbers import speedup_ci

__all__ = ["GREY", "matrix_layout", "matrix_norm", "matrix_table", "speedup_matrix"]

GREY = "#d9d9d9"
_TICKS_WIDE = (0.01, 0.03, 0.1, 0.3, 1, 3, 10, 30, 100, 300)
_TICKS_NARROW = (0.3, 0.5, 0.7, 1, 1.5, 2, 3)


def _kinds(runs: pd.DataFrame) -> pd.Series:
    if "kind" in runs:
        return runs["kind"].astype(str)
    # Without a kind column: ``baseline`` and ``ideal`` by name, everything else a fix.
    v = runs["variant"].astype(str)
    return v.where(v.isin(["baseline", "ideal"]), "fix")


def _fixes_by_scenario(runs: pd.DataFrame) -> tuple[list[str], dict[str, list[str]], set[str]]:
    """Scenarios in first-seen order, each one's fixes in table order, and the ideal variants."""
    kind = _kinds(runs)
    scenarios = list(dict.fromkeys(runs["scenario"].astype(str)))
    fixes: dict[str, list[str]] = {s: [] for s in scenarios}
    ideals: set[str] = set()
    for scen, var, k in zip(
        runs["scenario"].astype(str), runs["variant"].astype(str), kind, strict=True
    ):
        if k == "baseline" or var == "baseline":
            continue
        if k == "ideal" or var == "ideal":
            ideals.add(var)
        elif var not in fixes[scen]:
            fixes[scen].append(var)
    return scenarios, fixes, ideals


def matrix_layout(runs: pd.DataFrame, columns: str = "auto") -> str:
    """``variant`` or ``slot`` (see the module docstring); ``columns`` may force either."""
    if columns in ("variant", "slot"):
        return columns
    if columns != "auto":
        raise ValueError(f"columns must be 'auto', 'variant' or 'slot', got {columns!r}")
    _, fixes, _ = _fixes_by_scenario(runs)
    names = {v for vs in fixes.values() for v in vs}
    filled = sum(len(vs) for vs in fixes.values())
    greyed = len(fixes) * len(names) - filled
    return "slot" if greyed > filled else "variant"


def matrix_table(runs: pd.DataFrame, columns: str = "auto") -> pd.DataFrame:
    """Long table of the cells: scenario, column, variant, speedup, ci_low, ci_high, status, text.

    ``column`` is the matrix column (the variant name, or ``fix N``/``ideal`` in the slot
    layout); ``variant`` is the variant in the cell (empty where the pair does not apply).
    ``speedup`` is NaN where the cell is greyed (absent pair or a status other than ``ok``).
    """
    layout = matrix_layout(runs, columns)
    scenarios, fixes, ideals = _fixes_by_scenario(runs)
    ideal_cols = sorted(ideals) if layout == "variant" else (["ideal"] if ideals else [])
    if layout == "variant":
        cols = list(dict.fromkeys(v for s in scenarios for v in fixes[s])) + ideal_cols
    else:
        n = max((len(v) for v in fixes.values()), default=0)
        cols = [f"fix {i + 1}" for i in range(n)] + ideal_cols
    rows = []
    for scen in scenarios:
        mine = runs[runs["scenario"].astype(str) == scen]
        my_ideal = [v for v in mine["variant"].astype(str) if v in ideals]
        for col in cols:
            if layout == "variant":
                var = col
            elif col == "ideal":
                var = my_ideal[0] if my_ideal else ""
            else:
                i = int(col.split()[1]) - 1
                var = fixes[scen][i] if i < len(fixes[scen]) else ""
            sel = mine[mine["variant"].astype(str) == var] if var else mine.iloc[0:0]
            named = f"{var}\n" if layout == "slot" and col != "ideal" else ""
            if sel.empty:
                rows.append((scen, col, "", math.nan, math.nan, math.nan, "n/a", "n/a"))
                continue
            r = sel.iloc[-1]
            status = str(r.get("status", "ok")) if pd.notna(r.get("status", "ok")) else "ok"
            s = pd.to_numeric(r.get("speedup"), errors="coerce")
            lo = pd.to_numeric(r.get("speedup_ci_low"), errors="coerce")
            hi = pd.to_numeric(r.get("speedup_ci_high"), errors="coerce")
            if status != "ok" or pd.isna(s):
                why = status if status != "ok" else "no speedup"
                rows.append((scen, col, var, math.nan, math.nan, math.nan, status, named + why))
                continue
            text = named + speedup_ci(s, lo, hi, sep="\n")
            rows.append((scen, col, var, float(s), float(lo), float(hi), status, text))
    return pd.DataFrame(
        rows,
        columns=["scenario", "column", "variant", "speedup", "ci_low", "ci_high", "status", "text"],
    )


def _pivot(cells: pd.DataFrame, value: str) -> pd.DataFrame:
    scenarios = list(dict.fromkeys(cells["scenario"]))
    cols = list(dict.fromkeys(cells["column"]))
    return cells.pivot(index="scenario", columns="column", values=value).reindex(
        index=scenarios, columns=cols
    )


def matrix_norm(*speedups: pd.DataFrame | pd.Series | np.ndarray) -> TwoSlopeNorm:
    """The colour scale of one or several matrices: log10 speedup, symmetric around 1x."""
    vals = np.concatenate([np.asarray(s, dtype=float).ravel() for s in speedups] or [[]])
    vals = vals[np.isfinite(vals) & (vals > 0)]
    span = max(float(np.abs(np.log10(vals)).max()) if vals.size else 1.0, 0.1)
    return TwoSlopeNorm(vcenter=0.0, vmin=-span, vmax=span)


def draw_matrix(
    cells: pd.DataFrame,
    ax: Axes,
    *,
    norm: Normalize,
    labels: dict[str, str] | None = None,
    cbar: bool = True,
    fontsize: float = 9,
) -> None:
    """Draw the cells of :func:`matrix_table` into ``ax`` (``labels``: shown row names)."""
    mat = _pivot(cells, "speedup").astype(float)
    text = _pivot(cells, "text")
    logs = np.log10(mat.clip(lower=1e-3))
    ax.set_facecolor(GREY)
    if mat.size == 0:  # baselines only: no fix or ideal column to draw
        ax.text(0.5, 0.5, "no fix or ideal in this run", ha="center", va="center",
                transform=ax.transAxes, color="#555555")  # fmt: skip
        ax.set_xticks([])
        ax.set_yticks([])
        return
    if logs.isna().all().all():  # nothing finished: only grey cells (seaborn needs a value)
        cbar = False
        ax.set_xlim(0, mat.shape[1])
        ax.set_ylim(mat.shape[0], 0)
    else:
        sns.heatmap(
            logs,
            ax=ax,
            cmap="RdYlGn",
            norm=norm,
            mask=logs.isna(),
            annot=text.to_numpy(dtype=object),
            fmt="",
            annot_kws={"fontsize": fontsize},
            linewidths=1.5,
            linecolor="white",
            cbar=cbar,
            cbar_kws={"label": "speedup (log scale)", "shrink": 0.9} if cbar else None,
        )
    # Grey cells: hatch them and write why (seaborn does not annotate masked cells).
    for i, scen in enumerate(mat.index):
        for j, col in enumerate(mat.columns):
            if pd.isna(mat.loc[scen, col]):
                ax.add_patch(
                    Rectangle((j, i), 1, 1, facecolor=GREY, edgecolor="white", hatch="///", lw=1.5)
                )
                ax.text(
                    j + 0.5,
                    i + 0.5,
                    str(text.loc[scen, col]),
                    ha="center",
                    va="center",
                    fontsize=fontsize,
                    color="#444444",
                    bbox={"boxstyle": "round,pad=0.15", "fc": GREY, "ec": "none"},
                )
    if cbar and ax.collections and ax.collections[0].colorbar is not None:
        span = float(norm.vmax)
        pool = _TICKS_WIDE if span >= math.log10(3) else _TICKS_NARROW
        ticks = [t for t in pool if abs(math.log10(t)) <= span + 1e-9]
        cb = ax.collections[0].colorbar
        cb.set_ticks([math.log10(t) for t in ticks])
        cb.set_ticklabels([f"{t:g}x" for t in ticks])
    ax.tick_params(axis="both", length=0)
    ax.set_yticks(np.arange(len(mat.index)) + 0.5)
    ax.set_yticklabels([(labels or {}).get(s, s) for s in mat.index], rotation=0)
    long = max((len(c) for c in mat.columns), default=0) > 22
    ax.set_xticks(np.arange(len(mat.columns)) + 0.5)
    ax.set_xticklabels(
        list(mat.columns), rotation=20 if long else 0, ha="right" if long else "center"
    )
    ax.xaxis.tick_top()
    ax.xaxis.set_label_position("top")


def speedup_matrix(
    runs: pd.DataFrame,
    *,
    title: str | None = None,
    columns: str = "auto",
    labels: dict[str, str] | None = None,
) -> Figure:
    """Seaborn heatmap of speedups: rows = scenarios, columns = fixes then ``ideal``.

    Cells read ``"54.0x\\n[52.1-56.0]"`` (speedup over baseline and its 95% CI; in the slot
    layout the variant's name first); greyed cells say ``n/a`` (pair does not apply) or the
    variant's status. ``labels`` maps scenario names to the row labels shown. The figure gets
    ``matrix`` (speedup, scenarios x columns, NaN where grey) and ``cells`` (:func:`matrix_table`).
    """
    layout = matrix_layout(runs, columns)
    cells = matrix_table(runs, layout)
    mat = _pivot(cells, "speedup")
    n_rows, n_cols = mat.shape
    lines = 3 if layout == "slot" else 2
    w = max(5.0, 1.9 * n_cols + 3.6)
    h = max(2.4, (0.28 * lines + 0.3) * n_rows + 1.7)
    fig = Figure(figsize=(w, h), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    draw_matrix(cells, ax, norm=matrix_norm(mat), labels=labels)
    ax.set_xlabel(
        "fixes in table order, then ideal (variant named in the cell)" if layout == "slot" else ""
    )
    ax.set_ylabel("scenario")
    fig.suptitle(
        title
        or (
            "Speedup over baseline (95% CI)"
            if n_cols < 3
            else "Speedup over baseline (95% CI); grey: pair does not apply or did not finish"
        ),
        fontsize=11,
        x=0.01,
        ha="left",
    )
    fig.matrix = mat
    fig.cells = cells
    fig.layout_kind = layout
    return fig
