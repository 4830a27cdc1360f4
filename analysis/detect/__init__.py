"""Bottleneck detectors over an nsys SQLite export: one module per class, one registry.

``diagnose(trace)`` runs every detector with the thresholds of ``conf/diagnosis/default.yaml``
and returns their findings, fired or not, sorted by impact. Each detector is
``detect(trace, thresholds) -> Finding``, where ``thresholds`` is the whole diagnosis config (a
``window`` section for the steady state, one section per class).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from copy import deepcopy
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from analysis import trace as T
from analysis.detect import data_stall, exposed_comm, host_sync, launch_bound, pageable_copy
from analysis.findings import CLASSES, Finding

__all__ = ["REGISTRY", "Detector", "config_path", "diagnose", "load_thresholds"]

Detector = Callable[[T.Trace, Mapping[str, Any]], Finding]

#: class name -> detector, in CLASSES order.
REGISTRY: dict[str, Detector] = {
    m.KLASS: m.detect for m in (data_stall, pageable_copy, launch_bound, host_sync, exposed_comm)
}
assert tuple(REGISTRY) == CLASSES


def config_path(name: str = "default") -> Path:
    """``conf/diagnosis/<name>.yaml``: from the installed ``harness.conf`` package, else the
    checkout's ``conf/`` (the same lookup as ``harness.config.config_dir``)."""
    try:
        p = Path(str(resources.files("harness.conf"))) / "diagnosis" / f"{name}.yaml"
        if p.is_file():
            return p
    except ModuleNotFoundError:
        pass
    p = Path(__file__).resolve().parents[2] / "conf" / "diagnosis" / f"{name}.yaml"
    if not p.is_file():
        raise FileNotFoundError(f"cannot find the diagnosis thresholds (looked for {p})")
    return p


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(base.get(k), dict):
            _merge(base[k], v)
        else:
            base[k] = v
    return base


def load_thresholds(overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The default thresholds, with ``overrides`` merged in (nested, e.g.
    ``{"pageable_copy": {"min_pageable_h2d_share": 0.01}}``)."""
    cfg = yaml.safe_load(config_path().read_text(encoding="utf-8"))
    return _merge(deepcopy(cfg), overrides or {})


def diagnose(trace: T.Trace, thresholds: Mapping[str, Any] | None = None) -> list[Finding]:
    """Every detector's finding on ``trace``, highest impact first (fired before not fired)."""
    cfg = load_thresholds(thresholds)
    found = [REGISTRY[k](trace, cfg) for k in CLASSES]
    return sorted(found, key=lambda f: (not f.fired, -f.impact))
