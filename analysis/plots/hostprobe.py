"""The host's speed over a run: each worker's host probes against run time.

Input: a long table, one row per probe, with ``t_s`` (seconds from the run's first worker),
``launch_us`` (host time per asynchronous launch), ``python_ms`` (a fixed pure-Python loop)
and ``kind`` (``timing`` or ``profile``). On a host whose speed drifts (a KVM guest ran the
same loop 1.65x faster for a few hundred ms after load) both panels move together, and a
host-bound variant's step time moves with them.
"""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

__all__ = ["host_probe_figure"]

_STYLE = {"timing": ("o", "#1f77b4"), "profile": ("s", "#d62728")}


def host_probe_figure(probes: pd.DataFrame) -> Figure:
    """Two panels over run time: launch µs and Python-loop ms per probe, timing and profiled
    workers apart; a dotted line at each panel's median."""
    fig = Figure(figsize=(10, 4.6), dpi=100, layout="constrained")
    axes = fig.subplots(2, 1, sharex=True)
    panels = (("launch_us", "launch probe (µs)"), ("python_ms", "Python loop probe (ms)"))
    for ax, (col, label) in zip(axes, panels, strict=True):
        values = pd.to_numeric(probes[col], errors="coerce")
        for kind, (marker, color) in _STYLE.items():
            part = probes[(probes["kind"] == kind) & values.notna()].sort_values("t_s")
            if part.empty:
                continue
            ax.plot(part["t_s"], part[col], marker=marker, ls="-" if kind == "timing" else "",
                    lw=0.8, ms=4, color=color, alpha=0.85, label=f"{kind} workers")  # fmt: skip
        if values.notna().any():
            ax.axhline(float(values.median()), color="#555555", ls=":", lw=1)
        ax.set_ylabel(label, fontsize=9)
        ax.grid(color="#eeeeee")
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    axes[0].legend(loc="upper right", fontsize=8, frameon=False)
    axes[1].set_xlabel("run time (s from the first worker's launch)")
    fig.suptitle(
        "Host speed over the run (probes right before and right after each window; dotted: median)",
        x=0.01,
        ha="left",
        fontsize=11,
    )
    return fig
