"""Shared pieces of the detectors: the steady-state window, GPU activity in it, interval maths.

Everything is read with window-bounded SQL (only rows overlapping the window, only the columns
needed) and combined with vectorised numpy/pandas; results are cached on the Trace object, so
running all five detectors reads each table once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analysis import trace as T
from analysis.findings import Finding

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"


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
    for table in T._ACTIVITY_TABLES:
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
        steps = T.step_ranges(trace)
        steps = steps[steps["end_ns"].notna()]
        if not steps.empty:
            lo, hi = T.window(trace)
            inside = steps[(steps["start_ns"] >= lo) & (steps["end_ns"] <= hi)]
            if not inside.empty:
                tid = int(inside["global_tid"].value_counts().index[0])
                mine = inside[inside["global_tid"] == tid]
                result = Steady(
                    lo, hi, "nvtx", len(mine), int(mine["duration_ns"].sum()), tid,
                    f"NVTX window: {len(mine)} step ranges inside `measure`",
                )  # fmt: skip
    if result is None:
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
        result = Steady(
            lo, span[1], "activity", None, max(1, span[1] - lo), None,
            f"no NVTX steps: window = {how} minus the first {skip:.0%} (start-up); "
            "rates per second",
        )  # fmt: skip
    cache[key] = result
    return result


# --- GPU activity ------------------------------------------------------------------------------


def steady_activity(trace: T.Trace, cfg: Mapping[str, Any]) -> tuple[Steady, pd.DataFrame]:
    """The steady-state window and the GPU activity inside it: what most detectors start from."""
    st = steady(trace, cfg)
    return st, gpu_activity(trace, st.lo, st.hi)


def gpu_activity(trace: T.Trace, lo: int, hi: int) -> pd.DataFrame:
    """Kernels, memcpys and memsets overlapping [lo, hi], clipped to it (cached).

    Columns: start_ns, end_ns (clipped), kind (kernel/memcpy/memset), correlation_id, name (kernel
    short name), is_nccl, bytes, direction, pageable.
    """
    key = ("gpu", lo, hi)
    cache = _cache(trace)
    if key in cache:
        return cache[key]
    parts = []
    p = {"lo": lo, "hi": hi}
    cols = ["start_ns", "end_ns", "kind", "correlation_id", "name", "is_nccl"]
    cols += ["bytes", "direction", "pageable"]
    if trace.has(KERNEL):
        sql = f"""
            SELECT k.start, k."end", 'kernel', k.correlationId, sn.value,
                   COALESCE(dn.value, sn.value, '') LIKE '%nccl%', NULL, NULL, NULL
            FROM {KERNEL} AS k
            LEFT JOIN StringIds AS sn ON sn.id = k.shortName
            LEFT JOIN StringIds AS dn ON dn.id = k.demangledName
            WHERE k."end" > :lo AND k.start < :hi"""
        parts.append(trace.query(sql, p)[1])
    if trace.has(MEMCPY):
        ck = T._enum(trace, "ENUM_CUDA_MEMCPY_OPER")
        mk = T._enum(trace, "ENUM_CUDA_MEM_KIND")
        sql = f"""
            SELECT m.start, m."end", 'memcpy', m.correlationId, NULL, 0, m.bytes,
                   CASE WHEN ck.name LIKE '%HTOD' THEN 'HtoD' WHEN ck.name LIKE '%DTOH' THEN 'DtoH'
                        WHEN ck.name LIKE '%DTOD' THEN 'DtoD' ELSE 'other' END,
                   (sk.name LIKE '%PAGEABLE' OR dk.name LIKE '%PAGEABLE')
            FROM {MEMCPY} AS m
            LEFT JOIN {ck} AS ck ON ck.id = m.copyKind
            LEFT JOIN {mk} AS sk ON sk.id = m.srcKind
            LEFT JOIN {mk} AS dk ON dk.id = m.dstKind
            WHERE m."end" > :lo AND m.start < :hi"""
        parts.append(trace.query(sql, p)[1])
    if trace.has(MEMSET):
        sql = f"""SELECT start, "end", 'memset', correlationId, NULL, 0, bytes, NULL, NULL
                  FROM {MEMSET} WHERE "end" > :lo AND start < :hi"""
        parts.append(trace.query(sql, p)[1])
    rows = [r for part in parts for r in part]
    df = pd.DataFrame(rows, columns=cols)
    df["start_ns"] = df["start_ns"].astype("int64").clip(lower=lo)
    df["end_ns"] = df["end_ns"].astype("int64").clip(upper=hi)
    df["is_nccl"] = df["is_nccl"].fillna(0).astype(bool)
    df["pageable"] = df["pageable"].fillna(0).astype(bool)
    df = df.sort_values(["start_ns", "end_ns"], kind="stable").reset_index(drop=True)
    cache[key] = df
    return df


def api_calls(trace: T.Trace, lo: int, hi: int) -> pd.DataFrame:
    """CUDA API calls overlapping [lo, hi] with base_name and category (cached)."""
    key = ("api", lo, hi)
    cache = _cache(trace)
    if key in cache:
        return cache[key]
    cols = ["start_ns", "end_ns", "global_tid", "correlation_id", "name"]
    rows: list[tuple[Any, ...]] = []
    if trace.has(RUNTIME):
        sql = f"""SELECT r.start, r."end", r.globalTid, r.correlationId, s.value
                  FROM {RUNTIME} AS r LEFT JOIN StringIds AS s ON s.id = r.nameId
                  WHERE r."end" > :lo AND r.start < :hi"""
        rows = trace.query(sql, {"lo": lo, "hi": hi})[1]
    df = pd.DataFrame(rows, columns=cols)
    df["start_ns"] = df["start_ns"].astype("int64")
    df["end_ns"] = df["end_ns"].astype("int64")
    names = df["name"].dropna().unique()
    base = {n: T.api_base_name(n) for n in names}
    df["base_name"] = df["name"].map(base)
    df["category"] = df["base_name"].map({b: T.api_category(b) for b in set(base.values())})
    df = df.sort_values("start_ns", kind="stable").reset_index(drop=True)
    cache[key] = df
    return df


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


def nvtx(trace: T.Trace) -> pd.DataFrame:
    """All NVTX ranges with an end (cached)."""
    cache = _cache(trace)
    if "nvtx" not in cache:
        r = T.nvtx_ranges(trace)
        cache["nvtx"] = r[r["end_ns"].notna()].astype({"end_ns": "int64"})
    return cache["nvtx"]


def label_at(trace: T.Trace, st: Steady, start: int, end: int) -> str | None:
    """Text of the innermost NVTX range on the step thread overlapping [start, end] the most."""
    if st.step_tid is None:
        return None
    r = nvtx(trace)
    r = r[(r["global_tid"] == st.step_tid) & (r["end_ns"] > start) & (r["start_ns"] < end)]
    r = r[~r["text"].isin(["measure", "step"])]
    if r.empty:
        return None
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
        False,
        0.0,
        {},
        [],
        f"table {table} is missing: the report has no {what} (CPU capture or --trace without "
        "cuda), so this class cannot be judged",
    )
