"""Pictures of runs: nsys-style timelines of a few steps and the speedup matrix.

Import the submodules directly (``analysis.plots.timeline``, ``analysis.plots.matrix``); they use
matplotlib's object API only (no pyplot state), so they work under the non-interactive Agg backend.
"""

from __future__ import annotations

from analysis.plots.matrix import speedup_matrix
from analysis.plots.timeline import TimelineData, load_timeline, plot_pair, plot_timeline

__all__ = ["TimelineData", "load_timeline", "plot_pair", "plot_timeline", "speedup_matrix"]
