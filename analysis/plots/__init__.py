"""Pictures of runs: nsys-style timelines of a few steps, the speedup matrix, and the rest of
the report's figures, plus :mod:`analysis.plots.numbers` (how every number is written).

Import the submodules directly (``analysis.plots.timeline``, ``analysis.plots.matrix``); they use
matplotlib's object API only (no pyplot state), so they work under the non-interactive Agg backend.
The names below are loaded on first use, so importing :mod:`analysis.plots.numbers` alone (the
end-of-run text does) costs no matplotlib import.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["TimelineData", "load_timeline", "plot_pair", "plot_timeline", "speedup_matrix"]

_WHERE = {
    "TimelineData": "analysis.plots.timeline",
    "load_timeline": "analysis.plots.timeline",
    "plot_pair": "analysis.plots.timeline",
    "plot_timeline": "analysis.plots.timeline",
    "speedup_matrix": "analysis.plots.matrix",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)
