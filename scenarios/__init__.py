"""Scenarios: one module (or package) per pathology, found by scanning this package.

Each public module exports ``SCENARIO``. Modules whose names start with ``_`` are shared helpers.
A scenario that fails to import is an error, never skipped: a broken scenario must not silently
shrink ``+scenario=all``.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from collections.abc import Iterable

from scenarios._base import (
    BOTTLENECK_CLASSES,
    Expectation,
    RunContext,
    Scenario,
    ScenarioConfig,
    Severity,
    Size,
    Teaching,
    Variant,
    Workload,
)
from scenarios._memory import MemoryEstimate

__all__ = [
    "BOTTLENECK_CLASSES",
    "Expectation",
    "MemoryEstimate",
    "RunContext",
    "Scenario",
    "ScenarioConfig",
    "ScenarioImportError",
    "Severity",
    "Size",
    "Teaching",
    "Variant",
    "Workload",
    "discover",
    "shipped_names",
]


class ScenarioImportError(ImportError):
    """A scenario module could not be imported or does not honour the contract."""


def shipped_names() -> list[str]:
    """Names of the scenario modules shipped in this package, sorted."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def _load(module_name: str) -> Scenario:
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # any failure is the scenario's fault; say which one
        raise ScenarioImportError(
            f"scenario module '{module_name}' failed to import: {type(exc).__name__}: {exc}"
        ) from exc
    scen = getattr(module, "SCENARIO", None)
    if not isinstance(scen, Scenario):
        raise ScenarioImportError(
            f"scenario module '{module_name}' must export SCENARIO = Scenario(...); "
            f"found {type(scen).__name__}"
        )
    where = scen.build.partition(":")[0]  # found, not imported: that is the worker's job
    try:
        spec = importlib.util.find_spec(where)
    except ImportError as exc:
        spec, why = None, f": {exc}"
    else:
        why = ""
    if spec is None:
        raise ScenarioImportError(
            f"scenario module '{module_name}' names build={scen.build!r}, "
            f"but there is no module '{where}'{why}"
        )
    expected = module_name.rsplit(".", 1)[-1]
    if scen.name != expected:
        raise ScenarioImportError(
            f"scenario module '{module_name}' declares name {scen.name!r}; it must be {expected!r}"
        )
    return scen


def discover(extra_modules: Iterable[str] = ()) -> dict[str, Scenario]:
    """Import every shipped scenario plus ``extra_modules`` (dotted names, e.g. test plugins)."""
    found: dict[str, Scenario] = {}
    for name in shipped_names():
        found[name] = _load(f"{__name__}.{name}")
    for mod in extra_modules:
        scen = _load(mod)
        if scen.name in found:
            raise ScenarioImportError(f"scenario name {scen.name!r} from '{mod}' is already taken")
        found[scen.name] = scen
    return found
