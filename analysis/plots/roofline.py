"""A roofline picture per scenario from the Nsight Compute row: baseline beside its fixes.

Input: ``kernels.csv`` (one row per profiled kernel: ``scenario``, ``variant``, ``kind``,
``kernel``, ``sm_throughput_pct``, ``memory_throughput_pct``, ``bound``, ``pipe``,
``kernel_ms_per_step``, ``share``) and, optionally, ``kernel_limits.csv`` (per variant its
``roofline_ms_per_step``, ``gpu_busy_ms_per_step``, ``step_ms_mean``, ``state``).

Each variant is a panel of the two speed-of-light shares, memory (x) against compute (y), both
in percent of the GPU's peak: a kernel at the top edge runs the SMs at their peak, one at the
right edge the memory system; one in the lower left corner (both shares under the latency
line) waits on latency. The two shares are ncu's own roofline in two numbers: how close the
kernel's achieved throughput comes to each roof. Colour is the bound, the marker the pipe the
kernel's arithmetic ran on (hollow: none busy), the area its share of the variant's kernel
time; the heaviest are named. The panel's title carries the step's roofline limit (every
profiled kernel at its bound) beside its measured GPU time, and how the profiled time splits
by bound and how much of it ran on tensor cores. Uses matplotlib's object API only (no pyplot
state).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

__all__ = ["roofline_figure", "roofline_figures"]

_BOUND_COLORS = {"compute": "#c0392b", "memory": "#2e86c1", "latency": "#7f8c8d"}
#: Marker per pipe (kernels.csv's ``pipe``: harness.kernels.tables.Pipe's values).
_PIPE_MARKERS = {"tensor": "s", "fma": "^", "alu": "D", "xu": "p", "fp64": "h", "none": "o"}
#: Name prefixes that say nothing about the kernel (the library's namespace, the template).
_NOISE = re.compile(r"^(void |at::native::|cutlass::|cudnn::\w+::)|\(.*$|<.*$")
_KIND_ORDER = {"baseline": 0, "fix": 1, "ideal": 2}
#: Most panels in one picture: the baseline and three more.
MAX_PANELS = 4


def _num(frame: pd.DataFrame, col: str) -> np.ndarray:
    if col not in frame:
        return np.full(len(frame), np.nan)
    return pd.to_numeric(frame[col], errors="coerce").to_numpy(float)


def _variants(rows: pd.DataFrame, variants: Sequence[str] | None) -> list[str]:
    """The panels' variants: those given, else baseline first, then fixes, then ideal."""
    if variants:
        return [v for v in variants if v in set(rows["variant"])]
    kinds = rows.drop_duplicates("variant").set_index("variant")["kind"] if "kind" in rows else {}
    first = {v: i for i, v in enumerate(dict.fromkeys(rows["variant"]))}
    names = sorted(first, key=lambda v: (_KIND_ORDER.get(str(kinds.get(v, "")), 3), first[v]))
    return names[:MAX_PANELS]


def _title(variant: str, limit: pd.Series | None, rows: pd.DataFrame) -> str:
    parts = [variant]
    if limit is not None:
        roof, busy = limit.get("roofline_ms_per_step"), limit.get("gpu_busy_ms_per_step")
        step = limit.get("step_ms_mean")
        if pd.notna(roof):
            line = f"roofline {float(roof):.3g} ms/step of {float(busy):.3g} busy" if pd.notna(
                busy) else f"roofline {float(roof):.3g} ms/step"  # fmt: skip
            if pd.notna(step):
                line += f", step {float(step):.3g}"
            parts.append(line)
        elif pd.notna(limit.get("state")) and limit.get("state") != "ok":
            parts.append(str(limit.get("state")))
    split = _split(rows)
    if split:
        parts.append(split)
    return "\n".join(parts)


def _split(rows: pd.DataFrame) -> str:
    """'compute 86% · memory 7% · latency 7% · tensor 69%': shares of the timed kernels'
    time per step, by bound and on the tensor pipe."""
    ms = _num(rows, "kernel_ms_per_step")
    ok = np.isfinite(ms)
    total = ms[ok].sum()
    if not total > 0 or "bound" not in rows:
        return ""
    bound = rows["bound"].astype(str).to_numpy()[ok]
    pipe = rows["pipe"].astype(str).to_numpy()[ok] if "pipe" in rows else np.array([""] * ok.sum())
    cells = [f"{b} {ms[ok][bound == b].sum() / total:.0%}" for b in _BOUND_COLORS]
    cells.append(f"tensor {ms[ok][pipe == 'tensor'].sum() / total:.0%}")
    return " · ".join(cells)


def _labels(rows: pd.DataFrame) -> list[str]:
    """What to call each kernel in a panel: a GEMM by its type and pipe ('GEMM fp32 · fma'),
    the rest by their short names."""
    names = rows["kernel"].astype(str).tolist() if "kernel" in rows else [""] * len(rows)
    family = rows["family"].astype(str).tolist() if "family" in rows else [""] * len(rows)
    dtype = rows["dtype"].fillna("").astype(str).tolist() if "dtype" in rows else [""] * len(rows)
    pipe = rows["pipe"].astype(str).tolist() if "pipe" in rows else [""] * len(rows)
    return [
        " ".join(x for x in ("GEMM", d) if x) + f" · {p}" if f == "matmul" else _short(n)
        for n, f, d, p in zip(names, family, dtype, pipe, strict=True)
    ]


def _short(name: str, limit: int = 26) -> str:
    """A kernel's name without its namespace and template arguments, at most ``limit``."""
    short = _NOISE.sub("", str(name)) or str(name)
    return short if len(short) <= limit else short[: limit - 1] + "…"


def _panel(ax, rows: pd.DataFrame, latency_pct: float, labels: int) -> None:  # type: ignore[no-untyped-def]
    """One variant's kernels on the two shares, the heaviest ``labels`` of them named."""
    ax.add_patch(_latency_patch(latency_pct))
    ax.text(2, latency_pct - 2, "latency-bound", fontsize=7, color="#95a5a6", va="top")
    ax.plot([0, 100], [0, 100], color="#bbbbbb", lw=0.8, ls="--", zorder=1)
    mem, sm = _num(rows, "memory_throughput_pct"), _num(rows, "sm_throughput_pct")
    share = _num(rows, "share")
    size = 25 + 500 * np.where(np.isfinite(share), share, 0.01)
    bounds = rows["bound"].astype(str).tolist() if "bound" in rows else ["?"] * len(rows)
    pipes = rows["pipe"].astype(str).tolist() if "pipe" in rows else ["?"] * len(rows)
    for i in range(len(rows)):
        color = _BOUND_COLORS.get(bounds[i], "#8e44ad")
        hollow = pipes[i] not in _PIPE_MARKERS or pipes[i] == "none"
        ax.scatter(
            mem[i], sm[i], s=size[i], marker=_PIPE_MARKERS.get(pipes[i], "o"),
            facecolor="none" if hollow else color, edgecolor=color if hollow else "#333333",
            alpha=0.8, linewidth=1.2 if hollow else 0.5, zorder=3,
        )  # fmt: skip
    order = [int(i) for i in np.argsort(-np.where(np.isfinite(share), share, -1))[:labels]]
    names = _labels(rows)
    for n, i in enumerate(sorted(order, key=lambda j: -sm[j] if np.isfinite(sm[j]) else 0)):
        if np.isfinite(mem[i]) and np.isfinite(sm[i]) and np.isfinite(share[i]):
            left = mem[i] > 62  # names of kernels near the right edge go to their left
            ax.annotate(f"{names[i]} {share[i]:.0%}", (mem[i], sm[i]),
                        xytext=(-6 if left else 6, 7 - 9 * n), textcoords="offset points",
                        ha="right" if left else "left", fontsize=6.5, color="#333333")  # fmt: skip
    ax.set_xlim(0, 102)
    ax.set_ylim(0, 102)
    ax.set_xlabel("memory throughput (% of peak)", fontsize=8)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def _latency_patch(latency_pct: float):  # type: ignore[no-untyped-def]
    from matplotlib.patches import Rectangle

    return Rectangle((0, 0), latency_pct, latency_pct, color="#f2f3f4", zorder=0)


def _legend(fig: Figure, panels: int) -> None:
    handles = [Line2D([], [], ls="", marker="o", color=c, label=f"{b}-bound")
               for b, c in _BOUND_COLORS.items()]  # fmt: skip
    handles += [Line2D([], [], ls="", marker=m, color="#555555",
                       markerfacecolor="none" if p == "none" else "#555555",
                       label="no pipe busy" if p == "none" else f"{p} pipe")
                for p, m in _PIPE_MARKERS.items()]  # fmt: skip
    ncol = 9 if panels >= 3 else 5 if panels == 2 else 3
    fig.legend(handles=handles, loc="outside lower center", ncol=ncol, fontsize=7.5, frameon=False,
               title="area: share of the variant's kernel time per step (nsys); named: the "
                     "heaviest, with that share",
               title_fontsize=7.5)  # fmt: skip


def roofline_figure(
    kernels: pd.DataFrame,
    scenario: str,
    limits: pd.DataFrame | None = None,
    *,
    variants: Sequence[str] | None = None,
    latency_pct: float = 60.0,
    labels: int = 3,
) -> Figure:
    """The scenario's picture: one panel per variant (baseline first), its kernels at their
    two shares, ``latency_pct`` the latency line (the row's ``kernels.bound_min_pct``), the
    ``labels`` heaviest kernels named. Raises ValueError when the scenario has no kernels."""
    rows = kernels[kernels["scenario"] == scenario]
    if rows.empty:
        raise ValueError(f"no profiled kernels of {scenario!r}")
    names = _variants(rows, variants)
    fig = Figure(figsize=(3.6 * len(names) + 0.6, 4.4), dpi=100, layout="constrained")
    axes = fig.subplots(1, len(names), sharey=True, squeeze=False)[0]
    for ax, variant in zip(axes, names, strict=True):
        mine = rows[rows["variant"] == variant]
        _panel(ax, mine, latency_pct, labels)
        ax.set_title(_title(variant, _limit(limits, scenario, variant), mine), fontsize=8)
    axes[0].set_ylabel("compute (SM) throughput (% of peak)", fontsize=8)
    fig.suptitle(f"{scenario}: kernels at their speed of light (Nsight Compute)", fontsize=10)
    _legend(fig, len(names))
    return fig


def _limit(limits: pd.DataFrame | None, scenario: str, variant: str) -> pd.Series | None:
    if limits is None or limits.empty:
        return None
    hit = limits[(limits["scenario"] == scenario) & (limits["variant"] == variant)]
    return None if hit.empty else hit.iloc[0]


def roofline_figures(
    kernels: pd.DataFrame, limits: pd.DataFrame | None = None, *, latency_pct: float = 60.0
) -> dict[str, Figure]:
    """One picture per scenario with profiled kernels, in the table's order."""
    if kernels.empty or "scenario" not in kernels:
        return {}
    return {
        s: roofline_figure(kernels, s, limits, latency_pct=latency_pct)
        for s in dict.fromkeys(kernels["scenario"].dropna())
    }
