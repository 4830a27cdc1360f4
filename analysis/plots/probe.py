"""The probe effect per variant: how much running under nsys moved its mean step time.

Input: a run table (``runs.csv``) with ``scenario``, ``variant`` and ``probe_effect`` (profiled /
unprofiled mean step time); where ``probe_effect_ci_low``/``_high`` are there, each point gets
its interval. Variants off by more than 10% are drawn in colour (red slower, blue faster).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis.plots.numbers import ratio

__all__ = ["probe_effect_figure"]


def _ci(d: pd.DataFrame, vals: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    if "probe_effect_ci_low" not in d or "probe_effect_ci_high" not in d:
        return None
    lo = pd.to_numeric(d["probe_effect_ci_low"], errors="coerce").to_numpy(float)
    hi = pd.to_numeric(d["probe_effect_ci_high"], errors="coerce").to_numpy(float)
    if not np.isfinite(lo).any():
        return None
    return np.where(np.isfinite(lo), lo, vals), np.where(np.isfinite(hi), hi, vals)


def probe_effect_figure(runs: pd.DataFrame) -> Figure:
    """Lollipops from 1.0 to each variant's probe effect, the +-10% band shaded."""
    d = runs[pd.to_numeric(runs["probe_effect"], errors="coerce").notna()]
    labels = [f"{s} · {v}" for s, v in zip(d["scenario"], d["variant"], strict=True)]
    vals = pd.to_numeric(d["probe_effect"]).to_numpy(float)
    fig = Figure(figsize=(9, max(1.8, 0.3 * len(d) + 1.1)), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    colors = ["#c0392b" if v > 1.1 else "#2e86c1" if v < 0.9 else "#7f8c8d" for v in vals]
    y = np.arange(len(d))
    ax.axvspan(0.9, 1.1, color="#eef2f5", zorder=0)
    ax.hlines(y, 1.0, vals, color=colors, lw=2.5, zorder=2)
    ax.scatter(vals, y, color=colors, s=40, zorder=3)
    ci = _ci(d, vals)
    lo_all, hi_all = vals, vals
    if ci is not None:
        lo, hi = ci
        ax.errorbar(vals, y, xerr=[np.clip(vals - lo, 0, None), np.clip(hi - vals, 0, None)],
                    fmt="none", ecolor="#333333", capsize=3, lw=1, zorder=4)  # fmt: skip
        lo_all, hi_all = np.minimum(vals, lo), np.maximum(vals, hi)
    for yi, v, h in zip(y, vals, hi_all, strict=True):
        at = max(v, h) if v >= 1 else v
        ax.annotate(ratio(v), (at, yi), xytext=(6 if v >= 1 else -6, 0), textcoords="offset points",
                    va="center", ha="left" if v >= 1 else "right", fontsize=8)  # fmt: skip
    ax.axvline(1.0, color="#333333", lw=1)
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=8.5)
    ax.set_ylim(len(d) - 0.5, -0.5)
    if len(d):
        ax.set_xlim(min(0.8, float(lo_all.min()) - 0.1), max(1.2, float(hi_all.max()) + 0.15))
    ax.set_xlabel(
        "probe effect (profiled / unprofiled mean step time)"
        + (", 95% CI" if ci is not None else "")
    )
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return fig
