"""Dose-response of one scenario: speedup and the detector's metric against severity.

Input is tidy, one row per run x variant (gathered from several run folders of a severity
sweep by ``harness report``):

- ``speed``: ``severity``, ``variant``, ``kind`` (baseline / fix / ideal), ``speedup``,
  ``ci_low``, ``ci_high`` (95% CI), ``status``;
- ``detect``: ``severity``, ``variant``, ``kind``, ``value`` (the detector's main metric, NaN
  where the export lacks the evidence), ``fired`` (bool or NA).

Top panel: each fix's (and ``ideal``'s) speedup over the baseline of the same run, with its CI.
Bottom panel: the metric of the scenario's detector on every variant, the threshold as a dashed
line, filled markers where the detector fired; the severity from which it fires on the baseline
(and at every larger severity shown) is shaded in both panels.
"""

from __future__ import annotations

import math
import textwrap

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, NullFormatter, PercentFormatter

from analysis.plots.numbers import metric_value, share, speedup

__all__ = ["firing_onset", "plot_dose"]

FIRE_COLOR = "#c0392b"
SHADE = "#fbe3e1"
_PALETTE = ("#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b")


def firing_onset(severity: pd.Series, fired: pd.Series) -> float | None:
    """The smallest severity from which the detector fired at every severity shown, or None."""
    pts = (
        pd.DataFrame({"s": pd.to_numeric(severity, errors="coerce"), "f": fired})
        .dropna(subset=["s"])
        .sort_values("s")
    )
    pts = pts[pts["f"].notna()]
    if pts.empty or not bool(pts["f"].iloc[-1]):
        return None
    onset = None
    for s, f in zip(pts["s"][::-1], pts["f"][::-1], strict=True):
        if not bool(f):
            break
        onset = float(s)
    return onset


def _fmt_sev(x: float) -> str:
    return f"{x:g}"


def plot_dose(
    speed: pd.DataFrame,
    detect: pd.DataFrame,
    *,
    scenario: str,
    unit: str = "",
    meaning: str = "",
    klass: str = "",
    metric: str = "",
    threshold: float | None = None,
    note: str = "",
    title: str | None = None,
) -> Figure:
    """Two panels sharing the severity axis; see the module docstring.

    ``note`` is written into the metric panel when no metric value is known (why not). The
    figure gets ``onset`` (:func:`firing_onset` of the baseline, or None) and ``severities``.
    """
    sev_all = pd.to_numeric(
        pd.concat(
            [
                speed.get("severity", pd.Series(dtype=float)),
                detect.get("severity", pd.Series(dtype=float)),
            ]
        ),
        errors="coerce",
    ).dropna()
    sevs = sorted(set(sev_all.astype(float)))
    fig = Figure(figsize=(10.5, 7.2), dpi=100, layout="constrained")
    top, bot = fig.subplots(2, 1, sharex=True, height_ratios=(1.15, 1))
    logx = bool(sevs) and min(sevs) > 0 and max(sevs) / min(sevs) >= 8
    order, fixes = _speedup_panel(top, speed)
    det = detect.copy()
    if not det.empty:
        det["severity"] = pd.to_numeric(det["severity"], errors="coerce")
        det["value"] = pd.to_numeric(det["value"], errors="coerce")
    has_values = not det.empty and det["value"].notna().any()
    if has_values:
        _metric_panel(bot, det, order, fixes, metric, threshold)
    else:
        bot.text(0.5, 0.5, "no detector metric for these runs\n" + (note or ""),
                 transform=bot.transAxes, ha="center", va="center", fontsize=9.5,
                 color="#666666", wrap=True)  # fmt: skip
        bot.set_yticks([])
    bot.set_ylabel(f"{klass} detector\n{metric or 'metric'}")
    bot.grid(axis="y", color="#eeeeee", zorder=0)
    base_det = det[det["kind"].astype(str) == "baseline"] if not det.empty else det
    onset = firing_onset(base_det["severity"], base_det["fired"]) if not base_det.empty else None
    if sevs:
        judged = has_values and base_det["fired"].notna().any()
        _severity_axis(top, bot, sevs, logx, onset, unit, judged)
    label = f"severity: {meaning} ({unit})" if meaning else f"severity ({unit})"
    bot.set_xlabel("\n".join(textwrap.wrap(label, 110)))
    fig.suptitle(
        title or f"{scenario}: dose-response", x=0.01, ha="left", fontsize=12, weight="bold"
    )
    fig.onset = onset
    fig.severities = sevs
    return fig


def _speedup_panel(top: Axes, speed: pd.DataFrame) -> tuple[list[str], list[str]]:
    """Each fix's (and ideal's) speedup against severity with its CI; returns the variants in
    drawing order (fixes first) and the fixes."""
    others = speed[speed["kind"].astype(str) != "baseline"] if not speed.empty else speed
    names = list(dict.fromkeys(others["variant"].astype(str))) if not others.empty else []
    fixes = [n for n in names if (others.loc[others["variant"] == n, "kind"] != "ideal").any()]
    order = fixes + [n for n in names if n not in fixes]
    ymin, ymax = 1.0, 1.0
    for i, name in enumerate(order):
        d = others[others["variant"].astype(str) == name].copy()
        d["severity"] = pd.to_numeric(d["severity"], errors="coerce")
        d = d.sort_values("severity")
        color = "#333333" if name not in fixes else _PALETTE[i % len(_PALETTE)]
        lo, hi = _speedup_series(top, d, name, color, name not in fixes)
        ymin, ymax = min(ymin, lo), max(ymax, hi)
    top.axhline(1.0, color="#555555", lw=1, ls=":", zorder=1)
    top.text(0.005, 1.0, "baseline = 1x", transform=top.get_yaxis_transform(), fontsize=8,
             color="#555555", va="top", ha="left")  # fmt: skip
    if ymax / max(ymin, 1e-9) > 6:
        top.set_yscale("log")
        top.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    else:
        top.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.2g}x"))
        pad = 0.08 * (ymax - ymin or 1.0)
        top.set_ylim(min(ymin, 1.0) - pad, ymax + 2 * pad)
    top.set_ylabel("speedup over the baseline\n(95% CI)")
    if order:
        top.legend(loc="upper left", fontsize=8.5, frameon=False)
    else:
        top.text(0.5, 0.5, "no fix or ideal in these runs", transform=top.transAxes,
                 ha="center", color="#777777")  # fmt: skip
    top.grid(axis="y", color="#eeeeee", zorder=0)
    return order, fixes


def _speedup_series(
    top: Axes, d: pd.DataFrame, name: str, color: str, is_ideal: bool
) -> tuple[float, float]:
    """One variant's speedups with their CIs, each labelled; a variant that did not finish at
    a severity says its status there. Returns the lowest and highest CI ends drawn."""
    ok = d[d["speedup"].notna()]
    lo_all, hi_all = 1.0, 1.0
    if not ok.empty:
        y = ok["speedup"].to_numpy(float)
        lo = np.where(ok["ci_low"].notna(), ok["ci_low"], y).astype(float)
        hi = np.where(ok["ci_high"].notna(), ok["ci_high"], y).astype(float)
        top.errorbar(ok["severity"], y, yerr=[np.clip(y - lo, 0, None), np.clip(hi - y, 0, None)],
                     color=color, marker="o", ms=6, lw=1.8, ls="--" if is_ideal else "-",
                     capsize=4, label=f"{name} ({'limit' if is_ideal else 'fix'})", zorder=3)  # fmt: skip
        for xv, yv in zip(ok["severity"], y, strict=True):
            top.annotate(speedup(yv), (xv, yv), xytext=(6, 6), textcoords="offset points",
                         fontsize=8, color=color)  # fmt: skip
        lo_all, hi_all = float(lo.min()), float(hi.max())
    bad = d[d["speedup"].isna()]
    for xv, st in zip(bad["severity"], bad.get("status", pd.Series("?", index=bad.index)),
                      strict=True):  # fmt: skip
        top.annotate(f"{name}: {st}", (xv, 1.0), xytext=(0, -14), textcoords="offset points",
                     ha="center", fontsize=8, color="#777777")  # fmt: skip
    return lo_all, hi_all


def _metric_panel(
    bot: Axes,
    det: pd.DataFrame,
    order: list[str],
    fixes: list[str],
    metric: str,
    threshold: float | None,
) -> None:
    """The detector's metric on every variant (filled where it fired), the baseline's values
    labelled, the threshold dashed."""
    kinds = det["kind"].astype(str)
    bases = list(dict.fromkeys(det.loc[kinds == "baseline", "variant"].astype(str)))
    var_order = bases + [v for v in dict.fromkeys(det["variant"].astype(str)) if v not in bases]
    handles = []
    for name in var_order:
        d = det[det["variant"].astype(str) == name].sort_values("severity")
        d = d[d["value"].notna()]
        if d.empty:
            continue
        base = (d["kind"].astype(str) == "baseline").any()
        if base:
            color = FIRE_COLOR
        elif name in order and name not in fixes:
            color = "#333333"
        else:
            color = _PALETTE[order.index(name) % len(_PALETTE)] if name in order else "#888888"
        _metric_series(bot, d, color, base, metric)
        label = name if base or name == "baseline" else f"{name} (fix)" if name in fixes else name
        handles.append(Line2D([], [], color=color, lw=2.2 if base else 1.2, label=label))
    is_share = metric.endswith("_share")
    if threshold is not None and math.isfinite(threshold):
        bot.axhline(threshold, color=FIRE_COLOR, ls="--", lw=1.2, zorder=1)
        bot.text(0.995, threshold,
                 f" threshold: fires at ≥ {share(threshold)}" if is_share else f" threshold {threshold:g}",
                 transform=bot.get_yaxis_transform(), fontsize=8, color=FIRE_COLOR,
                 va="bottom", ha="right")  # fmt: skip
    handles += [
        Line2D([], [], ls="", marker="o", color="#555555", label="detector fired"),
        Line2D([], [], ls="", marker="o", mfc="white", color="#555555", label="did not fire"),
    ]
    bot.legend(handles=handles, loc="upper left", fontsize=8.5, frameon=False, ncols=2)
    if is_share:
        bot.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
        hi = max(float(det["value"].max()), threshold or 0.0)
        bot.set_ylim(-0.03, min(1.05, hi * 1.25 + 0.05))


def _metric_series(bot: Axes, d: pd.DataFrame, color: str, base: bool, metric: str) -> None:
    """One variant's metric against severity: a line, markers filled where it fired, and the
    baseline's values written beside them."""
    size = 70 if base else 40
    bot.plot(d["severity"], d["value"], color=color, lw=2.2 if base else 1.2,
             alpha=1 if base else 0.8, zorder=2)  # fmt: skip
    fired = d["fired"].map(lambda f: bool(f) if pd.notna(f) else False).to_numpy(bool)
    bot.scatter(d["severity"][fired], d["value"][fired], s=size, color=color, edgecolor=color,
                zorder=4)  # fmt: skip
    bot.scatter(d["severity"][~fired], d["value"][~fired], s=size, facecolor="white",
                edgecolor=color, lw=1.6, zorder=4)  # fmt: skip
    if base:
        for xv, yv in zip(d["severity"], d["value"], strict=True):
            bot.annotate(metric_value(yv, metric), (xv, yv), xytext=(6, 6),
                         textcoords="offset points", fontsize=8, color=color)  # fmt: skip


def _severity_axis(
    top: Axes,
    bot: Axes,
    sevs: list[float],
    logx: bool,
    onset: float | None,
    unit: str,
    judged: bool,
) -> None:
    """The shared severity axis, and the shaded severities from which the detector fires on
    the baseline (or a line saying it does not at every larger one)."""
    if logx:
        top.set_xscale("log")
        lo_x, hi_x = min(sevs) / 1.5, max(sevs) * 1.5
    else:
        span = (max(sevs) - min(sevs)) or max(abs(sevs[0]), 1.0)
        lo_x, hi_x = min(sevs) - 0.1 * span, max(sevs) + 0.1 * span
    top.set_xlim(lo_x, hi_x)
    bot.set_xticks(sevs)
    bot.xaxis.set_major_formatter(FuncFormatter(lambda v, _: _fmt_sev(v)))
    bot.xaxis.set_minor_formatter(NullFormatter())
    if onset is not None:
        below = [s for s in sevs if s < onset]
        start = lo_x
        if below:
            start = math.sqrt(below[-1] * onset) if logx else (below[-1] + onset) / 2
        for ax in (top, bot):
            ax.axvspan(start, hi_x, color=SHADE, zorder=0, lw=0)
        bot.annotate(f"fires on the baseline from {_fmt_sev(onset)} {unit}".rstrip(),
                     xy=(start, 1.0), xycoords=("data", "axes fraction"), xytext=(4, -4),
                     textcoords="offset points", fontsize=8.5, color=FIRE_COLOR, va="top",
                     weight="bold")  # fmt: skip
    elif judged:
        bot.text(0.99, 0.95,
                 "the detector did not fire on the baseline at every larger severity shown",
                 transform=bot.transAxes, ha="right", va="top", fontsize=8.5, color="#666666")  # fmt: skip
