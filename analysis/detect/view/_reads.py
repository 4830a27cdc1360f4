"""How the detectors read an export: the per-trace cache, window-bounded SQL and its id lists,
and reads run ahead on a thread of their own.

Every result a detector reads is cached on the Trace (:func:`trace_cache`), so running all of them
scans each table once; a big scan can start early (:func:`_read_ahead`) and be waited for
where it is used (:func:`_resolved`).
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

import numpy as np

from analysis import trace as T
from analysis.detect.view._arrays import process_of

__all__ = [
    "GPU_TABLES",
    "GRAPH",
    "KERNEL",
    "MEMCPY",
    "MEMSET",
    "RUNTIME",
    "WINDOW",
    "enum_ids",
    "has_gpu",
    "id_list",
    "name_ids",
    "per_process_corr",
    "scoped_corr",
]

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
GRAPH = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
#: Tables of GPU-side activity: any one of them makes a report a GPU capture.
GPU_TABLES = (KERNEL, MEMCPY, MEMSET, GRAPH)


def has_gpu(trace: T.Trace) -> bool:
    """Whether the report recorded any GPU activity (kernels, copies, memsets, graph replays)."""
    return any(trace.has(t) for t in GPU_TABLES)


def trace_cache(trace: T.Trace) -> dict[Any, Any]:
    """The detectors' cache on ``trace``: it lives and dies with the open export."""
    cache = getattr(trace, "_detect_cache", None)
    if cache is None:
        cache = {}
        trace._detect_cache = cache  # type: ignore[attr-defined]
    return cache


#: nsys's TARGET_INFO table of the CUDA contexts (one row per context, with its process id).
CONTEXTS = "TARGET_INFO_CUDA_CONTEXT_INFO"


def per_process_corr(trace: T.Trace) -> bool:
    """Whether the export holds CUDA contexts of more than one process (DDP's ranks, a
    pipeline's stages): CUPTI numbers each process's calls from 1, so two ranks' correlation ids
    collide, and a call is the launch of an item only within its own process (cached)."""
    cache = trace_cache(trace)
    if "per_process_corr" not in cache:
        many = trace.has(CONTEXTS, "processId") and bool(
            trace.query(f"SELECT COUNT(DISTINCT processId) > 1 FROM {CONTEXTS}")[1][0][0]
        )
        cache["per_process_corr"] = many
    return cache["per_process_corr"]


def scoped_corr(corr: np.ndarray, global_id: np.ndarray) -> np.ndarray:
    """Correlation ids made unique across processes: the process id (bits 24-47 of nsys's
    globalTid and globalPid) above bit 32 (CUPTI's ids are 32-bit); -1 (none) stays."""
    pid = process_of(global_id)
    return np.where(corr >= 0, corr + (pid << 32), corr)


def _scalar(trace: T.Trace, sql: str) -> tuple[Any, ...]:
    _, rows = trace.query(sql)
    return rows[0]


def id_list(values: Any) -> str:
    """A literal SQL list of integer ids (values are ints read from the export, never text)."""
    return ", ".join(str(int(v)) for v in values)


def enum_ids(trace: T.Trace, table: str, pattern: str) -> list[int]:
    """Ids of the nsys enum ``table`` whose name is LIKE ``pattern`` (cached)."""
    key = ("enum", table, pattern)
    cache = trace_cache(trace)
    if key not in cache:
        sql = f"SELECT id FROM {T.enum_table(trace, table)} WHERE name LIKE :p"
        cache[key] = sorted(int(r[0]) for r in trace.query(sql, {"p": pattern})[1])
    return cache[key]


def name_ids(trace: T.Trace, names: tuple[str, ...] | list[str]) -> list[int]:
    """StringIds ids of exactly these names ([] for none, or a report without StringIds)."""
    if not names or not trace.has("StringIds"):
        return []
    marks = ", ".join(f":n{i}" for i in range(len(names)))
    sql = f"SELECT id FROM StringIds WHERE value IN ({marks})"
    return [int(r[0]) for r in trace.query(sql, {f"n{i}": n for i, n in enumerate(names)})[1]]


def string_ids(trace: T.Trace, pattern: str) -> list[int]:
    """Ids of StringIds whose value is LIKE ``pattern`` (cached)."""
    key = ("strings", pattern)
    cache = trace_cache(trace)
    if key not in cache:
        rows = trace.query("SELECT id FROM StringIds WHERE value LIKE :p", {"p": pattern})[1]
        cache[key] = sorted(int(r[0]) for r in rows)
    return cache[key]


#: SQL condition: row ``t`` overlaps the window (:lo, :hi).
WINDOW = 't."end" > :lo AND t.start < :hi'
#: SQL condition: row ``t`` overlaps the window or starts in it: what :func:`gpu_activity` reads,
#: so that one scan per table also serves :func:`gpu_starts` (the overlap test is redone in numpy).
_WINDOW_OR_START = 't.start < :hi AND (t."end" > :lo OR t.start >= :lo)'


def _end_column(trace: T.Trace, table: str) -> str:
    """How ``end`` is read: as its distance from ``start`` where neither can be NULL (a few
    digits instead of a dozen: formatting and parsing the numbers is most of a big read)."""
    return 't."end" - t.start' if {"start", "end"} <= trace.not_null(table) else 't."end"'


def _end_back(trace: T.Trace, table: str, cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Undo :func:`_end_column` on the arrays read (in place)."""
    if _end_column(trace, table) != 't."end"':
        cols["end"] += cols["start"]
    return cols


def _name_under_duration(trace: T.Trace, table: str, cols: dict[str, str]) -> list[T.Pack]:
    """The ``name`` column (nameId) read under ``end`` (see ``T.int_columns``' ``pack``) where
    ``end`` is read as a duration, which leaves room for the id's bits."""
    bits = T.name_bits(trace, table, "nameId")
    return [("end", "name", bits)] if bits is not None and cols["end"] != 't."end"' else []


def _read_ahead(trace: T.Trace, key: Any, name: str, read: Any) -> None:
    """Run ``read(a Trace of its own)`` on a thread of its own, its Future cached under ``key``
    (:func:`_resolved` waits for it): a scan of a big table then runs beside the numpy work
    (and the other reads) of the thread that asked for it, on a second core."""
    ahead: Future = Future()

    def run() -> None:  # a thread per read, gone when done: nothing idle is left to a fork
        try:
            with T.open_trace(trace.path, source=trace.source) as own:
                ahead.set_result(read(own))
        except BaseException as exc:
            ahead.set_exception(exc)

    threading.Thread(target=run, name=name, daemon=True).start()
    trace_cache(trace)[key] = ahead


def _resolved(cache: dict[Any, Any], key: Any) -> Any:
    """``cache[key]``, once a read started by :func:`_read_ahead` has finished."""
    if isinstance(cache[key], Future):
        cache[key] = cache[key].result()
    return cache[key]
