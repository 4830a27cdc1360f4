"""GPU activity in the window: kernels, copies, memsets and graph replays as aligned numpy
arrays (:class:`Activity`), read with one scan per GPU table and cached."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from analysis import trace as T
from analysis.detect.config import WindowThresholds
from analysis.detect.view._arrays import _lex_order, rows_where
from analysis.detect.view._intervals import union
from analysis.detect.view._reads import (
    _WINDOW_OR_START,
    GRAPH,
    KERNEL,
    MEMCPY,
    MEMSET,
    _end_back,
    _end_column,
    enum_ids,
    id_list,
    per_process_corr,
    scoped_corr,
    string_ids,
    trace_cache,
)
from analysis.detect.view._window import Steady, steady

__all__ = [
    "DIRECTIONS",
    "DTOH",
    "HTOD",
    "KIND_GRAPH",
    "KIND_KERNEL",
    "KIND_MEMCPY",
    "KIND_MEMSET",
    "Activity",
    "activity_ready",
    "busy",
    "gpu_activity",
    "gpu_starts",
    "kernel_names",
    "kernel_table_rows",
    "steady_activity",
]

#: Activity.kind codes (a graph replay traced at graph level is one item: its span is busy).
KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET, KIND_GRAPH = 0, 1, 2, 3
#: Activity.direction codes: index into this tuple (memcpy rows; 0 for the rest).
DIRECTIONS = ("other", "HtoD", "DtoH", "DtoD")
HTOD, DTOH = 1, 2


@dataclass(frozen=True)
class Activity:
    """Kernels, memcpys and memsets overlapping the window, clipped to it, as aligned arrays.

    Sorted by (start, end), ties in table order (kernels, then copies, then memsets, each by
    rowid). ``corr`` is -1 where the export has no correlation id; ``rowid`` is the row in the
    activity's own table (to fetch a kernel's name for evidence, see :func:`kernel_names`).
    Copy fields (``nbytes``, ``direction``, ``pageable``) are 0 on kernels and memsets.
    ``device`` is the row's CUDA deviceId and ``stream`` its streamId (0 where the export has no
    such column, as memsets have no stream; filled with zeros when an Activity is built without
    them, so older callers keep working).
    """

    start: np.ndarray
    end: np.ndarray
    kind: np.ndarray
    corr: np.ndarray
    rowid: np.ndarray
    nccl: np.ndarray
    nbytes: np.ndarray
    direction: np.ndarray
    pageable: np.ndarray
    device: np.ndarray = None  # type: ignore[assignment]
    stream: np.ndarray = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        for name in ("device", "stream"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, np.zeros(self.start.size, np.int64))

    def __len__(self) -> int:
        return int(self.start.size)

    def take(self, idx: np.ndarray) -> Activity:
        """The rows at ``idx`` (an index or boolean array), in that order."""
        if idx.dtype == bool:  # a few rows out of millions: index once, not per field
            idx = np.flatnonzero(idx)
        return Activity(**{f: getattr(self, f)[idx] for f in self.__dataclass_fields__})


def steady_activity(trace: T.Trace, window: WindowThresholds) -> tuple[Steady, Activity]:
    """The steady-state window and the GPU activity inside it: what most detectors start from."""
    st = steady(trace, window)
    return st, gpu_activity(trace, st.lo, st.hi)


def _gpu_columns(trace: T.Trace, table: str) -> dict[str, str]:
    """Columns read of one GPU table: times, ids, the device and (except memsets) the stream."""
    cols = {"start": "t.start", "end": _end_column(trace, table), "corr": "t.correlationId"}
    cols["rowid"] = "t.rowid"
    if trace.has(table, "deviceId"):
        cols["device"] = "t.deviceId"
    if table != MEMSET:
        cols["stream"] = "t.streamId" if trace.has(table, "streamId") else "0"
    if per_process_corr(trace) and trace.has(table, "globalPid"):
        cols["pid"] = "t.globalPid"  # folded into the correlation id, then dropped
    if table == KERNEL:
        nccl = string_ids(trace, "%nccl%")
        if nccl:
            ids = id_list(nccl)
            exact = (
                "CASE WHEN t.demangledName IN (SELECT id FROM StringIds) "
                f"THEN t.demangledName IN ({ids}) ELSE t.shortName IN ({ids}) END"
            )
            # the same value; the look-up in StringIds only where the cheap tests cannot tell
            cols["nccl"] = (
                f"CASE WHEN t.demangledName IN ({ids}) THEN 1 WHEN t.shortName IN ({ids}) "
                f"OR t.shortName IS NULL OR t.demangledName IS NULL THEN COALESCE({exact}, 0) "
                "ELSE 0 END"
            )
    if table == MEMCPY:
        ops = "ENUM_CUDA_MEMCPY_OPER"
        htod, dtoh = enum_ids(trace, ops, "%HTOD"), enum_ids(trace, ops, "%DTOH")
        dtod = enum_ids(trace, ops, "%DTOD")
        pg = id_list(enum_ids(trace, "ENUM_CUDA_MEM_KIND", "%PAGEABLE"))
        cols["nbytes"] = "COALESCE(t.bytes, 0)"
        cols["direction"] = (
            f"CASE WHEN t.copyKind IN ({id_list(htod)}) THEN 1 WHEN t.copyKind IN ({id_list(dtoh)}) "
            f"THEN 2 WHEN t.copyKind IN ({id_list(dtod)}) THEN 3 ELSE 0 END"
        )
        cols["pageable"] = f"COALESCE(t.srcKind IN ({pg}) OR t.dstKind IN ({pg}), 0)"
    return cols


def _gpu_pack(trace: T.Trace, table: str, cols: dict[str, str]) -> list[T.Pack]:
    """Pairs of :func:`_gpu_columns` read as one value (see ``T.int_columns``): the rowid under
    the correlation id, the NCCL flag under the duration."""
    pack: list[T.Pack] = []
    bits = T.id_bits(trace, table)
    if bits is not None:
        pack.append(("corr", "rowid", bits))
    if "nccl" in cols and cols["end"] != 't."end"':
        pack.append(("end", "nccl", 1))
    return pack


#: GPU tables in Activity's tie order, with their Activity.kind code.
_GPU_KINDS = (
    (KERNEL, KIND_KERNEL),
    (MEMCPY, KIND_MEMCPY),
    (MEMSET, KIND_MEMSET),
    (GRAPH, KIND_GRAPH),
)


#: Cache key of every kernel row's rowid, name id and launch size (:func:`kernel_table_rows`).
KERNEL_ROWS = "kernel_rows"


def kernel_table_rows(trace: T.Trace) -> dict[str, np.ndarray] | None:
    """Every kernel row's ``row`` (rowid), ``name`` (its demangled name's id, else its short
    name's; -1 where NULL) and ``grid`` (threads), where :func:`gpu_activity`'s scan of the
    kernel table read them (None where it did not): the GPU-side detectors' names and launch
    sizes then cost no second scan of the biggest table."""
    return trace_cache(trace).get(KERNEL_ROWS)


def _kernel_launch_columns(trace: T.Trace) -> tuple[dict[str, str], list[T.Pack]] | None:
    """The columns :func:`kernel_table_rows` holds, as read beside the activity's (the name
    under the launch size), or None where the kernel table's times can be NULL (the window's
    test is then SQL's alone)."""
    if _end_column(trace, KERNEL) == 't."end"':
        return None
    name = "demangledName" if trace.has(KERNEL, "demangledName") else "shortName"
    grid = "t.gridX * t.gridY * t.gridZ * t.blockX * t.blockY * t.blockZ"
    grid = f"COALESCE({grid}, 0)" if trace.has(KERNEL, "gridX") else "0"
    bits = T.name_bits(trace, KERNEL, name)
    cols = {"name": f"COALESCE(t.{name}, -1)", "grid": grid}
    return cols, [] if bits is None else [("grid", "name", bits)]


def _read_table(trace: T.Trace, table: str, lo: int, hi: int) -> dict[str, np.ndarray]:
    """One GPU table's rows overlapping or starting in [lo, hi]; of the kernel table, every
    row with its names and launch sizes (:func:`kernel_table_rows`), the window's test then
    made here, as SQL's ``_WINDOW_OR_START`` makes it (times that cannot be NULL)."""
    cols = _gpu_columns(trace, table)
    pack = _gpu_pack(trace, table, cols)
    params = {"lo": lo, "hi": hi}
    extra = _kernel_launch_columns(trace) if table == KERNEL else None
    if extra is not None and KERNEL_ROWS not in trace_cache(trace):
        try:
            part = T.int_columns(trace, table, cols | extra[0], "1", pack=pack + extra[1])
        except T.TraceError:  # a launch size past int64: the kernels' own read has its way
            extra = None
        else:
            part = _end_back(trace, table, part)
            trace_cache(trace)[KERNEL_ROWS] = {
                "row": part["rowid"].copy(), "name": part.pop("name"), "grid": part.pop("grid")
            }  # fmt: skip
            s = part["start"]
            return rows_where(part, (s < hi) & ((part["end"] > lo) | (s >= lo)))
    part = T.int_columns(trace, table, cols, _WINDOW_OR_START, params, pack=pack)
    return _end_back(trace, table, part)


def _read_gpu(trace: T.Trace, lo: int, hi: int) -> tuple[list[dict[str, np.ndarray]], list]:
    """One scan per GPU table: (rows overlapping [lo, hi] per table, every row read of the
    kernels, graph replays and copies for :func:`gpu_starts`)."""
    parts: list[dict[str, np.ndarray]] = []
    starts: dict[int, dict[str, np.ndarray]] = {}  # every row read: overlapping or starting
    for table, kind in _GPU_KINDS:
        if not trace.has(table):
            continue
        part = _read_table(trace, table, lo, hi)
        if "pid" in part:
            part["corr"] = scoped_corr(part["corr"], part.pop("pid"))
        if kind != KIND_MEMSET:
            starts[kind] = {k: part[k] for k in ("start", "corr", "stream")}
        part = rows_where(part, part["end"] > lo)
        part["kind"] = np.full(part["start"].size, kind, np.int8)
        parts.append(part)
    return parts, [starts[k] for k in (KIND_KERNEL, KIND_GRAPH, KIND_MEMCPY) if k in starts]


def _gpu_read(trace: T.Trace, lo: int, hi: int) -> list[dict[str, np.ndarray]]:
    """:func:`_read_gpu`'s rows per table (cached until :func:`gpu_activity` takes them), its
    every row read cached for :func:`gpu_starts`: which thread launched what is then known
    before the Activity is built (the OS-runtime read of those threads starts sooner)."""
    key = ("gpu_parts", lo, hi)
    cache = trace_cache(trace)
    if key not in cache:
        cache[key], cache[("gpu_starts", lo, hi)] = _read_gpu(trace, lo, hi)
    return cache[key]


def gpu_activity(trace: T.Trace, lo: int, hi: int) -> Activity:
    """Kernels, memcpys, memsets and graph replays overlapping [lo, hi], clipped to it (cached).

    Read as numpy columns with :func:`analysis.trace.int_columns` (no per-row Python objects);
    an NCCL kernel is one whose demangled name (else short name) contains ``nccl``: the string
    table is searched once and the kernels are tested against those ids in SQL. Copy direction
    and pageability come from the export's ENUM_CUDA_MEMCPY_OPER / ENUM_CUDA_MEM_KIND.
    """
    key = ("gpu", lo, hi)
    cache = trace_cache(trace)
    if key in cache:
        return cache[key]
    parts = _gpu_read(trace, lo, hi)
    del cache[("gpu_parts", lo, hi)]  # the Activity holds them from here on

    def col(name: str, dtype: Any) -> np.ndarray:
        if len(parts) == 1 and name in parts[0]:
            return parts[0][name].astype(dtype, copy=False)
        out = np.zeros(sum(part["start"].size for part in parts), dtype)  # 0 where absent
        at = 0
        for part in parts:  # each table's values cast into place, as astype casts them
            n = part["start"].size
            if name in part:
                out[at : at + n] = part[name]
            at += n
        return out

    # np.maximum / np.minimum: np.clip with one bound None is ten times slower on int64; in
    # place where col joined the tables into an array of its own (a lone table's column is
    # shared with gpu_starts' rows)
    own = len(parts) != 1
    start, end = col("start", np.int64), col("end", np.int64)
    start = np.maximum(start, lo, out=start if own else None)
    end = np.minimum(end, hi, out=end if own else None)
    order = _lex_order(start, end)  # stable: ties keep kernels, copies, memsets, rowid order
    fields = {"start": (start, None), "end": (end, None), "kind": ("kind", np.int8)}
    fields |= {f: (f, np.int64) for f in ("corr", "rowid", "nbytes", "device", "stream")}
    fields |= {"nccl": ("nccl", bool), "direction": ("direction", np.int8)}
    fields["pageable"] = ("pageable", bool)
    # each table's values go straight to their sorted places (no concatenation to reorder)
    dest = None if order is None else _inverse(order)
    arrays = {}
    for f, (src, dtype) in fields.items():
        if dtype is None:
            arrays[f] = src if order is None else src[order]
        else:
            arrays[f] = col(src, dtype) if dest is None else _placed(parts, src, dtype, dest)
    cache[key] = act = Activity(**arrays)
    activity_ready(trace).set()
    return act


def activity_ready(trace: T.Trace) -> threading.Event:
    """Set once :func:`gpu_activity` has built an Activity of ``trace``: what work that reads
    it alone, on another thread, waits for (it is not read twice)."""
    return trace_cache(trace).setdefault(ACTIVITY_READY, threading.Event())


#: Cache key of :func:`activity_ready`'s event.
ACTIVITY_READY = "activity_ready"


def _inverse(order: np.ndarray) -> np.ndarray:
    """The permutation that undoes ``order``: where each row goes."""
    dest = np.empty(order.size, np.intp)
    dest[order] = np.arange(order.size)
    return dest


def _placed(
    parts: list[dict[str, np.ndarray]], name: str, dtype: Any, dest: np.ndarray
) -> np.ndarray:
    """Column ``name`` of the tables ``parts`` (0 where a table has none), each row put at
    ``dest`` and cast as assignment casts. A table whose values are all 0 (the kernels' kind
    code, NCCL flag and device on one GPU) is left out: its places hold 0 already, and one
    pass over its values costs less than scattering millions of them."""
    out = np.zeros(dest.size, dtype)
    at = 0
    for part in parts:
        n = part["start"].size
        if name in part and part[name].any():
            out[dest[at : at + n]] = part[name]
        at += n
    return out


def gpu_starts(
    trace: T.Trace,
    lo: int,
    hi: int,
    a: int,
    b: int,
    names: tuple[str, ...] = ("start", "corr", "stream"),
) -> dict[str, np.ndarray]:
    """Kernels, graph replays and copies whose (unclipped) start lies in [a, b) (within the
    window [lo, hi)): start, corr and stream (0 where the table has none), tables in that
    order, each in rowid order. Read by the same scan as :func:`gpu_activity`. ``names``:
    the columns wanted (each joined over millions of rows)."""
    if ("gpu_starts", lo, hi) not in trace_cache(trace):
        _gpu_read(trace, lo, hi)
    a, b = max(a, lo), min(b, hi)
    found = []
    for part in trace_cache(trace)[("gpu_starts", lo, hi)]:
        keep = (part["start"] >= a) & (part["start"] < b)
        found.append(rows_where({n: part[n] for n in names}, keep))
    if not found:
        return {n: np.zeros(0, np.int64) for n in names}
    return {n: np.concatenate([f[n] for f in found]) for n in names}


def busy(trace: T.Trace, st: Steady, act: Activity) -> tuple[np.ndarray, np.ndarray]:
    """The union of all GPU activity in the window (cached with the activity)."""
    key = ("busy", st.lo, st.hi)
    cache = trace_cache(trace)
    if key not in cache:
        cache[key] = union(act.start, act.end)
    return cache[key]


def kernel_names(trace: T.Trace, rowids: Any) -> list[str | None]:
    """Short names of the kernels at these rowids of the kernel table (None where unknown)."""
    rowids = [int(r) for r in rowids]
    if not rowids or not trace.has(KERNEL):
        return [None] * len(rowids)
    sql = f"""SELECT t.rowid, s.value FROM {KERNEL} AS t
              LEFT JOIN StringIds AS s ON s.id = t.shortName WHERE t.rowid IN ({id_list(rowids)})"""
    found = dict(trace.query(sql)[1])
    return [found.get(r) for r in rowids]
