"""The speedup matrix: scenarios x fixes (plus ``ideal``), each cell a speedup with its 95% CI.

Built from a run table (``runs.csv``): one row per scenario x variant with ``speedup``,
``speedup_ci_low``/``speedup_ci_high``, ``kind`` (baseline / fix / ideal) and ``status``.
Colour is log speedup centred on 1x (red = slower, green = faster). Cells where the pair does
not apply (no such variant for that scenario) or the variant did not finish (skipped, failed,
oom, ...) are grey and say why.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.colors import TwoSlopeNorm
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

__all__ = ["matrix_table", "speedup_matrix"]

GREY = "#d9d9d9"


def _columns(runs: pd.DataFrame) -> list[str]:
    """Variants other than baseline, in first-seen order, with ``ideal`` last."""
    kind = runs["kind"] if "kind" in runs else pd.Series("fix", index=runs.index)
    variants = runs.loc[(runs["variant"] != "baseline") & (kind != "baseline"), "variant"]
    cols = list(dict.fromkeys(variants.astype(str)))
    ideal = [c for c in cols if c == "ideal" or (kind[runs["variant"] == c] == "ideal").any()]
    return [c for c in cols if c not in ideal] + ideal


def matrix_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Long table of the cells: scenario, variant, speedup, ci_low, ci_high, status, text.

    ``speedup`` is NaN where the cell is greyed (absent pair or a status other than ``ok``).
    """
    cols = _columns(runs)
    scenarios = list(dict.fromkeys(runs["scenario"].astype(str)))
    rows = []
    for scen in scenarios:
        for var in cols:
            sel = runs[
                (runs["scenario"].astype(str) == scen) & (runs["variant"].astype(str) == var)
            ]
            if sel.empty:
                rows.append((scen, var, math.nan, math.nan, math.nan, "n/a", "n/a"))
                continue
            r = sel.iloc[-1]
            status = str(r.get("status", "ok")) if pd.notna(r.get("status", "ok")) else "ok"
            s = pd.to_numeric(r.get("speedup"), errors="coerce")
            lo = pd.to_numeric(r.get("speedup_ci_low"), errors="coerce")
            hi = pd.to_numeric(r.get("speedup_ci_high"), errors="coerce")
            if status != "ok" or pd.isna(s):
                rows.append((scen, var, math.nan, math.nan, math.nan, status, status))
                continue
            text = f"{s:.1f}x"
            if pd.notna(lo) and pd.notna(hi):
                text += f"\n[{lo:.1f}-{hi:.1f}]"
            rows.append((scen, var, float(s), float(lo), float(hi), status, text))
    return pd.DataFrame(
        rows, columns=["scenario", "variant", "speedup", "ci_low", "ci_high", "status", "text"]
    )


def speedup_matrix(runs: pd.DataFrame, *, title: str | None = None) -> Figure:
    """Seaborn heatmap of speedups: rows = scenarios, columns = fixes then ``ideal``.

    Cells read ``"54.0x\\n[52.1-56.0]"`` (speedup over baseline and its 95% CI); greyed cells
    say ``n/a`` (pair does not apply) or the variant's status. The figure gets ``matrix``
    (speedup, scenarios x variants, NaN where grey) and ``cells`` (:func:`matrix_table`).
    """
    cells = matrix_table(runs)
    scenarios = list(dict.fromkeys(cells["scenario"]))
    cols = list(dict.fromkeys(cells["variant"]))
    mat = cells.pivot(index="scenario", columns="variant", values="speedup").reindex(
        index=scenarios, columns=cols
    )
    text = cells.pivot(index="scenario", columns="variant", values="text").reindex(
        index=scenarios, columns=cols
    )
    logs = np.log10(mat.astype(float).clip(lower=1e-3))
    finite = logs.to_numpy()[np.isfinite(logs.to_numpy())]
    span = max(float(np.abs(finite).max()) if finite.size else 1.0, 0.1)
    norm = TwoSlopeNorm(vcenter=0.0, vmin=-span, vmax=span)

    w = max(4.5, 1.7 * len(cols) + 3.2)
    h = max(2.2, 0.75 * len(scenarios) + 1.6)
    fig = Figure(figsize=(w, h), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    ax.set_facecolor(GREY)
    sns.heatmap(
        logs,
        ax=ax,
        cmap="RdYlGn",
        norm=norm,
        mask=logs.isna(),
        annot=text.to_numpy(dtype=object),
        fmt="",
        annot_kws={"fontsize": 9},
        linewidths=1.5,
        linecolor="white",
        cbar_kws={"label": "speedup over baseline", "shrink": 0.9},
    )
    # Grey cells: hatch them and write why (seaborn does not annotate masked cells).
    for i, scen in enumerate(scenarios):
        for j, var in enumerate(cols):
            if pd.isna(mat.loc[scen, var]):
                ax.add_patch(
                    Rectangle((j, i), 1, 1, facecolor=GREY, edgecolor="white", hatch="///", lw=1.5)
                )
                ax.text(
                    j + 0.5,
                    i + 0.5,
                    str(text.loc[scen, var]),
                    ha="center",
                    va="center",
                    fontsize=9,
                    color="#555555",
                )
    cbar = ax.collections[0].colorbar
    if cbar is not None:
        ticks = [
            t for t in (0.01, 0.03, 0.1, 0.3, 1, 3, 10, 30, 100, 300) if abs(math.log10(t)) <= span
        ]
        cbar.set_ticks([math.log10(t) for t in ticks])
        cbar.set_ticklabels([f"{t:g}x" for t in ticks])
    ax.set_xlabel("variant (fixes, then ideal)")
    ax.set_ylabel("scenario")
    ax.tick_params(axis="both", length=0)
    ax.set_yticklabels(ax.get_yticklabels(), rotation=0)
    ax.set_title(title or "Speedup over baseline (95% CI)", fontsize=11, loc="left")
    fig.matrix = mat
    fig.cells = cells
    return fig
