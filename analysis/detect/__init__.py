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
from concurrent.futures import ThreadPoolExecutor
from threading import Event
from typing import Any

from analysis import trace as T
from analysis.detect.config import DiagnosisConfig, load_thresholds
from analysis.detect.decide import candidate, judge, trace_only
from analysis.detect.registry import REGISTRY, Detector
from analysis.detect.timemodel import PROBE_KEYS, host_speed
from analysis.detect.view import GPU_ACTIVITY_LOST, TraceView, activity_ready, gpu_activity_lost
from analysis.findings import Finding
from bottlenecks import SPECS, ClassSpec, Klass

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
    early: dict[str, Finding] = {}

    def one(spec: ClassSpec) -> Finding:
        found = early.get(spec.name)
        return judge(view, spec, step_ms=step_ms, host_speed=host_speed, found=found)

    # The first class reads what the others share (the host view, the time model's timeline);
    # the GPU-side detectors read the activity alone, and run beside it on a second thread once
    # the activity is built; the rest are judged on two threads. Numpy works on millions of
    # items without the GIL, and each finding is what it is judged alone.
    ready = activity_ready(trace)
    with ThreadPoolExecutor(2) as pool:
        ahead = pool.submit(_candidates, view, [s for s in SPECS if s.name in GPU_SIDE], ready)
        try:
            first = one(SPECS[0])
        finally:
            ready.set()  # the activity was never built: the detectors read what they need
        early.update(ahead.result())
        found = [first, *pool.map(one, SPECS[1:])]
    return sorted(found, key=lambda f: (not f.fired, -f.impact))


#: Classes whose detectors read the window's GPU activity and kernels alone (no host view).
GPU_SIDE = frozenset({Klass.FP32_MATH, Klass.UNFUSED_ELEMENTWISE, Klass.LAYOUT_TRANSPOSE})


def _candidates(view: TraceView, specs: list[ClassSpec], ready: Event) -> dict[str, Finding]:
    """The detectors' findings of ``specs`` (before the decide step), once ``ready`` is set."""
    ready.wait()
    return {spec.name: candidate(view, spec) for spec in specs}
