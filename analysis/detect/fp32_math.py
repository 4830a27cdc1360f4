"""fp32_math: GEMMs and convolutions in fp32 (SIMT FMA) or TF32 where bf16 tensor cores would run them faster.

A skeleton: the class is specified (bottlenecks/classes.py) and its scenario injects it, but the
detector is not written yet, so every report is ``not_judged`` for it. The detector to come reads
which kernels run on tensor cores (cuBLAS, cuDNN, CUTLASS, nvjet and Triton names as hints; nsys GPU metrics where a capture has them), and the step with those kernels at the bf16 rate.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from analysis import trace as T
from analysis.findings import Finding, State
from bottlenecks import Klass

KLASS = Klass.FP32_MATH

#: The reason every finding of this skeleton gives.
NOT_WRITTEN = "the fp32_math detector is not written yet: this class is not judged"


def detect(trace: T.Trace, thresholds: Mapping[str, Any]) -> Finding:
    """Not judged, whatever the report holds (the detector is not written yet)."""
    return Finding(KLASS, State.NOT_JUDGED, reason=NOT_WRITTEN)
