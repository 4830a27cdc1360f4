"""allocator_churn: the caching allocator releasing and re-requesting device memory inside the loop.

A skeleton: the class is specified (bottlenecks/classes.py) and its scenario injects it, but the
detector is not written yet, so every report is ``not_judged`` for it. The detector to come reads
cudaMalloc/cudaFree (and their async forms) inside steady-state iterations, the host time they block and the GPU idle beside them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from analysis import trace as T
from analysis.findings import Finding, State
from bottlenecks import Klass

KLASS = Klass.ALLOCATOR_CHURN

#: The reason every finding of this skeleton gives.
NOT_WRITTEN = "the allocator_churn detector is not written yet: this class is not judged"


def detect(trace: T.Trace, thresholds: Mapping[str, Any]) -> Finding:
    """Not judged, whatever the report holds (the detector is not written yet)."""
    return Finding(KLASS, State.NOT_JUDGED, reason=NOT_WRITTEN)
