"""``nsys-ai`` (0.3.0): the offline part of nsys-ai on the nsys export.

What nsys-ai offers without a network or an LLM: its skills (SQL over the export) and the
default evidence pack of ``nsys-ai diagnose`` (hotspots, idle gaps, the critical path, a
profile health summary). The one skill that names causes is ``root_cause_matcher``: it matches
the export against nsys-ai's "Book of Root Causes" and returns named patterns, each with a
severity, evidence (numbers, API names) and a fix. This adapter runs that skill in-process on a
read-only ``sqlite3`` connection (no DuckDB: its SQLite reader is an extension DuckDB downloads,
which an offline machine waits on for seconds) and maps its patterns to classes
(:data:`PATTERNS`). A pattern of severity ``warning`` or ``critical`` flags its class; ``info``
rows (hotspots, "no known anti-patterns") flag nothing.

nsys-ai has no pattern for the GIL (``gil_contention`` is ``n/a``); the other classes are
``clear`` where it looked and matched nothing. An export without a CUDA kernel table (a CPU
capture; CUDA graphs traced as whole graphs) is one nsys-ai cannot read: every class ``n/a``.
"""

from __future__ import annotations

import logging
import sqlite3
from typing import Any

from bottlenecks import Klass
from harness.tools.base import Call, Calls, Context, Flag, Traces, all_na, every_class, register

#: nsys-ai's root-cause pattern -> the class it stands for (patterns not listed map to none).
PATTERNS: dict[str, str] = {
    "GPU Bubbles (Pipeline Stalls)": Klass.DATA_STALL,
    "Pageable Memory in Async Memcpy": Klass.PAGEABLE_COPY,
    "Small Kernel Overhead": Klass.LAUNCH_BOUND,
    "Excessive Synchronization": Klass.HOST_SYNC,
    "Synchronous Memcpy": Klass.HOST_SYNC,
    "Synchronous Memset": Klass.HOST_SYNC,
    "NCCL Serialization": Klass.EXPOSED_COMM,
    "Compute-Communication Imbalance": Klass.EXPOSED_COMM,
    "Inefficient NCCL Communicator": Klass.EXPOSED_COMM,
    "Pipeline Imbalance": Klass.STAGE_IMBALANCE,
}

#: Severities that flag a class.
FLAGGING = ("warning", "critical")

#: Why a class has no pattern.
UNSEEN = "nsys-ai has no root-cause pattern for this class"


def root_causes(sqlite: Any) -> list[dict[str, Any]]:
    """nsys-ai's ``root_cause_matcher`` rows on the export (raises what nsys-ai raises)."""
    from nsys_ai.skills.registry import get_skill

    quiet = logging.getLogger("nsys_ai")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # its "DuckDB cache unavailable" notes, once per sub-skill
    conn = sqlite3.connect(f"file:{sqlite}?mode=ro", uri=True)
    try:
        return list(get_skill("root_cause_matcher").execute(conn) or [])
    finally:
        conn.close()
        quiet.setLevel(level)


def calls_from(rows: list[dict[str, Any]]) -> Calls:
    """The class calls of root_cause_matcher's rows (pure: testable on any rows)."""
    abstained = {
        PATTERNS.get(str(r.get("pattern", "")).replace(" (abstained)", ""))
        for r in rows
        if r.get("_abstained")
    }
    hits: dict[str, list[str]] = {}
    for r in rows:
        klass = PATTERNS.get(str(r.get("pattern", "")))
        if klass and not r.get("_abstained") and str(r.get("severity")) in FLAGGING:
            hits.setdefault(klass, []).append(f"{r['pattern']}: {r.get('evidence', '')}")

    def call(k: str) -> Call:
        if k in hits:
            return Call(Flag.FLAGGED, " | ".join(hits[k]))
        if k not in PATTERNS.values():
            return Call(Flag.NA, UNSEEN)
        if k in abstained:
            return Call(Flag.NA, "nsys-ai abstained: it could not score this pattern here")
        return Call(Flag.CLEAR, "")

    return every_class(call)


@register
class NsysAi:
    """nsys-ai's root-cause patterns, read as classes."""

    name = "nsys-ai"
    reads = "sqlite"

    def missing(self) -> str | None:
        try:
            import nsys_ai.skills.registry  # noqa: F401
        except ImportError as exc:
            return f"nsys-ai is not installed (pip install .[tools]): {exc}"
        return None

    def judge(self, traces: Traces, ctx: Context) -> Calls:
        why = self.missing()
        if why:
            return all_na(why)
        if traces.sqlite is None:
            return all_na("no nsys export")
        try:
            rows = root_causes(traces.sqlite)
        except Exception as exc:  # nsys-ai's SchemaError and its kin: it cannot read this
            return all_na(f"nsys-ai could not read the export: {type(exc).__name__}: {exc}")
        return calls_from(rows)
