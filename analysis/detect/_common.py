"""Shared pieces of the detectors: the steady-state window, GPU activity in it, interval maths.

Everything is read with window-bounded SQL (only rows overlapping the window, only the columns
needed). The big tables (kernels, CUDA API calls) come back as numpy arrays through
:func:`analysis.trace.int_columns`, never as per-row Python objects or pandas frames; names and
kinds are resolved once per distinct id (StringIds, ENUM_*), as id sets in SQL or a lookup
table in numpy. Results are cached on the Trace object, so running all five detectors scans
each table once: one scan per GPU table (:func:`gpu_activity`, which also serves
:func:`gpu_starts`) and one of the API table (:func:`window_calls`, whose rows host_sync,
launch_bound and the host view all take theirs from). Rows come back from SQLite in time order
as a rule, so sorts and unique-passes check for that first and skip the work.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from analysis import trace as T
from analysis.detect import _steady as S
from analysis.findings import Finding, State

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


@dataclass(frozen=True)
class Steady:
    """The steady-state window the detectors judge, and what a "step" is in it.

    mode ``nvtx``: the harness' ``measure`` range with its ``step`` ranges (``n_steps`` of them on
    ``step_tid``, ``step_ns`` their summed duration). mode ``activity``: no step ranges (an
    arbitrary report), so the window is the GPU activity (or all activity) minus a start-up share,
    ``n_steps`` is None and rates are per second.
    """

    lo: int
    hi: int
    mode: str
    n_steps: int | None
    step_ns: int
    step_tid: int | None
    note: str
    min_call_ns: int = 0
    """Shorter CUDA API calls of no role (not launch, sync, copy, set, alloc) are not read."""
    edges: np.ndarray | None = field(default=None, compare=False, repr=False)
    """Mode ``iterations``: the found iterations' edges (ns, n + 1 of them); None otherwise."""
    edges_on_host: bool = False
    """Whether ``edges`` are host times (NVTX ranges) rather than GPU item starts."""
    untrusted: str | None = None
    """Mode ``activity`` on a GPU report: why the GPU work found repeating was not taken as
    the loop (:func:`analysis.detect._steady.gpu_search`); None when nothing repeated."""

    @property
    def span_ns(self) -> int:
        return max(1, self.hi - self.lo)

    @property
    def per_step(self) -> bool:
        return self.n_steps is not None and self.n_steps > 0

    def rate(self, name: str, count: float) -> tuple[str, float]:
        """``(<name>_per_step, count / steps)`` with steps, else ``(<name>_per_s, count / s)``."""
        if self.per_step:
            return f"{name}_per_step", float(count) / float(self.n_steps)  # type: ignore[arg-type]
        return f"{name}_per_s", float(count) / (self.span_ns / 1e9)


def _cache(trace: T.Trace) -> dict[Any, Any]:
    cache = getattr(trace, "_detect_cache", None)
    if cache is None:
        cache = {}
        trace._detect_cache = cache  # type: ignore[attr-defined]
    return cache


def _scalar(trace: T.Trace, sql: str) -> tuple[Any, ...]:
    _, rows = trace.query(sql)
    return rows[0]


def activity_span(trace: T.Trace) -> tuple[int, int] | None:
    """First start and last end over every activity table (what nsys captured at all)."""
    lo: list[int] = []
    hi: list[int] = []
    for table in T.ACTIVITY_TABLES:
        if trace.has(table):
            a, b = _scalar(trace, f'SELECT MIN(start), MAX("end") FROM {table}')
            if a is not None:
                lo.append(int(a))
                hi.append(int(b if b is not None else a))
    return (min(lo), max(hi)) if lo else None


def steady(trace: T.Trace, cfg: Mapping[str, Any]) -> Steady:
    """The steady-state window (cached per trace and settings)."""
    wcfg = cfg.get("window", {})
    use_nvtx = bool(wcfg.get("use_nvtx", True))
    skip = float(wcfg.get("startup_skip_share", 0.2))
    min_call_ns = int(wcfg.get("min_call_ns", 1000))
    key = ("steady", repr(sorted(wcfg.items())))  # every window setting decides the window
    cache = _cache(trace)
    if key in cache:
        return cache[key]
    result, untrusted = None, None
    if use_nvtx:
        result = _suite_window(trace)
    if result is None:
        result, untrusted = _iteration_window(trace, wcfg)
    if result is None:
        result = replace(_activity_window(trace, skip), untrusted=untrusted)
    cache[key] = result = replace(result, min_call_ns=min_call_ns)
    return result


def _suite_window(trace: T.Trace) -> Steady | None:
    """The harness' own window: `measure` with its `step` ranges, or None."""
    steps = T.step_ranges(trace)
    steps = steps[steps["end_ns"].notna()]
    if steps.empty:
        return None
    lo, hi = T.window(trace)
    inside = steps[(steps["start_ns"] >= lo) & (steps["end_ns"] <= hi)]
    if inside.empty:
        return None
    tid = int(inside["global_tid"].value_counts().index[0])
    mine = inside[inside["global_tid"] == tid]
    return Steady(
        lo, hi, "nvtx", len(mine), int(mine["duration_ns"].sum()), tid,
        f"NVTX window: {len(mine)} step ranges inside `measure`",
    )  # fmt: skip


def _iteration_window(trace: T.Trace, wcfg: Mapping[str, Any]) -> tuple[Steady | None, str | None]:
    """Repeating iterations found in the GPU work (else in NVTX ranges of any name); without
    them, why the GPU work that repeats is not the loop (None: nothing repeats)."""
    if not bool(wcfg.get("find_iterations", True)):
        return None, None
    it, untrusted = S.gpu_search(trace, wcfg) if has_gpu(trace) else (None, None)
    it = it or S.nvtx_iterations(trace, wcfg)
    if it is None:
        return None, untrusted
    lo, hi = int(it.starts[0]), int(it.starts[-1])
    tids = launcher_tids(trace, lo, hi, most_first=True)
    return Steady(
        lo, hi, "iterations", it.n, hi - lo, int(tids[0]) if tids.size else None,
        f"steady state: {it.n} iterations of {it.source}, after "
        f"{it.skipped_ns / 1e9:.2f} s of start-up",
        edges=it.starts, edges_on_host=it.on_host,
    ), None  # fmt: skip


def _activity_window(trace: T.Trace, skip: float) -> Steady:
    """Last resort: the span of GPU activity (else of all activity) minus a start-up share."""
    span = None
    how = "all activity"
    if trace.has(KERNEL):
        a, b = _scalar(trace, f'SELECT MIN(start), MAX("end") FROM {KERNEL}')
        if a is not None:
            span, how = (int(a), int(b)), "first to last kernel"
    span = span or activity_span(trace)
    if span is None:
        raise T.TraceError(f"{trace.path}: no recorded activity to take a window from")
    lo = span[0] + int(skip * (span[1] - span[0]))
    return Steady(
        lo, span[1], "activity", None, max(1, span[1] - lo), None,
        f"no NVTX steps and no repeating work: window = {how} minus the first {skip:.0%} "
        "(start-up); rates per second",
    )  # fmt: skip


#: Why a GPU report whose repeating work cannot be the loop is not judged (every class says it).
NO_STEADY_STATE = (
    "no steady state to judge: the report has no suite `step` ranges and no repeating NVTX "
    "range, and the GPU work that repeats cannot be the loop (the best, {why}), so the only "
    "window left, the span of GPU activity, would be mostly start-up (weight upload, "
    "autotuning, compilation); capture the loop alone (nsys --capture-range with "
    "cudaProfilerStart/Stop) or run more steps, or judge that span anyway with "
    "diagnosis.window.find_iterations=false"
)


def no_steady_state(trace: T.Trace, cfg: Mapping[str, Any]) -> str | None:
    """:data:`NO_STEADY_STATE` when the window fell back to the span of GPU activity although
    GPU work repeats, only not as a loop would (a weight upload's copies, a side stream's
    memsets in an autotuning phase), else None: a verdict on that span would read the
    compiler's or autotuner's work as the loop's. Where nothing repeats at all (a capture of a
    few steps) the span stays the last resort."""
    st = steady(trace, cfg)
    if st.mode != "activity" or st.untrusted is None:
        return None
    return NO_STEADY_STATE.format(why=st.untrusted)


# --- GPU activity ------------------------------------------------------------------------------

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


def steady_activity(trace: T.Trace, cfg: Mapping[str, Any]) -> tuple[Steady, Activity]:
    """The steady-state window and the GPU activity inside it: what most detectors start from."""
    st = steady(trace, cfg)
    return st, gpu_activity(trace, st.lo, st.hi)


def id_list(values: Any) -> str:
    """A literal SQL list of integer ids (values are ints read from the export, never text)."""
    return ", ".join(str(int(v)) for v in values)


def enum_ids(trace: T.Trace, table: str, pattern: str) -> list[int]:
    """Ids of the nsys enum ``table`` whose name is LIKE ``pattern`` (cached)."""
    key = ("enum", table, pattern)
    cache = _cache(trace)
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


def _string_ids(trace: T.Trace, pattern: str) -> list[int]:
    """Ids of StringIds whose value is LIKE ``pattern`` (cached)."""
    key = ("strings", pattern)
    cache = _cache(trace)
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


def _gpu_columns(trace: T.Trace, table: str) -> dict[str, str]:
    """Columns read of one GPU table: times, ids, the device and (except memsets) the stream."""
    cols = {"start": "t.start", "end": _end_column(trace, table), "corr": "t.correlationId"}
    cols["rowid"] = "t.rowid"
    if trace.has(table, "deviceId"):
        cols["device"] = "t.deviceId"
    if table != MEMSET:
        cols["stream"] = "t.streamId" if trace.has(table, "streamId") else "0"
    if table == KERNEL:
        nccl = _string_ids(trace, "%nccl%")
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


def _read_gpu(trace: T.Trace, lo: int, hi: int) -> tuple[list[dict[str, np.ndarray]], list]:
    """One scan per GPU table: (rows overlapping [lo, hi] per table, every row read of the
    kernels, graph replays and copies for :func:`gpu_starts`)."""
    parts: list[dict[str, np.ndarray]] = []
    starts: dict[int, dict[str, np.ndarray]] = {}  # every row read: overlapping or starting
    for table, kind in _GPU_KINDS:
        if not trace.has(table):
            continue
        cols = _gpu_columns(trace, table)
        part = T.int_columns(
            trace,
            table,
            cols,
            _WINDOW_OR_START,
            {"lo": lo, "hi": hi},
            pack=_gpu_pack(trace, table, cols),
        )
        part = _end_back(trace, table, part)
        if kind != KIND_MEMSET:
            starts[kind] = {k: part[k] for k in ("start", "corr", "stream")}
        part = rows_where(part, part["end"] > lo)
        part["kind"] = np.full(part["start"].size, kind, np.int8)
        parts.append(part)
    return parts, [starts[k] for k in (KIND_KERNEL, KIND_GRAPH, KIND_MEMCPY) if k in starts]


def rows_where(cols: dict[str, np.ndarray], mask: np.ndarray) -> dict[str, np.ndarray]:
    """The rows of ``cols`` where ``mask`` holds: views where they are one run (the usual case:
    all rows, or all but a few at either end), copies otherwise."""
    idx = np.flatnonzero(mask)
    if idx.size and idx[-1] - idx[0] + 1 == idx.size:
        return {k: v[idx[0] : idx[-1] + 1] for k, v in cols.items()}
    return {k: v[idx] for k, v in cols.items()}


def _lex_order(start: np.ndarray, end: np.ndarray) -> np.ndarray | None:
    """np.lexsort((end, start)), or None where the rows are in that order already."""
    if start.size < 2:
        return None
    ds = start[1:] - start[:-1]
    if ((ds > 0) | ((ds == 0) & (end[1:] >= end[:-1]))).all():
        return None
    return np.lexsort((end, start))


def gpu_activity(trace: T.Trace, lo: int, hi: int) -> Activity:
    """Kernels, memcpys, memsets and graph replays overlapping [lo, hi], clipped to it (cached).

    Read as numpy columns with :func:`analysis.trace.int_columns` (no per-row Python objects);
    an NCCL kernel is one whose demangled name (else short name) contains ``nccl``: the string
    table is searched once and the kernels are tested against those ids in SQL. Copy direction
    and pageability come from the export's ENUM_CUDA_MEMCPY_OPER / ENUM_CUDA_MEM_KIND.
    """
    key = ("gpu", lo, hi)
    cache = _cache(trace)
    if key in cache:
        return cache[key]
    parts, launched = _read_gpu(trace, lo, hi)
    cache[("gpu_starts", lo, hi)] = launched

    def col(name: str, dtype: Any) -> np.ndarray:
        arrays = [
            part[name] if name in part else np.zeros(part["start"].size, np.int64) for part in parts
        ]
        if len(arrays) == 1:
            return arrays[0].astype(dtype, copy=False)
        return np.concatenate(arrays).astype(dtype, copy=False) if arrays else np.zeros(0, dtype)

    start = np.clip(col("start", np.int64), lo, None)
    end = np.clip(col("end", np.int64), None, hi)
    order = _lex_order(start, end)  # stable: ties keep kernels, copies, memsets, rowid order
    fields = {"start": (start, None), "end": (end, None), "kind": ("kind", np.int8)}
    fields |= {f: (f, np.int64) for f in ("corr", "rowid", "nbytes", "device", "stream")}
    fields |= {"nccl": ("nccl", bool), "direction": ("direction", np.int8)}
    fields["pageable"] = ("pageable", bool)
    arrays = {}
    for f, (src, dtype) in fields.items():
        a = src if dtype is None else col(src, dtype)
        arrays[f] = a if order is None else a[order]
    cache[key] = act = Activity(**arrays)
    return act


def gpu_starts(trace: T.Trace, lo: int, hi: int, a: int, b: int) -> dict[str, np.ndarray]:
    """Kernels, graph replays and copies whose (unclipped) start lies in [a, b) (within the
    window [lo, hi)): start, corr and stream (0 where the table has none), tables in that
    order, each in rowid order. Read by the same scan as :func:`gpu_activity`."""
    gpu_activity(trace, lo, hi)
    a, b = max(a, lo), min(b, hi)
    found = []
    for part in _cache(trace)[("gpu_starts", lo, hi)]:
        found.append(rows_where(part, (part["start"] >= a) & (part["start"] < b)))
    names = ("start", "corr", "stream")
    if not found:
        return {n: np.zeros(0, np.int64) for n in names}
    return {n: np.concatenate([f[n] for f in found]) for n in names}


def busy(trace: T.Trace, st: Steady, act: Activity) -> tuple[np.ndarray, np.ndarray]:
    """The union of all GPU activity in the window (cached with the activity)."""
    key = ("busy", st.lo, st.hi)
    cache = _cache(trace)
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


# --- CUDA API calls ----------------------------------------------------------------------------


def api_names(trace: T.Trace) -> dict[int, tuple[str, str]]:
    """StringIds id -> (base name, category) for every CUDA API name in the export (cached).

    Every API name that has a category other than ``other`` starts with ``cu`` (cudaLaunchKernel,
    cuLaunchKernel, cudaStreamSynchronize, cuMemcpyDtoH, ...), so only those strings are read.
    """
    cache = _cache(trace)
    if "api_names" not in cache:
        rows = trace.query("SELECT id, value FROM StringIds WHERE value LIKE 'cu%'")[1]
        out = {}
        for i, name in rows:
            base = T.api_base_name(str(name))
            out[int(i)] = (base, T.api_category(base))
        cache["api_names"] = out
    return cache["api_names"]


#: Codes of :func:`window_calls`' ``cat`` column: the index of an api_category here.
CATEGORIES = ("other", "launch", "sync", "memcpy", "memset", "alloc")
LAUNCH, SYNC, MEMCPY_CALL = 1, 2, 3


def _category_codes(trace: T.Trace, name_ids: np.ndarray) -> np.ndarray:
    """The CATEGORIES code of each API name id (0 for ids that are no known API name), by a
    table indexed by id rather than a set test per category."""
    api = api_names(trace)
    if not api:
        return np.zeros(name_ids.size, np.int8)
    top_id = max(api)
    lut = np.zeros(top_id + 3, np.int8)  # slot 0: ids below 0, the last: ids above top_id
    for i, (_, cat) in api.items():
        lut[i + 1] = CATEGORIES.index(cat)
    idx = name_ids + 1
    return lut[np.clip(idx, 0, top_id + 2, out=idx)]


def category_ids(trace: T.Trace, *categories: str) -> list[int]:
    """Name ids of the CUDA API calls in these categories (launch, sync, memcpy, ...)."""
    return sorted(i for i, (_, c) in api_names(trace).items() if c in categories)


def _increasing(x: np.ndarray) -> bool:
    """Whether ``x`` is strictly increasing (correlation ids in start order usually are)."""
    return x.size < 2 or bool((x[1:] > x[:-1]).all())


def by_start(cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``cols`` sorted by ``start``, ties in their order (a stable sort); left as they are
    where SQLite returned them sorted (nsys writes most tables in time order)."""
    s = cols["start"]
    if s.size < 2 or bool((s[1:] >= s[:-1]).all()):
        return cols
    order = np.argsort(s, kind="stable")
    return {k: v[order] for k, v in cols.items()}


def window_api(trace: T.Trace, st: Steady, categories: tuple[str, ...]) -> dict[str, np.ndarray]:
    """CUDA API calls of ``categories`` overlapping the window (start, end, corr, name, tid),
    sorted by start (ties in table order): taken from :func:`window_calls`, no scan of its own."""
    calls = window_calls(trace, st)
    codes = [CATEGORIES.index(c) for c in categories]
    keep = np.isin(calls["cat"], codes) & (calls["end"] > st.lo)
    return {k: v[keep] for k, v in calls.items()}


def blocking_calls(trace: T.Trace, act: Activity, calls: Mapping[str, np.ndarray]) -> np.ndarray:
    """Which of ``calls`` (rows of :func:`window_calls`) wait for the GPU: sync-category calls,
    and memcpy calls whose copy is device-to-host and either synchronous (no ``Async``) or into
    pageable memory. The copies are looked up for the memcpy calls only."""
    names = api_names(trace)
    memcpy = category_ids(trace, "memcpy")
    out = calls["cat"] == SYNC
    idx = np.flatnonzero(calls["cat"] == MEMCPY_CALL)
    cp = act.take(act.kind == KIND_MEMCPY)
    corr, first = np.unique(cp.corr, return_index=True)
    if idx.size == 0 or corr.size == 0:
        return out
    c = calls["corr"][idx]
    pos = np.clip(np.searchsorted(corr, c), 0, corr.size - 1)
    has = corr[pos] == c
    d2h = has & (cp.direction[first][pos] == DTOH)
    pageable = has & cp.pageable[first][pos]
    is_async = np.isin(calls["name"][idx], [i for i in memcpy if "Async" in names[i][0]])
    out[idx] = d2h & (~is_async | pageable)
    return out


def base_names(trace: T.Trace, name_ids: np.ndarray) -> np.ndarray:
    """Base names (object array) of CUDA API calls by StringIds id ('' where unknown)."""
    names = api_names(trace)
    ids, inv = np.unique(name_ids, return_inverse=True)
    return np.array([names.get(int(i), ("", "other"))[0] for i in ids], dtype=object)[inv]


#: How far before the window launch calls are read: a kernel queued ahead was launched earlier.
LAUNCH_LOOKBACK_NS = 1_000_000_000


def window_calls(trace: T.Trace, st: Steady) -> dict[str, np.ndarray]:
    """Every CUDA API call overlapping the window or made up to :data:`LAUNCH_LOOKBACK_NS`
    before it (start, end, corr, name, tid, and ``cat``: the CATEGORIES code of the name),
    sorted by start: the one scan of the API table that the host view, host_sync and
    launch_bound share (cached; see :func:`prefetch_calls`). Calls of no role ("other")
    shorter than ``st.min_call_ns`` are left out."""
    key = ("calls", st.lo, st.hi, st.min_call_ns)
    cache = _cache(trace)
    if key not in cache:
        cache[key] = _read_calls(trace, st)
    return _resolved(cache, key)


def prefetch_calls(trace: T.Trace, st: Steady) -> None:
    """Start :func:`window_calls`' scan on a thread of its own, through a second connection,
    so that it runs while the GPU tables are read and worked on (the two big reads of a big
    export then overlap instead of taking turns). window_calls waits for it."""
    key = ("calls", st.lo, st.hi, st.min_call_ns)
    if key not in _cache(trace) and trace.has(RUNTIME):
        _read_ahead(trace, key, "window-calls", lambda own: _read_calls(own, st))


def _read_ahead(trace: T.Trace, key: Any, name: str, read: Any) -> None:
    """Run ``read(a Trace of its own)`` on a thread of its own, its Future cached under ``key``
    (:func:`_resolved` waits for it): a scan of a big table then runs beside the numpy work
    (and the other reads) of the thread that asked for it, on a second core."""
    ahead: Future = Future()

    def run() -> None:  # a thread per read, gone when done: nothing idle is left to a fork
        try:
            with T.open_trace(trace.path) as own:
                ahead.set_result(read(own))
        except BaseException as exc:
            ahead.set_exception(exc)

    threading.Thread(target=run, name=name, daemon=True).start()
    _cache(trace)[key] = ahead


def _resolved(cache: dict[Any, Any], key: Any) -> Any:
    """``cache[key]``, once a read started by :func:`_read_ahead` has finished."""
    if isinstance(cache[key], Future):
        cache[key] = cache[key].result()
    return cache[key]


def _read_calls(trace: T.Trace, st: Steady) -> dict[str, np.ndarray]:
    rows = trace.query(f"SELECT globalTid FROM {RUNTIME} LIMIT 1")[1] if trace.has(RUNTIME) else []
    base = int(rows[0][0]) if rows and rows[0][0] is not None else 0
    cols = {"start": "t.start", "end": _end_column(trace, RUNTIME), "corr": "t.correlationId"}
    # threads of one process differ in the low bits of globalTid: read it relative to one
    cols |= {"name": "t.nameId", "tid": f"COALESCE(t.globalTid - {base}, {-1 - base})"}
    p = {"lo": st.lo - LAUNCH_LOOKBACK_NS, "hi": st.hi, "tiny": st.min_call_ns}
    roles = id_list(category_ids(trace, *CATEGORIES[1:]))
    where = f'{WINDOW} AND (t."end" - t.start >= :tiny OR t.nameId IN ({roles}))'
    calls = T.int_columns(
        trace, RUNTIME, cols, where, p, pack=_name_under_duration(trace, RUNTIME, cols)
    )
    calls = _end_back(trace, RUNTIME, calls)
    calls["tid"] += base
    calls = by_start(calls)
    return calls | {"cat": _category_codes(trace, calls["name"])}


def _name_under_duration(trace: T.Trace, table: str, cols: dict[str, str]) -> list[T.Pack]:
    """The ``name`` column (nameId) read under ``end`` (see ``T.int_columns``' ``pack``) where
    ``end`` is read as a duration, which leaves room for the id's bits."""
    bits = T.name_bits(trace, table, "nameId")
    return [("end", "name", bits)] if bits is not None and cols["end"] != 't."end"' else []


def thread_osrt(trace: T.Trace, st: Steady, tid: int, ids: list[int]) -> dict[str, np.ndarray]:
    """The OS-runtime calls of thread ``tid`` overlapping the window (start, end, name) whose
    name id is one of ``ids``: one chunked scan (cached) where a loader thread can make
    millions; taken out of a :func:`prefetch_osrt` scan where one covers them."""
    key = ("osrt", st.lo, st.hi, int(tid), tuple(sorted(ids)))
    cache = _cache(trace)
    if key in cache:
        return cache[key]
    cover = _osrt_cover(trace, st, [tid], ids)
    if cover is None:
        rows = _read_osrt(trace, st, [int(tid)], ids)
        cache[key] = {k: rows[k] for k in ("start", "end", "name")}
        return cache[key]
    rows = _resolved(cache, cover)
    keep = (rows["tid"] == int(tid)) & np.isin(rows["name"], list(ids))
    if (st.lo, st.hi) != cover[1:3]:  # a window inside the scan's: its overlap test again
        keep &= (rows["end"] > st.lo) & (rows["start"] < st.hi)
    cache[key] = rows_where({k: rows[k] for k in ("start", "end", "name")}, keep)
    return cache[key]


def prefetch_osrt(trace: T.Trace, st: Steady, tids: Any, ids: Any) -> None:
    """Start one scan of the OS-runtime calls of the threads ``tids`` with name ids ``ids`` on a
    thread of its own (:func:`_read_ahead`), as soon as both are known: it runs while the
    caller works on what it read before, and :func:`thread_osrt` takes the calls of one thread
    and some of the names, in this window or one inside it, out of it (the host view's input
    calls, gil_contention's waits of each issuing thread, the time model's last iterations:
    one scan of the table where there was one per thread, set of names and window). The scan
    starts :data:`LAUNCH_LOOKBACK_NS` early, as :func:`window_calls` does: the time model's
    last iterations start at a launch call, which can come before the window."""
    tids, ids = sorted({int(t) for t in tids}), sorted({int(i) for i in ids})
    if not tids or not ids or not trace.has("OSRT_API") or _osrt_cover(trace, st, tids, ids):
        return
    wide = replace(st, lo=st.lo - LAUNCH_LOOKBACK_NS)
    key = ("osrt_all", wide.lo, wide.hi, tuple(tids), tuple(ids))
    _read_ahead(trace, key, "osrt", lambda own: _read_osrt(own, wide, tids, ids))


def _osrt_cover(trace: T.Trace, st: Steady, tids: Any, ids: Any) -> tuple | None:
    """The cache key of a :func:`prefetch_osrt` scan that holds the calls of these threads and
    names in this window, or None."""
    for key in _cache(trace):
        if isinstance(key, tuple) and key[0] == "osrt_all" and key[1] <= st.lo <= st.hi <= key[2]:
            if {int(t) for t in tids} <= set(key[3]) and {int(i) for i in ids} <= set(key[4]):
                return key
    return None


def _read_osrt(
    trace: T.Trace, st: Steady, tids: list[int], ids: list[int]
) -> dict[str, np.ndarray]:
    """The OS-runtime calls of the threads ``tids`` with name ids ``ids`` overlapping the
    window, in rowid order: start, end, name and tid. With several threads, which one is read
    as its index in ``tids``, under the start where the window's end leaves the bits (every
    start read is before it)."""
    table = "OSRT_API"
    cols = {"start": "t.start", "end": _end_column(trace, table), "name": "t.nameId"}
    where = f"{WINDOW} AND t.globalTid IN ({id_list(tids)}) AND t.nameId IN ({id_list(ids)})"
    pack = _name_under_duration(trace, table, cols)
    bits = (len(tids) - 1).bit_length()
    if bits:
        whens = " ".join(f"WHEN {t} THEN {i}" for i, t in enumerate(tids))
        cols["who"] = f"CASE t.globalTid {whens} END"
        if (abs(st.lo) + abs(st.hi) + 1) << bits < 2**62:
            pack.append(("start", "who", bits))
    rows = T.int_columns(trace, table, cols, where, {"lo": st.lo, "hi": st.hi}, pack=pack)
    who = rows.pop("who", np.zeros(rows["start"].size, np.int64))
    return _end_back(trace, table, rows) | {"tid": np.asarray(tids, np.int64)[who]}


def _lookup(keys: np.ndarray, values: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mask of ``x`` found in the sorted distinct ``keys``, the matching ``values``, aligned
    with ``x``: garbage where not found)."""
    if keys.size == 0:
        return np.zeros(x.shape, bool), np.zeros(x.shape, values.dtype)
    pos = np.searchsorted(keys, x)
    np.clip(pos, 0, keys.size - 1, out=pos)
    return keys[pos] == x, values[pos]


def _first_values(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct ``keys``, the ``values`` at each one's first occurrence)."""
    if _increasing(keys):
        return keys, values
    uniq, first = np.unique(keys, return_index=True)
    return uniq, values[first]


def launch_ends(trace: T.Trace, st: Steady, corr: np.ndarray) -> np.ndarray:
    """For each correlation id, the end of the first launch call (in start order) among
    :func:`window_calls` that has it, NaN where none does; the lookup table is cached."""
    key = ("launch_ends", st.lo, st.hi)
    cache = _cache(trace)
    if key not in cache:
        calls = window_calls(trace, st)
        is_launch = calls["cat"] == LAUNCH
        uniq, ends = _first_values(calls["corr"][is_launch], calls["end"][is_launch])
        cache[key] = (uniq, ends.astype(float))
    found, ends = _lookup(*cache[key], corr)
    ends[~found] = np.nan
    return ends


def activity_launch_ends(trace: T.Trace, st: Steady, act: Activity) -> np.ndarray:
    """:func:`launch_ends` of every row of the window's activity ``act`` (cached: launch_bound
    and the host view both look them up). Read-only."""
    key = ("activity_launch_ends", st.lo, st.hi)
    cache = _cache(trace)
    if key not in cache:
        cache[key] = launch_ends(trace, st, act.corr)
    return cache[key]


def caller_tids(trace: T.Trace, st: Steady, corr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mask of ``corr`` made by one of :func:`window_calls`, the thread of the first such call,
    for the found ones only); the lookup table is cached."""
    key = ("caller_tids", st.lo, st.hi)
    cache = _cache(trace)
    if key not in cache:
        calls = window_calls(trace, st)
        cache[key] = _first_values(calls["corr"], calls["tid"])
    found, tids = _lookup(*cache[key], corr)
    return found, tids[found]


def launcher_tids(trace: T.Trace, lo: int, hi: int, *, most_first: bool = False) -> np.ndarray:
    """Threads that make kernel launch calls overlapping [lo, hi] (``most_first``: ordered by
    how many they make, the main training thread first)."""
    if not trace.has(RUNTIME):
        return np.zeros(0, np.int64)
    sql = f"""SELECT t.globalTid, COUNT(*) AS n FROM {RUNTIME} AS t WHERE {WINDOW}
              AND t.nameId IN ({id_list(category_ids(trace, "launch"))})
              GROUP BY t.globalTid ORDER BY n DESC"""
    rows = [r for r in trace.query(sql, {"lo": lo, "hi": hi})[1] if r[0] is not None]
    tids = np.array([r[0] for r in rows], dtype=np.int64)
    if not most_first or tids.size == 0:  # none: every launch came before the window
        return np.sort(tids)
    first = loop_thread(tids, np.array([r[1] for r in rows], dtype=np.int64))
    return np.concatenate([[first], tids[tids != first]]).astype(np.int64)


def loop_thread(tids: np.ndarray, counts: np.ndarray) -> int:
    """Which of the launching threads ``tids`` (``counts`` launches each) runs the loop: the one
    launching most, unless its process's main thread launches at least a tenth as much. PyTorch's
    autograd thread can launch more than the loop's own thread (a large backward)."""
    top = int(tids[np.argmax(counts)])
    own = process_main_thread(top)
    mine = counts[tids == own]
    return own if mine.size and mine[0] >= 0.1 * counts.max() else top


def process_main_thread(gtid: int) -> int:
    """The main thread of ``gtid``'s process: nsys's global thread id holds the process id in
    bits 24-47 and the thread id in bits 0-23, and Linux gives a main thread tid == pid."""
    pid = (gtid >> 24) & 0xFFFFFF
    return (gtid & ~0xFFFFFF) | pid


# --- interval maths (vectorised) ---------------------------------------------------------------


def union(starts: Any, ends: Any) -> tuple[np.ndarray, np.ndarray]:
    """Merge intervals into sorted, disjoint ones."""
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    keep = e > s
    if not keep.all():
        s, e = s[keep], e[keep]
    if s.size == 0:
        return s, e
    if not bool((s[1:] >= s[:-1]).all()):  # GPU activity comes sorted already
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
    run_end = np.maximum.accumulate(e)
    new = np.ones(s.size, dtype=bool)
    new[1:] = s[1:] > run_end[:-1]
    first = np.flatnonzero(new)
    # a group's end is the running maximum at its last member (earlier groups end before it)
    last = np.append(first[1:] - 1, s.size - 1)
    return s[first], run_end[last]


def gaps(s: np.ndarray, e: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """The holes of a disjoint sorted union within [lo, hi] (window edges included)."""
    gs = np.concatenate([[lo], e])
    ge = np.concatenate([s, [hi]])
    keep = ge > gs
    return gs[keep], ge[keep]


def difference(
    s: np.ndarray, e: np.ndarray, bs: np.ndarray, be: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The disjoint sorted union (s, e) less the disjoint sorted union (bs, be)."""
    if s.size == 0 or bs.size == 0:
        return s, e
    pts = np.unique(np.concatenate([s, e, bs, be]))
    lo, hi = pts[:-1], pts[1:]
    mid = lo + (hi - lo) // 2

    def inside(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        i = np.searchsorted(a, mid, side="right") - 1
        return (i >= 0) & (mid < b[np.maximum(i, 0)])

    keep = inside(s, e) & ~inside(bs, be) & (hi > lo)
    return union(lo[keep], hi[keep])


def covered(bs: np.ndarray, be: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Length of the disjoint sorted union (bs, be) lying before each point x."""
    x = np.asarray(x, dtype=np.int64)
    if bs.size == 0:
        return np.zeros(x.shape, dtype=np.int64)
    return _covered(bs, be, np.concatenate([[0], np.cumsum(be - bs)]), x)


def _covered(bs: np.ndarray, be: np.ndarray, cum: np.ndarray, x: np.ndarray) -> np.ndarray:
    """:func:`covered` with the union's prefix lengths ``cum`` given."""
    i = np.searchsorted(bs, x, side="right") - 1
    j = np.clip(i, 0, None)
    partial = np.where(i >= 0, np.minimum(x, be[j]) - bs[j], 0)
    return np.where(i >= 0, cum[j] + partial, 0)


def overlap_total(s: np.ndarray, e: np.ndarray, bs: np.ndarray, be: np.ndarray) -> int:
    """``overlap_each(s, e, bs, be).sum()`` for two disjoint sorted unions: the length of their
    intersection, which is symmetric, so the fewer intervals are the ones looked up."""
    if s.size > bs.size:
        s, e, bs, be = bs, be, s, e
    return int(overlap_each(s, e, bs, be).sum())


def overlap_any(s: np.ndarray, e: np.ndarray, bs: np.ndarray, be: np.ndarray) -> np.ndarray:
    """``overlap_each(s, e, bs, be) > 0`` for two disjoint sorted unions, in time linear in
    ``s`` and small in ``bs``: each (bs, be) marks the run of (s, e) it overlaps."""
    first = np.searchsorted(e, bs, side="right")  # first interval ending after bs
    stop = np.searchsorted(s, be, side="left")  # past the last interval starting before be
    ok = first < stop
    marks = np.zeros(s.size + 1, np.int64)
    np.add.at(marks, first[ok], 1)
    np.add.at(marks, stop[ok], -1)
    return np.cumsum(marks[:-1]) > 0


def overlap_each(s: np.ndarray, e: np.ndarray, bs: np.ndarray, be: np.ndarray) -> np.ndarray:
    """For each interval (s, e), how much of it the disjoint sorted union (bs, be) covers."""
    s, e = np.asarray(s, dtype=np.int64), np.asarray(e, dtype=np.int64)
    if bs.size == 0:
        return np.zeros(s.shape, dtype=np.int64)
    cum = np.concatenate([[0], np.cumsum(be - bs)])
    return _covered(bs, be, cum, e) - _covered(bs, be, cum, s)


def length(s: np.ndarray, e: np.ndarray) -> int:
    return int((np.asarray(e) - np.asarray(s)).sum())


def label_at(trace: T.Trace, st: Steady, start: int, end: int) -> str | None:
    """Text of the innermost NVTX range on the step thread overlapping [start, end] the most
    (read for that span only)."""
    if st.step_tid is None:
        return None
    r = T.nvtx_ranges(trace, tid=st.step_tid, spans=[(start, end)])
    r = r[r["end_ns"].notna() & ~r["text"].isin(["measure", "step"])]
    if r.empty:
        return None
    r = r.astype({"end_ns": "int64"})
    ov = np.minimum(r["end_ns"], end) - np.maximum(r["start_ns"], start)
    best = r.assign(_ov=ov).sort_values(["_ov", "depth"], ascending=False, kind="stable")
    return str(best["text"].iloc[0])


def top(x: np.ndarray, k: int = 3) -> np.ndarray:
    """``np.argsort(-x, kind="stable")[:k]``: the indices of the ``k`` largest values, ties in
    index order, without sorting millions of values for three."""
    if x.size <= k:
        return np.argsort(-x, kind="stable")
    kth = np.partition(x, x.size - k)[x.size - k]
    cand = np.flatnonzero(x >= kth)
    return cand[np.argsort(-x[cand], kind="stable")[:k]]


def ms(ns: float) -> float:
    return round(float(ns) / 1e6, 3)


def stamp(st: Steady, start: int, end: int, **more: Any) -> dict[str, Any]:
    """An evidence item: absolute ns plus ms from the window start."""
    return {
        "start_ns": int(start),
        "end_ns": int(end),
        "t_ms": ms(start - st.lo),
        "duration_ms": ms(end - start),
        **more,
    }


def missing(klass: str, table: str, what: str) -> Finding:
    """The not-fired finding of a detector whose input table the report lacks."""
    return Finding(
        klass,
        State.NOT_JUDGED,
        0.0,
        {},
        [],
        f"table {table} is missing: the report has no {what} (CPU capture or --trace without "
        "cuda), so this class cannot be judged",
    )
