"""layout_transpose: convolutions in NCHW under bf16, with cuDNN's layout conversions around them.

A skeleton: the class is specified (bottlenecks/classes.py) and its scenario injects it, but the
detector is not written yet, so every report is ``not_judged`` for it. The detector to come reads
layout-conversion kernels and the convolution kernels beside them, and the step in NHWC.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from analysis import trace as T
from analysis.findings import Finding, State
from bottlenecks import Klass

KLASS = Klass.LAYOUT_TRANSPOSE

#: The reason every finding of this skeleton gives.
NOT_WRITTEN = "the layout_transpose detector is not written yet: this class is not judged"


def detect(trace: T.Trace, thresholds: Mapping[str, Any]) -> Finding:
    """Not judged, whatever the report holds (the detector is not written yet)."""
    return Finding(KLASS, State.NOT_JUDGED, reason=NOT_WRITTEN)
