"""What the frames of :mod:`analysis.trace` look like, and how a named query becomes one.

The column schemas (units in the names, nullable ints where nsys can leave a NULL) and the
plumbing that runs ``analysis/sql/<name>.sql`` with its placeholders filled from a fixed list
and casts the result, so that a full and an empty frame come out alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import cache
from importlib import resources

import pandas as pd

from analysis.trace_db import Trace, TraceError

# --- column schemas ----------------------------------------------------------------------------
# Columns that nsys declares NOT NULL are plain numpy ints; columns that can be NULL in some export
# (ids, correlation, optional columns) are pandas' nullable Int64. Text is the "string" dtype.
I64 = "int64"
NI64 = "Int64"
F64 = "float64"
STR = "string"
BOOL = "boolean"

#: Columns every GPU activity table's frame starts with: its times ...
_TIMES: dict[str, str] = {"start_ns": I64, "end_ns": I64, "duration_ns": I64}
#: ... and the ids that place it (device, stream, context, launch, process).
_IDS: dict[str, str] = {
    "device_id": NI64,
    "stream_id": NI64,
    "context_id": NI64,
    "correlation_id": NI64,
    "pid": NI64,
    "global_pid": NI64,
}

KERNELS: dict[str, str] = {
    **_TIMES,
    **_IDS,
    "name": STR,
    "short_name": STR,
    "grid_x": NI64,
    "grid_y": NI64,
    "grid_z": NI64,
    "block_x": NI64,
    "block_y": NI64,
    "block_z": NI64,
    "registers_per_thread": NI64,
    "static_shared_bytes": NI64,
    "dynamic_shared_bytes": NI64,
    "graph_node_id": NI64,
}

MEMCPY: dict[str, str] = {
    **_TIMES,
    "bytes": I64,
    "copy_kind": STR,
    "direction": STR,
    "src_kind": STR,
    "dst_kind": STR,
    "pageable": BOOL,
    **_IDS,
    "graph_node_id": NI64,
    "gbps": F64,
}

MEMSET: dict[str, str] = {
    **_TIMES,
    "bytes": I64,
    "value": NI64,
    "mem_kind": STR,
    **_IDS,
    "graph_node_id": NI64,
}


def activity_sql(alias: str) -> dict[str, str]:
    """The placeholders ``times`` and ``ids`` of an activity query (``sql/kernels.sql``,
    ``memcpy.sql``, ``memset.sql``): the :data:`_TIMES` and :data:`_IDS` columns of the table
    read as ``alias``."""
    a = alias
    times = [
        f"{a}.start AS start_ns",
        f'{a}."end" AS end_ns',
        f'{a}."end" - {a}.start AS duration_ns',
    ]
    ids = [f"{a}.deviceId AS device_id", f"{a}.streamId AS stream_id"]
    ids += [f"{a}.contextId AS context_id", f"{a}.correlationId AS correlation_id"]
    ids += [f"({a}.globalPid >> 24) & 16777215 AS pid", f"{a}.globalPid AS global_pid"]
    return {"times": ",\n    ".join(times), "ids": ",\n    ".join(ids)}


CUDA_API: dict[str, str] = {
    "start_ns": I64,
    "end_ns": I64,
    "duration_ns": I64,
    "name": STR,
    "base_name": STR,
    "category": STR,
    "api": STR,
    "correlation_id": NI64,
    "pid": NI64,
    "tid": NI64,
    "global_tid": NI64,
    "return_value": NI64,
}

SYNC_EVENTS: dict[str, str] = {
    "start_ns": I64,
    "end_ns": I64,
    "duration_ns": I64,
    "sync_type": STR,
    "device_id": NI64,
    "stream_id": NI64,
    "context_id": NI64,
    "correlation_id": NI64,
    "event_id": NI64,
    "pid": NI64,
    "global_pid": NI64,
}

NVTX_RANGES: dict[str, str] = {
    "start_ns": I64,
    "end_ns": NI64,  # a range still open when the capture stopped has no end
    "duration_ns": NI64,
    "text": STR,
    "domain": STR,
    "range_type": STR,
    "pid": NI64,
    "tid": NI64,
    "global_tid": NI64,
    "thread_name": STR,
    "domain_id": NI64,
    "category": NI64,
    "depth": NI64,
}

STEP_RANGES: dict[str, str] = {
    "step_index": I64,
    **{k: v for k, v in NVTX_RANGES.items() if k != "depth"},
}

OSRT: dict[str, str] = {
    "start_ns": I64,
    "end_ns": I64,
    "duration_ns": I64,
    "name": STR,
    "pid": NI64,
    "tid": NI64,
    "global_tid": NI64,
    "return_value": NI64,
    "nesting_level": NI64,
}

THREADS: dict[str, str] = {
    "global_tid": NI64,
    "pid": NI64,
    "tid": NI64,
    "thread_name": STR,
    "process_name": STR,
}

GPU_INFO: dict[str, str] = {
    "device_id": NI64,
    "cuda_device": NI64,
    "name": STR,
    "chip_name": STR,
    "bus_location": STR,
    "uuid": STR,
    "total_memory_bytes": NI64,
    "memory_bandwidth_bytes_per_s": NI64,
    "l2_cache_bytes": NI64,
    "clock_rate_hz": NI64,
    "sm_count": NI64,
    "compute_major": NI64,
    "compute_minor": NI64,
    "async_engines": NI64,
    "threads_per_warp": NI64,
}

#: Tables whose rows are timed activity (start, end); window() spans them when there is no
#: `measure` range.
ACTIVITY_TABLES = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "NVTX_EVENTS",
    "OSRT_API",
)


# --- named queries into typed frames -------------------------------------------------------------


@cache
def _sql(name: str) -> str:
    """Text of ``analysis/sql/<name>.sql`` (package data, so it works from a wheel too)."""
    return resources.files("analysis").joinpath("sql", f"{name}.sql").read_text(encoding="utf-8")


def _stand_in(columns: Iterable[str]) -> str:
    """A zero-row subquery with these columns (and rowid), used in place of a missing table."""
    cols = ", ".join(f"NULL AS {c}" for c in (*columns, "rowid"))
    return f"(SELECT {cols} WHERE 0)"


def enum_table(trace: Trace, table: str) -> str:
    """A table expression with columns (id, name, label) for the nsys enum ``table`` (ENUM_*).

    nsys stores kinds (copy kind, memory kind, sync type, event class, ...) as integer ids whose
    meaning lives in ENUM_* tables of the same export; ids differ between nsys versions, so
    queries join the enum and test its ``name`` (e.g. ``name LIKE '%PAGEABLE'``) rather than
    hard-coding ids. Use the result in SQL where a table goes (``LEFT JOIN {expr} AS ck ON
    ck.id = m.copyKind``). It is the table itself when it has ``label``; older exports have some
    enums with only (id, name), so ``name`` stands in for the label; a missing enum becomes a
    zero-row stand-in. ``table`` must be a name from the nsys schema, never caller input.
    """
    if not trace.has(table):
        return _stand_in(("id", "name", "label"))
    if trace.has(table, "label"):
        return table
    return f"(SELECT id, name, name AS label FROM {table})"


def _col(trace: Trace, table: str, column: str, alias: str) -> str:
    """``alias.column`` if the export's table has that column, else ``NULL``."""
    return f"{alias}.{column}" if trace.has(table, column) else "NULL"


def _typed(df: pd.DataFrame, schema: Mapping[str, str], what: str, trace: Trace) -> pd.DataFrame:
    """Put ``df`` in the schema's column order and dtypes, the same for full and empty frames."""
    missing = [c for c in schema if c not in df.columns]
    if missing:
        raise RuntimeError(f"{what}: query lacks columns {missing}")  # a bug in analysis/sql
    df = df[list(schema)]
    try:
        return df.astype(dict(schema))
    except (TypeError, ValueError) as exc:
        raise TraceError(
            trace.path, f"{what} has values that do not fit its schema: {exc}"
        ) from exc


def _query(
    trace: Trace,
    name: str,
    schema: Mapping[str, str],
    *,
    table: str | None,
    subs: Mapping[str, str] | None = None,
    params: Mapping[str, object] | None = None,
) -> pd.DataFrame:
    """Run ``sql/<name>.sql`` into an object-dtype frame (zero rows when ``table`` is absent).

    Columns of ``schema`` that the SQL does not return (derived in Python) come back as empty
    object columns for the caller to fill; :func:`_typed` then applies the dtypes, so full and
    empty frames come out alike.
    """
    if table is not None and not trace.has(table):
        rows: list[tuple[object, ...]] = []
        cols = list(schema)
    else:
        cols, rows = trace.query(_sql(name).format_map(dict(subs or {})), params)
    # dtype=object keeps SQLite's integers exact until _typed casts them (no float round trip).
    df = pd.DataFrame(rows, columns=cols, dtype=object)
    for c in schema:
        if c not in df.columns:
            df[c] = pd.Series([None] * len(df), dtype=object)
    return df
