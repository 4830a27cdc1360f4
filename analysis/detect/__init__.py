"""Bottleneck detectors over an nsys SQLite export: one module per class, one registry.

``diagnose(trace)`` runs every detector with the thresholds of ``analysis.detect.config``
(the ``diagnosis`` config group's schema) and returns their findings, fired or not, sorted by impact. Each detector is
``detect(trace, thresholds) -> Finding``, where ``thresholds`` is the whole diagnosis config (a
``window`` section for the steady state, ``host`` for the main thread's timeline, one section
per class). The registry is derived from the class specs (``ClassSpec.detector``,
bottlenecks/classes.py): a class whose detector is missing fails here, on import, naming it.
"""

from __future__ import annotations

import copy
import functools
import importlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from analysis import trace as T
from analysis.detect import _common as C
from analysis.detect import predict
from analysis.detect.config import diagnosis_thresholds
from analysis.findings import CLASSES, Finding, State
from bottlenecks import SPECS, ClassSpec
from bottlenecks.classes import ClassSpecError

__all__ = [
    "GPU_ACTIVITY_LOST",
    "REGISTRY",
    "Detector",
    "diagnose",
    "gpu_activity_lost",
    "load_thresholds",
]

Detector = Callable[[T.Trace, Mapping[str, Any]], Finding]


def _detector(spec: ClassSpec) -> Detector:
    """The function ``spec.detector`` names ('module:function'); a :class:`ClassSpecError`
    naming the class and the missing piece when the module or function is not there, or the
    module says (``KLASS``) that it detects another class."""
    module_name, _, name = spec.detector.partition(":")
    where = f"class {spec.name}: its detector {spec.detector} (ClassSpec.detector)"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name != missing and not module_name.startswith(missing + "."):
            raise  # the detector exists; something it imports does not
        raise ClassSpecError(f"{where}: no module {module_name}") from exc
    found = getattr(module, name, None)
    if not callable(found):
        raise ClassSpecError(f"{where}: {module_name} has no function {name}")
    if getattr(module, "KLASS", spec.name) != spec.name:
        raise ClassSpecError(f"{where}: {module_name}.KLASS is {module.KLASS!r}")
    return found


#: class name -> detector, in CLASSES order.
REGISTRY: dict[str, Detector] = {s.name: _detector(s) for s in SPECS}
assert tuple(REGISTRY) == CLASSES


def load_thresholds(overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The thresholds as a plain nested dict (``cfg["host_sync"]["min_saving_share"]``): the
    schema's defaults (:class:`analysis.detect.config.DiagnosisConfig`) with ``overrides``
    (nested, or the whole dict of a run's config) merged in, validated: an unknown key or a value
    out of range raises :class:`~analysis.detect.config.ThresholdError` naming the key.
    Validated once per distinct ``overrides`` (a run judges each export with the same ones)."""
    try:
        key = json.dumps(overrides or {}, sort_keys=True)
    except TypeError:  # not plain data (e.g. an OmegaConf node): validated every time
        return diagnosis_thresholds(overrides)
    return copy.deepcopy(_validated(key))


@functools.lru_cache(maxsize=32)
def _validated(overrides_json: str) -> dict[str, Any]:
    return diagnosis_thresholds(json.loads(overrides_json))


def diagnose(
    trace: T.Trace,
    thresholds: Mapping[str, Any] | None = None,
    *,
    step_ms: float | None = None,
    host_speed: float | None = None,
) -> list[Finding]:
    """Every detector's finding on ``trace``, highest impact first (fired before not fired),
    each with its predicted speedup (:mod:`analysis.detect.predict`); ``step_ms``: the
    program's mean step measured without nsys, where known (it calibrates the prediction);
    ``host_speed``: the timed processes' host speed relative to the profiled process's
    (profiled probe / timed probe: :func:`analysis.detect.predict.host_speed`), where
    measured (the profiled host's time is scaled to it)."""
    cfg = load_thresholds(thresholds)
    lost = gpu_activity_lost(trace) or C.no_steady_state(trace, cfg)
    if lost:
        found = [Finding(k, State.NOT_JUDGED, reason=lost) for k in CLASSES]
    else:
        found = [REGISTRY[k](trace, cfg) for k in CLASSES]
    predict.attach(trace, cfg, found, step_ms, host_speed)
    return sorted(found, key=lambda f: (not f.fired, -f.impact))


#: Why a report with CUDA API calls but no GPU activity cannot be judged (every class says it).
GPU_ACTIVITY_LOST = (
    "the report holds CUDA API calls but no kernel, copy, memset or graph activity: CUPTI never "
    "flushed its activity buffers, which usually means the process was killed (a timeout, a "
    "SIGTERM) or left through os._exit before the end; let it end normally, or stop the "
    "capture through a capture range (cudaProfilerStop, nsys --capture-range)"
)


#: Tables nsys fills once the program has created a CUDA context (not on device queries alone).
CONTEXT_TABLES = ("TARGET_INFO_CUDA_CONTEXT_INFO", "TARGET_INFO_CUDA_STREAM")


def gpu_activity_lost(trace: T.Trace) -> str | None:
    """:data:`GPU_ACTIVITY_LOST` when the report has CUDA API rows and no GPU activity rows,
    and the program did use the GPU (a launch or copy call was recorded, or it created a CUDA
    context), else None: judging such a report would read the host's launches against an empty
    GPU. A killed process loses the API records of its launches too, so a created context is the
    sign that stays. A CPU-only program that merely asked the driver about the devices
    (``torch.cuda.is_available()``) on a GPU machine has neither, and is judged as a CPU report."""

    def rows(table: str) -> bool:
        return trace.has(table) and bool(trace.query(f"SELECT 1 FROM {table} LIMIT 1")[1])

    if not rows(C.RUNTIME) or any(rows(t) for t in C.GPU_TABLES):
        return None
    if any(rows(t) for t in CONTEXT_TABLES):
        return GPU_ACTIVITY_LOST
    ids = C.category_ids(trace, "launch", "memcpy", "memset")
    found = (
        ids
        and trace.query(
            f"SELECT 1 FROM {C.RUNTIME} WHERE nameId IN ({','.join(map(str, ids))}) LIMIT 1"
        )[1]
    )
    return GPU_ACTIVITY_LOST if found else None
