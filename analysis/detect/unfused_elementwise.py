"""unfused_elementwise: chains of memory-bound elementwise and reduction kernels over same-sized tensors.

A skeleton: the class is specified (bottlenecks/classes.py) and its scenario injects it, but the
detector is not written yet, so every report is ``not_judged`` for it. The detector to come reads
runs of elementwise kernels over same-sized tensors that do little arithmetic per byte, and the step with each run's bytes moved once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from analysis import trace as T
from analysis.findings import Finding, State
from bottlenecks import Klass

KLASS = Klass.UNFUSED_ELEMENTWISE

#: The reason every finding of this skeleton gives.
NOT_WRITTEN = "the unfused_elementwise detector is not written yet: this class is not judged"


def detect(trace: T.Trace, thresholds: Mapping[str, Any]) -> Finding:
    """Not judged, whatever the report holds (the detector is not written yet)."""
    return Finding(KLASS, State.NOT_JUDGED, reason=NOT_WRITTEN)
