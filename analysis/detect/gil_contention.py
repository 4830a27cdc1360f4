"""gil_contention: the launching thread waits for the GIL while another Python thread of the process holds it.

Skeleton: the detector is being written (issue 24); until then it judges nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from analysis import trace as T
from analysis.findings import Finding, State

KLASS = "gil_contention"


def detect(trace: T.Trace, thresholds: Mapping[str, Any]) -> Finding:
    return Finding(KLASS, State.NOT_JUDGED, reason="detector not written yet")
