"""One reader per nsys table: kernels, copies, memsets, CUDA API calls, syncs, NVTX ranges
(with steps and the measured window), OS-runtime calls, threads and GPUs, each a typed frame
(:mod:`analysis.trace_schema`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pandas as pd

from analysis import trace_schema as S
from analysis.trace_db import Trace, TraceError
from analysis.trace_names import api_base_name, api_category
from analysis.trace_schema import (
    _col,
    _query,
    _sql,
    _stand_in,
    _typed,
    activity_sql,
    enum_table,
)
from bottlenecks import MEASURE, STEP


def tables(trace: Trace) -> set[str]:
    """Names of the tables in the export: which kinds of activity were recorded at all."""
    return set(trace.tables())


def nsys_version(trace: Trace) -> str | None:
    """The nsys version that wrote the export (e.g. '2022.4.2.1'), or None if not recorded.

    2022.4 keeps it in EXPORT_META_DATA, 2025.3 in META_DATA_EXPORT (row EXPORT_PRODUCT_VERSION).
    """
    for meta in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if trace.has(meta):
            _, rows = trace.query(_sql("nsys_version").format(meta_table=meta))
            if rows and rows[0][0]:
                return str(rows[0][0])
    return None


def kernels(trace: Trace) -> pd.DataFrame:
    """CUDA kernels on the GPU timeline, one row each (columns: :data:`KERNELS`).

    ``name`` is the demangled name; ``graph_node_id`` is set for kernels replayed from a CUDA graph.
    """
    t = "CUPTI_ACTIVITY_KIND_KERNEL"
    df = _query(
        trace,
        "kernels",
        S.KERNELS,
        table=t,
        subs={"graph_node_id": _col(trace, t, "graphNodeId", "k"), **activity_sql("k")},
    )
    return _typed(df, S.KERNELS, "kernels", trace)


def memcpy(trace: Trace) -> pd.DataFrame:
    """CUDA memory copies with direction, memory kinds and achieved rate (:data:`MEMCPY`).

    ``pageable`` marks copies whose host side is pageable memory (the staged, synchronous kind);
    kinds come from the export's ENUM_CUDA_MEMCPY_OPER / ENUM_CUDA_MEM_KIND tables.
    """
    t = "CUPTI_ACTIVITY_KIND_MEMCPY"
    subs = {
        "graph_node_id": _col(trace, t, "graphNodeId", "m"),
        "enum_copy_kind": enum_table(trace, "ENUM_CUDA_MEMCPY_OPER"),
        "enum_mem_kind": enum_table(trace, "ENUM_CUDA_MEM_KIND"),
        **activity_sql("m"),
    }
    df = _query(trace, "memcpy", S.MEMCPY, table=t, subs=subs)
    return _typed(df, S.MEMCPY, "memcpy", trace)


def memset(trace: Trace) -> pd.DataFrame:
    """CUDA memsets with their size, value and memory kind (:data:`MEMSET`)."""
    t = "CUPTI_ACTIVITY_KIND_MEMSET"
    subs = {
        "graph_node_id": _col(trace, t, "graphNodeId", "m"),
        "mem_kind": _col(trace, t, "memKind", "m"),
        "enum_mem_kind": enum_table(trace, "ENUM_CUDA_MEM_KIND"),
        **activity_sql("m"),
    }
    df = _query(trace, "memset", S.MEMSET, table=t, subs=subs)
    return _typed(df, S.MEMSET, "memset", trace)


def cuda_api(trace: Trace) -> pd.DataFrame:
    """CUDA runtime (and, in 2025.x exports, driver) API calls with a category (:data:`CUDA_API`).

    ``category`` (launch/sync/memcpy/memset/alloc/other) is what the bottleneck rules look at;
    it is computed once per distinct name, not per row.
    """
    t = "CUPTI_ACTIVITY_KIND_RUNTIME"
    subs = {"enum_event_class": enum_table(trace, "ENUM_NSYS_EVENT_CLASS")}
    df = _query(trace, "cuda_api", S.CUDA_API, table=t, subs=subs)
    names = pd.Series(df["name"].dropna().unique(), dtype=object)
    base = {n: api_base_name(n) for n in names}
    df["base_name"] = df["name"].map(base)
    df["category"] = df["base_name"].map({b: api_category(b) for b in set(base.values())})
    return _typed(df, S.CUDA_API, "cuda_api", trace)


def sync_events(trace: Trace) -> pd.DataFrame:
    """GPU-side synchronisation records: what the host waited on and for how long."""
    t = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
    subs = {"enum_sync_type": enum_table(trace, "ENUM_CUPTI_SYNC_TYPE")}
    df = _query(trace, "sync_events", S.SYNC_EVENTS, table=t, subs=subs)
    return _typed(df, S.SYNC_EVENTS, "sync_events", trace)


def _nvtx_query(
    trace: Trace,
    text: str | None,
    schema: Mapping[str, str],
    *,
    tid: int | None = None,
    spans: Iterable[tuple[int, int]] | None = None,
) -> pd.DataFrame:
    """NVTX ranges, all or those whose text equals ``text``, of thread ``tid`` and overlapping
    one of ``spans`` (all filtered in SQL)."""
    params: dict[str, object] = {"text": text}
    filters = ""
    if tid is not None:
        filters += " AND n.globalTid = :tid"
        params["tid"] = int(tid)
    if spans is not None:
        ors = []
        for i, (lo, hi) in enumerate(spans):
            ors.append(f'(n."end" > :lo{i} AND n.start < :hi{i})')
            params[f"lo{i}"], params[f"hi{i}"] = int(lo), int(hi)
        filters += f" AND ({' OR '.join(ors) or '0'})"
    subs = {
        "enum_event_type": enum_table(trace, "ENUM_NSYS_EVENT_TYPE"),
        "thread_names": "ThreadNames"
        if trace.has("ThreadNames")
        else _stand_in(("globalTid", "nameId")),
        "filters": filters,
    }
    return _query(trace, "nvtx_ranges", schema, table="NVTX_EVENTS", subs=subs, params=params)


def _nesting_depth(df: pd.DataFrame) -> list[object]:
    """Depth of each push/pop range among the push/pop ranges of its thread (0 = outermost).

    Push/pop ranges nest strictly per thread, so a sweep with a stack of open end times gives
    the depth in O(n log n); start/end ranges do not nest and get NA.
    """
    depth: list[object] = [pd.NA] * len(df)
    pp = df[(df["range_type"] == "push_pop") & df["end_ns"].notna()]
    if pp.empty:
        return depth
    order = pp.assign(_neg_end=-pp["end_ns"].astype("int64")).sort_values(
        ["global_tid", "start_ns", "_neg_end"], kind="stable"
    )
    pos = {label: i for i, label in enumerate(df.index)}
    stack: list[int] = []
    current = None
    for label, gtid, start, end in zip(
        order.index, order["global_tid"], order["start_ns"], order["end_ns"], strict=True
    ):
        if gtid != current:
            stack, current = [], gtid
        while stack and stack[-1] <= start:
            stack.pop()
        depth[pos[label]] = len(stack)
        stack.append(int(end))
    return depth


def nvtx_ranges(
    trace: Trace,
    *,
    tid: int | None = None,
    spans: Iterable[tuple[int, int]] | None = None,
) -> pd.DataFrame:
    """NVTX push/pop and start/end ranges with thread names and nesting depth (:data:`NVTX_RANGES`).

    These are the harness' phase markers (measure, step, data_load, forward, ...); marks are left
    out. ``depth`` counts enclosing push/pop ranges on the same thread. ``tid`` (a global tid)
    and ``spans`` ((start_ns, end_ns) pairs) read only that thread's ranges overlapping one of
    the spans, in SQL (a trace with per-operator ranges has millions); depths stay exact, since
    the ranges enclosing a range overlap whatever it overlaps. Ranges still open at the end of
    the capture overlap no span.
    """
    df = _nvtx_query(trace, None, S.NVTX_RANGES, tid=tid, spans=spans)
    df["depth"] = _nesting_depth(df)
    return _typed(df, S.NVTX_RANGES, "nvtx_ranges", trace)


def step_ranges(trace: Trace, name: str = STEP) -> pd.DataFrame:
    """The NVTX ranges called ``name`` (default ``step``), numbered 0..n-1 by start within each pid.

    One row per training/inference iteration the harness bracketed (:data:`STEP_RANGES`).
    Read once per name (each read scans every NVTX event; the detectors ask several times):
    each caller gets a copy of its own.
    """
    if name not in trace._steps:
        df = _nvtx_query(trace, name, S.STEP_RANGES)
        if not df.empty:
            df = df.sort_values(["pid", "start_ns"], kind="stable").reset_index(drop=True)
            df["step_index"] = df.groupby("pid", sort=False).cumcount()
        trace._steps[name] = _typed(df, S.STEP_RANGES, "step_ranges", trace)
    return trace._steps[name].copy()


def window(trace: Trace, name: str = MEASURE) -> tuple[int, int]:
    """(start_ns, end_ns) of the measured window: the NVTX range ``measure``, else all activity.

    The harness brackets its measured steps with ``measure``; with several (one per process) the
    window spans them all. Without one, the span of every recorded activity table is used.
    Raises :class:`TraceError` when the export holds no timed activity at all.
    """
    ranges = _nvtx_query(trace, name, S.NVTX_RANGES)
    ranges = ranges[ranges["end_ns"].notna()]
    if not ranges.empty:
        return int(ranges["start_ns"].min()), int(ranges["end_ns"].max())
    starts: list[int] = []
    ends: list[int] = []
    for table in S.ACTIVITY_TABLES:
        if trace.has(table):
            _, rows = trace.query(_sql("activity_span").format(table=table))
            lo, hi = rows[0]
            if lo is not None:
                starts.append(int(lo))
            if hi is not None:
                ends.append(int(hi))
    if not starts:
        raise TraceError(trace.path, "no recorded activity to take a window from")
    return min(starts), max(ends) if ends else max(starts)


def osrt(trace: Trace) -> pd.DataFrame:
    """OS runtime calls (file reads, waits, sleeps) per thread (:data:`OSRT`)."""
    df = _query(trace, "osrt", S.OSRT, table="OSRT_API")
    return _typed(df, S.OSRT, "osrt", trace)


def threads(trace: Trace) -> pd.DataFrame:
    """Every thread nsys saw, with its name and its process' name (:data:`THREADS`)."""
    subs = {
        "processes": "PROCESSES"
        if trace.has("PROCESSES")
        else _stand_in(("globalPid", "pid", "name"))
    }
    df = _query(trace, "threads", S.THREADS, table="ThreadNames", subs=subs)
    return _typed(df, S.THREADS, "threads", trace)


def gpu_info(trace: Trace) -> pd.DataFrame:
    """The GPUs of the profiled machine (:data:`GPU_INFO`); empty on CPU-only exports."""
    df = _query(trace, "gpu_info", S.GPU_INFO, table="TARGET_INFO_GPU")
    return _typed(df, S.GPU_INFO, "gpu_info", trace)
