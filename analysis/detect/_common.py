"""Shared pieces of the detectors: the steady-state window, GPU activity in it, interval maths.

Everything is read with window-bounded SQL (only rows overlapping the window, only the columns
needed). The big tables (kernels, CUDA API calls) come back as numpy arrays through
:func:`analysis.trace.int_columns`, never as per-row Python objects or pandas frames; names and
kinds are resolved once per distinct id (StringIds, ENUM_*) and tested as id sets in SQL; of
the API table only the calls a rule looks at are read (launches, syncs, copies). Results are
cached on the Trace object, so running all five detectors reads each table once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
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
    key = ("steady", use_nvtx, skip)
    cache = _cache(trace)
    if key in cache:
        return cache[key]
    result = None
    if use_nvtx:
        result = _suite_window(trace)
    if result is None:
        result = _iteration_window(trace, wcfg)
    if result is None:
        result = _activity_window(trace, skip)
    cache[key] = result
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


def _iteration_window(trace: T.Trace, wcfg: Mapping[str, Any]) -> Steady | None:
    """Repeating iterations found in the GPU work (else in NVTX ranges of any name)."""
    if not bool(wcfg.get("find_iterations", True)):
        return None
    it = S.gpu_iterations(trace, wcfg) if has_gpu(trace) else None
    it = it or S.nvtx_iterations(trace, wcfg)
    if it is None:
        return None
    lo, hi = int(it.starts[0]), int(it.starts[-1])
    tids = launcher_tids(trace, lo, hi, most_first=True)
    return Steady(
        lo, hi, "iterations", it.n, hi - lo, int(tids[0]) if tids.size else None,
        f"steady state: {it.n} iterations of {it.source}, after "
        f"{it.skipped_ns / 1e9:.2f} s of start-up",
    )  # fmt: skip


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
    ``device`` is the row's CUDA deviceId (0 where the export has no such column; filled with
    zeros when an Activity is built without it, so older callers keep working).
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

    def __post_init__(self) -> None:
        if self.device is None:
            object.__setattr__(self, "device", np.zeros(self.start.size, np.int64))

    def __len__(self) -> int:
        return int(self.start.size)

    def take(self, idx: np.ndarray) -> Activity:
        """The rows at ``idx`` (an index or boolean array), in that order."""
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


def gpu_activity(trace: T.Trace, lo: int, hi: int) -> Activity:
    """Kernels, memcpys, memsets and graph replays overlapping [lo, hi], clipped to it (cached).

    Read as numpy columns with :func:`analysis.trace.int_columns` (no per-row Python objects);
    an NCCL kernel is one whose demangled name (else short name) contains ``nccl``: the string
    table is searched once and the kernels are tested against those ids in SQL. Copy direction and pageability come from the
    export's ENUM_CUDA_MEMCPY_OPER / ENUM_CUDA_MEM_KIND.
    """
    key = ("gpu", lo, hi)
    cache = _cache(trace)
    if key in cache:
        return cache[key]
    p = {"lo": lo, "hi": hi}
    base = {"start": "t.start", "end": 't."end"', "corr": "t.correlationId", "rowid": "t.rowid"}

    def with_device(table: str, cols: dict[str, str]) -> dict[str, str]:
        return cols | {"device": "t.deviceId"} if trace.has(table, "deviceId") else cols

    parts: list[dict[str, np.ndarray]] = []
    if trace.has(KERNEL):
        cols = with_device(KERNEL, dict(base))
        nccl = _string_ids(trace, "%nccl%")
        if nccl:
            cols["nccl"] = (
                "CASE WHEN t.demangledName IN (SELECT id FROM StringIds) "
                f"THEN t.demangledName IN ({id_list(nccl)}) ELSE t.shortName IN ({id_list(nccl)}) END"
            )
        k = T.int_columns(trace, KERNEL, cols, WINDOW, p)
        k["kind"] = np.full(k["start"].size, KIND_KERNEL, np.int8)
        parts.append(k)
    if trace.has(MEMCPY):
        ops = "ENUM_CUDA_MEMCPY_OPER"
        htod, dtoh = enum_ids(trace, ops, "%HTOD"), enum_ids(trace, ops, "%DTOH")
        dtod = enum_ids(trace, ops, "%DTOD")
        pg = id_list(enum_ids(trace, "ENUM_CUDA_MEM_KIND", "%PAGEABLE"))
        cols = with_device(MEMCPY, dict(base))
        cols["nbytes"] = "COALESCE(t.bytes, 0)"
        cols["direction"] = (
            f"CASE WHEN t.copyKind IN ({id_list(htod)}) THEN 1 WHEN t.copyKind IN ({id_list(dtoh)}) "
            f"THEN 2 WHEN t.copyKind IN ({id_list(dtod)}) THEN 3 ELSE 0 END"
        )
        cols["pageable"] = f"COALESCE(t.srcKind IN ({pg}) OR t.dstKind IN ({pg}), 0)"
        m = T.int_columns(trace, MEMCPY, cols, WINDOW, p)
        m["kind"] = np.full(m["start"].size, KIND_MEMCPY, np.int8)
        parts.append(m)
    if trace.has(MEMSET):
        s = T.int_columns(trace, MEMSET, with_device(MEMSET, dict(base)), WINDOW, p)
        s["kind"] = np.full(s["start"].size, KIND_MEMSET, np.int8)
        parts.append(s)
    if trace.has(GRAPH):  # graph-level tracing: one row per replay, its kernels not listed
        g = T.int_columns(trace, GRAPH, with_device(GRAPH, dict(base)), WINDOW, p)
        g["kind"] = np.full(g["start"].size, KIND_GRAPH, np.int8)
        parts.append(g)

    def col(name: str, dtype: Any) -> np.ndarray:
        arrays = [
            part[name] if name in part else np.zeros(part["start"].size, np.int64) for part in parts
        ]
        return np.concatenate(arrays).astype(dtype, copy=False) if arrays else np.zeros(0, dtype)

    start = np.clip(col("start", np.int64), lo, None)
    end = np.clip(col("end", np.int64), None, hi)
    order = np.lexsort((end, start))  # stable: ties keep kernels, copies, memsets, rowid order
    act = Activity(
        start=start[order],
        end=end[order],
        kind=col("kind", np.int8)[order],
        corr=col("corr", np.int64)[order],
        rowid=col("rowid", np.int64)[order],
        nccl=col("nccl", bool)[order],
        nbytes=col("nbytes", np.int64)[order],
        direction=col("direction", np.int8)[order],
        pageable=col("pageable", bool)[order],
        device=col("device", np.int64)[order],
    )
    cache[key] = act
    return act


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


def category_ids(trace: T.Trace, *categories: str) -> list[int]:
    """Name ids of the CUDA API calls in these categories (launch, sync, memcpy, ...)."""
    return sorted(i for i, (_, c) in api_names(trace).items() if c in categories)


def api_in_window(
    trace: T.Trace,
    lo: int,
    hi: int,
    categories: tuple[str, ...],
    columns: tuple[str, ...] = ("start", "end", "corr"),
    *,
    few: bool = False,
) -> dict[str, np.ndarray]:
    """CUDA API calls of ``categories`` overlapping [lo, hi], sorted by start (ties in table
    order). ``columns`` from: start, end, corr, name (StringIds id), tid, rowid; ``few`` when
    the calls are rare (syncs, copies: one scan for all columns)."""
    known = {"start": "t.start", "end": 't."end"', "corr": "t.correlationId", "name": "t.nameId"}
    known |= {"tid": "t.globalTid", "rowid": "t.rowid"}
    cols = {c: known[c] for c in dict.fromkeys(("start", *columns))}
    where = f"{WINDOW} AND t.nameId IN ({id_list(category_ids(trace, *categories))})"
    out = T.int_columns(trace, RUNTIME, cols, where, {"lo": lo, "hi": hi}, few=few)
    order = np.argsort(out["start"], kind="stable")  # rows come in rowid order
    return {k: v[order] for k, v in out.items()}


def blocking_calls(
    trace: T.Trace, act: Activity, calls: Mapping[str, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """Which of ``calls`` (API rows with ``name`` and ``corr``) wait for the GPU: sync-category
    calls, and memcpy calls whose copy is device-to-host and either synchronous (no ``Async``)
    or into pageable memory. Returns (mask, base names); names are resolved once per id."""
    names = api_names(trace)
    ids, inv = np.unique(calls["name"], return_inverse=True)
    meta = [names.get(int(i), ("", "other")) for i in ids]
    base = np.array([b for b, _ in meta], dtype=object)[inv]
    cat = np.array([c for _, c in meta], dtype=object)[inv]
    is_async = np.array(["Async" in b for b, _ in meta], dtype=bool)[inv]
    cp = act.take(act.kind == KIND_MEMCPY)
    corr, first = np.unique(cp.corr, return_index=True)
    if corr.size:
        pos = np.clip(np.searchsorted(corr, calls["corr"]), 0, corr.size - 1)
        has = corr[pos] == calls["corr"]
        d2h = has & (cp.direction[first][pos] == DTOH)
        pageable = has & cp.pageable[first][pos]
    else:
        d2h = pageable = np.zeros(cat.size, bool)
    return (cat == "sync") | ((cat == "memcpy") & d2h & (~is_async | pageable)), base


#: How far before the window launch calls are read: a kernel queued ahead was launched earlier.
LAUNCH_LOOKBACK_NS = 1_000_000_000


def window_calls(trace: T.Trace, st: Steady) -> dict[str, np.ndarray]:
    """Every CUDA API call overlapping the window or made up to :data:`LAUNCH_LOOKBACK_NS`
    before it (start, end, corr, name, tid), sorted by start: one scan of the API table that
    the host view and launch_bound share (cached)."""
    key = ("calls", st.lo, st.hi)
    cache = _cache(trace)
    if key not in cache:
        cols = {"start": "t.start", "end": 't."end"', "corr": "t.correlationId"}
        cols |= {"name": "t.nameId", "tid": "t.globalTid"}
        p = {"lo": st.lo - LAUNCH_LOOKBACK_NS, "hi": st.hi}
        out = T.int_columns(trace, RUNTIME, cols, WINDOW, p)
        order = np.argsort(out["start"], kind="stable")
        cache[key] = {k: v[order] for k, v in out.items()}
    return cache[key]


def window_launches(trace: T.Trace, st: Steady) -> dict[str, np.ndarray]:
    """The launch calls among :func:`window_calls`, one per correlation id (the first)."""
    key = ("window_launches", st.lo, st.hi)
    cache = _cache(trace)
    if key not in cache:
        calls = window_calls(trace, st)
        is_launch = np.isin(calls["name"], category_ids(trace, "launch"))
        _, first = np.unique(calls["corr"][is_launch], return_index=True)
        idx = np.flatnonzero(is_launch)[np.sort(first)]
        cache[key] = {k: v[idx] for k, v in calls.items()}
    return cache[key]


def launch_end_of(calls: Mapping[str, np.ndarray], corr: np.ndarray) -> np.ndarray:
    """For each correlation id, the end of its launch call (NaN where there is none)."""
    uniq, first = np.unique(calls["corr"], return_index=True)
    ends = calls["end"][first].astype(float)
    if uniq.size == 0:
        return np.full(corr.shape, np.nan)
    pos = np.clip(np.searchsorted(uniq, corr), 0, uniq.size - 1)
    return np.where(uniq[pos] == corr, ends[pos], np.nan)


def launcher_tids(trace: T.Trace, lo: int, hi: int, *, most_first: bool = False) -> np.ndarray:
    """Threads that make kernel launch calls overlapping [lo, hi] (``most_first``: ordered by
    how many they make, the main training thread first)."""
    if not trace.has(RUNTIME):
        return np.zeros(0, np.int64)
    sql = f"""SELECT t.globalTid, COUNT(*) AS n FROM {RUNTIME} AS t WHERE {WINDOW}
              AND t.nameId IN ({id_list(category_ids(trace, "launch"))})
              GROUP BY t.globalTid ORDER BY n DESC"""
    rows = trace.query(sql, {"lo": lo, "hi": hi})[1]
    tids = np.array([r[0] for r in rows if r[0] is not None], dtype=np.int64)
    return tids if most_first else np.sort(tids)


# --- interval maths (vectorised) ---------------------------------------------------------------


def union(starts: Any, ends: Any) -> tuple[np.ndarray, np.ndarray]:
    """Merge intervals into sorted, disjoint ones."""
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    keep = e > s
    s, e = s[keep], e[keep]
    if s.size == 0:
        return s, e
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    run_end = np.maximum.accumulate(e)
    new = np.ones(s.size, dtype=bool)
    new[1:] = s[1:] > run_end[:-1]
    group = np.cumsum(new) - 1
    out_s = s[new]
    out_e = np.zeros(out_s.size, dtype=np.int64)
    np.maximum.at(out_e, group, e)
    return out_s, out_e


def gaps(s: np.ndarray, e: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """The holes of a disjoint sorted union within [lo, hi] (window edges included)."""
    gs = np.concatenate([[lo], e])
    ge = np.concatenate([s, [hi]])
    keep = ge > gs
    return gs[keep], ge[keep]


def covered(bs: np.ndarray, be: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Length of the disjoint sorted union (bs, be) lying before each point x."""
    x = np.asarray(x, dtype=np.int64)
    if bs.size == 0:
        return np.zeros(x.shape, dtype=np.int64)
    cum = np.concatenate([[0], np.cumsum(be - bs)])
    i = np.searchsorted(bs, x, side="right") - 1
    j = np.clip(i, 0, None)
    partial = np.where(i >= 0, np.minimum(x, be[j]) - bs[j], 0)
    return np.where(i >= 0, cum[j] + partial, 0)


def overlap_each(s: np.ndarray, e: np.ndarray, bs: np.ndarray, be: np.ndarray) -> np.ndarray:
    """For each interval (s, e), how much of it the disjoint sorted union (bs, be) covers."""
    return covered(bs, be, e) - covered(bs, be, s)


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
