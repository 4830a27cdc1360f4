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

``fp32_math`` is read from nsys-ai's ``tensor_core_usage`` skill instead: the share of the
tensor-core eligible kernels' time (GEMM, convolution, attention names) that ran on tensor
cores, both by nsys-ai's own name patterns. nsys-ai builds the ``kernels`` view the skill reads
in its DuckDB cache; here the same view is a temporary one on the read-only SQLite connection,
its two flags computed by nsys-ai's own patterns (``nsys_ai.parquet_cache``), so the skill runs
as it does on a cache. The class is flagged when the skill's overall tensor-core share is under
``tools.nsys_ai.tc_max_achieved_pct`` (nsys-ai's own fallback bar) with at least
``tools.nsys_ai.tc_min_inactive_ms`` of eligible time off the tensor cores (its own noise floor).
nsys-ai counts every ``xmma`` kernel as tensor-core work, cuBLAS's fp32 ``*_ffma_*`` ones
included: the adapter reports the tool as it is.

nsys-ai has no pattern for the GIL (``gil_contention`` is ``n/a``), nor for layouts, elementwise
chains, allocator churn or blocking writes; the other classes are ``clear`` where it looked and
matched nothing. An export without a CUDA kernel table (a CPU
capture; CUDA graphs traced as whole graphs) is one nsys-ai cannot read: every class ``n/a``.
"""

from __future__ import annotations

import logging
import re
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from bottlenecks import Klass
from harness.core.tools_config import NsysAiRules
from harness.tools import base
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


@contextmanager
def _connection(sqlite: Any) -> Iterator[sqlite3.Connection]:
    """A read-only connection to the export, nsys-ai's log notes quietened (its "DuckDB cache
    unavailable" note, once per sub-skill)."""
    quiet = logging.getLogger("nsys_ai")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    conn = sqlite3.connect(f"file:{sqlite}?mode=ro", uri=True)
    try:
        yield conn
    finally:
        conn.close()
        quiet.setLevel(level)


def root_causes(sqlite: Any) -> list[dict[str, Any]]:
    """nsys-ai's ``root_cause_matcher`` rows on the export (raises what nsys-ai raises)."""
    from nsys_ai.skills.registry import get_skill

    with _connection(sqlite) as conn:
        return list(get_skill("root_cause_matcher").execute(conn) or [])


def _kernels_view(conn: sqlite3.Connection) -> None:
    """nsys-ai's ``kernels`` view (``parquet_cache``: name, demangled, is_tc_eligible,
    uses_tc) as a temporary view, its flags by nsys-ai's own patterns (DuckDB's
    ``regexp_matches``: a search, on the lower-cased demangled-else-short name)."""
    from nsys_ai import parquet_cache as pc

    patterns = [re.compile(p.strip("'")) for p in (pc._TC_ELIGIBLE_PATTERN, pc._TC_ACTIVE_PATTERN)]

    def matches(name: str | None, which: int) -> int:
        return int(bool(patterns[which].search((name or "").lower())))

    conn.create_function("nsys_ai_matches", 2, matches, deterministic=True)
    name = "COALESCE(d.value, s.value, '')"
    conn.execute(f"""
        CREATE TEMP VIEW kernels AS
        SELECT k.*, COALESCE(d.value, s.value, 'kernel_' || CAST(k.shortName AS TEXT)) AS name,
               d.value AS demangled,
               CASE WHEN nsys_ai_matches({name}, 0) OR nsys_ai_matches({name}, 1)
                    THEN 1 ELSE 0 END AS is_tc_eligible,
               nsys_ai_matches({name}, 1) AS uses_tc
        FROM CUPTI_ACTIVITY_KIND_KERNEL k
        LEFT JOIN StringIds s ON k.shortName = s.id
        LEFT JOIN StringIds d ON k.demangledName = d.id
    """)


def tensor_core_rows(sqlite: Any) -> list[dict[str, Any]]:
    """nsys-ai's ``tensor_core_usage`` rows on the export (its top eligible kernels, each
    with its time on tensor cores), through the view :func:`_kernels_view` builds."""
    from nsys_ai.skills.registry import get_skill

    with _connection(sqlite) as conn:
        _kernels_view(conn)
        return list(get_skill("tensor_core_usage").execute(conn) or [])


def tensor_core_call(rows: list[dict[str, Any]], rules: NsysAiRules) -> Call:
    """fp32_math's call from tensor_core_usage's rows (pure: testable on any rows)."""
    if rows and "error" in rows[0]:
        return Call(Flag.NA, f"nsys-ai's tensor_core_usage: {rows[0]['error']}")
    total = sum(float(r["total_gpu_ms"]) for r in rows)
    if not total:
        return Call(Flag.CLEAR, "no tensor-core eligible kernels")
    active = sum(float(r["tc_active_ms"]) for r in rows)
    pct, inactive = 100 * active / total, total - active
    fallbacks = sum(bool(r.get("is_outlier")) for r in rows)
    hit = pct < rules.tc_max_achieved_pct and inactive >= rules.tc_min_inactive_ms
    text = (
        f"tensor_core_usage: TC achieved {pct:.1f}% of {total:.1f} ms eligible "
        f"({inactive:.1f} ms off tensor cores; {fallbacks} of {len(rows)} kernels flagged)"
    )
    return Call(Flag.FLAGGED if hit else Flag.CLEAR, text)


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
        return base.not_installed("nsys_ai.skills.registry", "nsys-ai")

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
        calls = calls_from(rows)
        try:
            tc = tensor_core_call(tensor_core_rows(traces.sqlite), ctx.tools.nsys_ai)
        except Exception as exc:  # the skill on an export it cannot read
            tc = Call(Flag.NA, f"nsys-ai's tensor_core_usage failed: {type(exc).__name__}: {exc}")
        return {**calls, Klass.FP32_MATH: tc}
