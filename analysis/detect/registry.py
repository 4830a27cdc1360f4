"""The detectors, one per class: derived from the class specs (``ClassSpec.detector``,
bottlenecks/classes.py). A class whose detector is missing fails here, on import, naming it."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from analysis.detect.view import TraceView
from analysis.findings import CLASSES, Finding
from bottlenecks import SPECS, ClassSpec
from bottlenecks.classes import ClassSpecError

__all__ = ["REGISTRY", "Detector"]

#: A detector: the trace view and its class's own threshold section (``ClassSpec.thresholds``)
#: to the class's candidate finding (see :mod:`analysis.detect.decide`).
Detector = Callable[[TraceView, Any], Finding]


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
