"""Bottleneck detectors over an nsys SQLite export: one module per class, one registry.

``diagnose(trace)`` runs every detector with the thresholds of ``analysis.detect.config``
(the ``diagnosis`` config group's schema) and returns their findings, fired or not, sorted by impact. Each detector is
``detect(trace, thresholds) -> Finding``, where ``thresholds`` is the whole diagnosis config (a
``window`` section for the steady state, ``host`` for the main thread's timeline, one section
per class).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from analysis import trace as T
from analysis.detect import (
    data_stall,
    exposed_comm,
    gil_contention,
    host_sync,
    launch_bound,
    pageable_copy,
    stage_imbalance,
)
from analysis.detect.config import diagnosis_thresholds
from analysis.findings import CLASSES, Finding

__all__ = ["REGISTRY", "Detector", "diagnose", "load_thresholds"]

Detector = Callable[[T.Trace, Mapping[str, Any]], Finding]

#: class name -> detector, in CLASSES order.
REGISTRY: dict[str, Detector] = {
    m.KLASS: m.detect
    for m in (
        data_stall,
        pageable_copy,
        launch_bound,
        host_sync,
        exposed_comm,
        gil_contention,
        stage_imbalance,
    )
}
assert tuple(REGISTRY) == CLASSES


def load_thresholds(overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The thresholds as a plain nested dict (``cfg["host_sync"]["min_saving_share"]``): the
    schema's defaults (:class:`analysis.detect.config.DiagnosisConfig`) with ``overrides``
    (nested, or the whole dict of a run's config) merged in, validated: an unknown key or a value
    out of range raises :class:`~analysis.detect.config.ThresholdError` naming the key."""
    return diagnosis_thresholds(overrides)


def diagnose(trace: T.Trace, thresholds: Mapping[str, Any] | None = None) -> list[Finding]:
    """Every detector's finding on ``trace``, highest impact first (fired before not fired)."""
    cfg = load_thresholds(thresholds)
    found = [REGISTRY[k](trace, cfg) for k in CLASSES]
    return sorted(found, key=lambda f: (not f.fired, -f.impact))
