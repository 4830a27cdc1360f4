"""blocking_io: checkpoint or log writes on the training thread.

A skeleton: the class is specified (bottlenecks/classes.py) and its scenario injects it, but the
detector is not written yet, so every report is ``not_judged`` for it. The detector to come reads
OS-runtime writes (write, pwrite64, fsync, close) and large device-to-host copies on the loop thread, in periodic gaps, spread over the period's steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from analysis import trace as T
from analysis.findings import Finding, State
from bottlenecks import Klass

KLASS = Klass.BLOCKING_IO

#: The reason every finding of this skeleton gives.
NOT_WRITTEN = "the blocking_io detector is not written yet: this class is not judged"


def detect(trace: T.Trace, thresholds: Mapping[str, Any]) -> Finding:
    """Not judged, whatever the report holds (the detector is not written yet)."""
    return Finding(KLASS, State.NOT_JUDGED, reason=NOT_WRITTEN)
