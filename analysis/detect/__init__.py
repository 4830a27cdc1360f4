"""Bottleneck detectors over an nsys SQLite export: one module per class, one decide step.

``diagnose(trace)`` reads the export through one :class:`~analysis.detect.view.TraceView` (the
trace and the thresholds of ``analysis.detect.config``, the ``diagnosis`` config group's schema)
and returns every class's finding, fired or not, sorted by impact. Top down:

- :mod:`.config`: the typed thresholds, one section per class and the reading's own (``window``,
  ``host``, ``predict``); :func:`load_thresholds` makes them from overrides or a run's config;
- :mod:`.view`: the trace view, what every detector reads (the steady window, GPU activity, the
  host's timeline, GIL waits), each reading cached on the trace;
- :mod:`.registry`: one detector per class, ``detect(view, section) -> Finding`` (a frozen
  candidate), derived from the class specs (``ClassSpec.detector``, bottlenecks/classes.py);
- :mod:`.decide`: the one decide step, the candidate's prediction and its state;
- :mod:`.timemodel`: the replay behind every prediction.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from analysis import trace as T
from analysis.detect.config import DiagnosisConfig, load_thresholds
from analysis.detect.decide import judge, trace_only
from analysis.detect.registry import REGISTRY, Detector
from analysis.detect.timemodel import PROBE_KEYS, host_speed
from analysis.detect.view import GPU_ACTIVITY_LOST, TraceView, gpu_activity_lost
from analysis.findings import Finding
from bottlenecks import SPECS

__all__ = [
    "GPU_ACTIVITY_LOST",
    "PROBE_KEYS",
    "REGISTRY",
    "Detector",
    "TraceView",
    "diagnose",
    "gpu_activity_lost",
    "host_speed",
    "load_thresholds",
    "trace_only",
]


def diagnose(
    trace: T.Trace,
    thresholds: DiagnosisConfig | Mapping[str, Any] | None = None,
    *,
    step_ms: float | None = None,
    host_speed: float | None = None,
) -> list[Finding]:
    """Every class's finding on ``trace``, highest impact first (fired before not fired), each
    with its predicted speedup (:mod:`analysis.detect.decide`); ``thresholds``: as
    :func:`load_thresholds` takes them; ``step_ms``: the program's mean step measured without
    nsys, where known (it calibrates the prediction); ``host_speed``: the timed processes' host
    speed relative to the profiled process's (profiled probe / timed probe:
    :func:`analysis.detect.timemodel.host_speed`), where measured (the profiled host's time is
    scaled to it)."""
    view = TraceView(trace, load_thresholds(thresholds))
    found = [judge(view, s, step_ms=step_ms, host_speed=host_speed) for s in SPECS]
    return sorted(found, key=lambda f: (not f.fired, -f.impact))
