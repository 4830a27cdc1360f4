"""Predicted against measured speedup: does a finding's number hold?

Input: one row per checked prediction with ``label`` (what the point is, e.g. ``sync_loading ·
baseline · data_stall``), ``predicted`` and ``measured`` (speedups), optionally
``predicted_ci_low``/``_high`` and ``measured_ci_low``/``_high`` (95% intervals, drawn as error
bars) and ``group`` (the colour: a tool, a class or a source). Both axes are logarithmic, the
diagonal is a perfect prediction and the shaded band the tolerance (+-20% by default); points
outside it are labelled.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

__all__ = ["prediction_figure"]

_PALETTE = ("#2e86c1", "#c0392b", "#27ae60", "#8e44ad", "#d68910", "#17a589", "#7f8c8d")


def _num(d: pd.DataFrame, col: str) -> np.ndarray:
    if col not in d:
        return np.full(len(d), np.nan)
    return pd.to_numeric(d[col], errors="coerce").to_numpy(float)


def _bars(v: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Asymmetric error-bar lengths, zero where an interval is missing."""
    low = np.where(np.isfinite(lo), np.clip(v - lo, 0, None), 0.0)
    high = np.where(np.isfinite(hi), np.clip(hi - v, 0, None), 0.0)
    return np.vstack([low, high])


def prediction_figure(rows: pd.DataFrame, tolerance: float = 0.2, title: str = "") -> Figure:
    """Log-log scatter of predicted (y) against measured (x) speedup with the diagonal and the
    +-``tolerance`` band; each point's 95% intervals as error bars."""
    d = rows[(_num(rows, "predicted") > 0) & (_num(rows, "measured") > 0)].reset_index(drop=True)
    fig = Figure(figsize=(6.4, 5.6), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    pred, meas = _num(d, "predicted"), _num(d, "measured")
    values = np.concatenate([pred, meas, [1.0]])
    lo, hi = max(0.8, float(values.min()) / 1.3), float(values.max()) * 1.3
    x = np.geomspace(lo, hi, 50)
    ax.fill_between(x, x * (1 - tolerance), x * (1 + tolerance), color="#eef2f5", zorder=0,
                    label=f"within {tolerance:.0%}")  # fmt: skip
    ax.plot(x, x, color="#333333", lw=1, zorder=1, label="predicted = measured")
    groups = list(dict.fromkeys(d["group"])) if "group" in d else [""]
    for i, g in enumerate(groups):
        on = (d["group"] == g).to_numpy() if "group" in d else np.ones(len(d), bool)
        ax.errorbar(
            meas[on], pred[on],
            xerr=_bars(meas, _num(d, "measured_ci_low"), _num(d, "measured_ci_high"))[:, on],
            yerr=_bars(pred, _num(d, "predicted_ci_low"), _num(d, "predicted_ci_high"))[:, on],
            fmt="o", ms=6, color=_PALETTE[i % len(_PALETTE)], ecolor="#95a5a6", elinewidth=1,
            capsize=2, zorder=3, label=str(g) if g else None,
        )  # fmt: skip
    off = np.abs(pred / meas - 1) > tolerance
    for j in np.flatnonzero(off):
        ax.annotate(str(d["label"][j]), (meas[j], pred[j]), xytext=(5, 4),
                    textcoords="offset points", fontsize=7.5, color="#c0392b")  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ticks = [t for t in (1, 1.5, 2, 3, 5, 10, 20, 50, 100, 200) if lo <= t <= hi]
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(FixedLocator(ticks))
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
        axis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("measured speedup (the cause removed entirely)")
    ax.set_ylabel("predicted speedup (from the profiled variant's trace)")
    inside = int((~off).sum())
    ax.set_title(title or f"{inside} of {len(d)} predictions within {tolerance:.0%}", fontsize=10)
    ax.legend(fontsize=8, loc="upper left", frameon=False)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return fig
