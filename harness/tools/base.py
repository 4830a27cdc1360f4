"""The adapter contract (see the package's docstring): what an adapter gets, what it returns,
and the registry that finds every adapter of this package by its name."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from analysis.trace import Trace, TraceError, open_trace
from bottlenecks import CLASSES
from harness.core.enums import StrEnum
from harness.core.tools_config import ToolsConfig


class Flag(StrEnum):
    """What a tool said about one class on one report."""

    FLAGGED = "flagged"
    """The tool points at the class."""
    CLEAR = "clear"
    """The tool could have seen the class and did not point at it."""
    NA = "n/a"
    """The tool cannot see the class (no analysis for it), or could not read this report's
    traces: left out of its scores, never counted as a miss."""


@dataclass(frozen=True)
class Call:
    """One class's call: the flag and the tool's own evidence (numbers, API or rule names), or
    for ``n/a`` why the tool cannot judge it."""

    flag: Flag
    evidence: str = ""


@dataclass(frozen=True)
class Traces:
    """What one profiled program left for the tools to read; an adapter uses the kinds its tool
    reads and returns ``n/a`` (with the reason) when they are missing."""

    name: str
    """The report's name (``scenario/variant``, or a corpus entry)."""
    sqlite: Path | None = None
    """Its nsys SQLite export (decompressed)."""
    kineto: tuple[Path, ...] = ()
    """Its PyTorch Profiler traces, one ``*.pt.trace.json[.gz]`` per rank."""
    text: str | None = None
    """A command's text output about it (the keyword adapter's input)."""
    step_ms: float | None = None
    """The program's mean step without a profiler, where measured (calibrates our detectors)."""
    extra: Mapping[str, object] = field(default_factory=dict)
    """Anything else an adapter needs (the keyword adapter's command: ``command``)."""


Calls = dict[str, Call]


@dataclass(frozen=True)
class Context:
    """The settings an adapter may read: the tools' config section and the detectors'
    thresholds (the ``ours`` adapter)."""

    tools: ToolsConfig = field(default_factory=ToolsConfig)
    diagnosis: Mapping[str, Any] | None = None


class Adapter(Protocol):
    """One tool. ``name`` is what ``--tool`` takes; ``reads`` says which of :class:`Traces` it
    needs (``sqlite``, ``kineto``, ``text``); ``missing`` says why the tool cannot run here
    (not installed), or None; ``judge`` returns a :class:`Call` for every class."""

    name: str
    reads: str

    def missing(self) -> str | None: ...

    def judge(self, traces: Traces, ctx: Context) -> Calls: ...


_REGISTRY: dict[str, Adapter] = {}


def register(cls: type) -> type:
    """Class decorator: one instance of ``cls`` joins the registry under ``cls.name``."""
    inst = cls()
    if inst.name in _REGISTRY and type(_REGISTRY[inst.name]) is not cls:
        raise ValueError(f"two tool adapters are named {inst.name!r}")
    _REGISTRY[inst.name] = inst
    return cls


def adapters() -> dict[str, Adapter]:
    """Every adapter of ``harness/tools`` by name (each module is imported once; a module that
    defines an adapter registers it)."""
    import harness.tools as pkg

    for info in pkgutil.iter_modules(pkg.__path__):
        if not info.name.startswith("_") and info.name not in ("base", "table", "truth"):
            importlib.import_module(f"{pkg.__name__}.{info.name}")
    return dict(_REGISTRY)


def every_class(call: Callable[[str], Call]) -> Calls:
    """``{class: call(class)}`` over every class, in the suite's order."""
    return {k: call(k) for k in CLASSES}


def all_na(reason: str) -> Calls:
    """Every class ``n/a`` for one reason (the tool cannot read this report)."""
    return every_class(lambda _k: Call(Flag.NA, reason))


def not_installed(module: str, tool: str) -> str | None:
    """An optional tool's ``missing``: why ``module`` cannot be imported, or None."""
    try:
        importlib.import_module(module)
    except ImportError as exc:
        return f"{tool} is not installed (pip install .[tools]): {exc}"
    return None


def on_export(traces: Traces, judge: Callable[[Trace], Calls]) -> Calls:
    """``judge`` on the report's nsys export; every class ``n/a`` where there is none or it
    cannot be read (an adapter of the suite's own reading of the export)."""
    if traces.sqlite is None:
        return all_na("no nsys export")
    try:
        with open_trace(traces.sqlite) as trace:
            return judge(trace)
    except TraceError as exc:
        return all_na(f"unreadable export: {exc}")


class BuiltIn:
    """An adapter whose tool is the suite's own code: it can always run."""

    def missing(self) -> str | None:
        return None


def checked(name: str, calls: Calls) -> Calls:
    """``calls`` with every class present (a class an adapter left out is a bug, not a miss)."""
    missing = [k for k in CLASSES if k not in calls]
    if missing:
        raise ValueError(f"tool adapter {name!r} returned no call for {', '.join(missing)}")
    return {k: calls[k] for k in CLASSES}
