"""host_sync: the host blocks on the GPU inside the step, draining its queue every time.

Sync calls: CUDA API calls of category ``sync`` plus blocking device-to-host copies (synchronous
``cudaMemcpy``-style calls, or any DtoH into pageable memory). A GPU-idle gap is *exposed by a
sync* when it starts while a sync call is blocking and the same thread issues its next CUDA call
within ``resume_us`` of the sync returning (it went straight back to GPU work, so the idle is the
drained queue, not some other host phase such as data loading). Rule: syncs per step (or per s
without steps) >= ``min_syncs_per_step`` / ``min_syncs_per_s`` AND exposed gaps cover
>= ``min_sync_exposed_share`` of the window. impact = sync_exposed_share.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from analysis import trace as T
from analysis.detect import _common as C
from analysis.findings import Finding

KLASS = "host_sync"


def _copies_by_corr(act: C.Activity) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The window's memcpys, one per correlation id (the first in activity order): sorted
    correlation ids with the direction and pageability of their copy."""
    cp = act.take(act.kind == C.KIND_MEMCPY)
    corr, first = np.unique(cp.corr, return_index=True)
    return corr, cp.direction[first], cp.pageable[first]


def _sync_calls(trace: T.Trace, st: C.Steady, act: C.Activity) -> dict[str, np.ndarray]:
    """Blocking calls overlapping the window: sync-category API calls plus memcpy calls whose
    copy is device-to-host and either synchronous (no ``Async``) or into pageable memory.
    Sorted by start (ties in table order); ``base`` holds the base names."""
    cols = ("start", "end", "corr", "name", "tid", "rowid")
    calls = C.api_in_window(trace, st.lo, st.hi, ("sync", "memcpy"), cols, few=True)
    names = C.api_names(trace)
    base = np.array([names[int(i)][0] for i in calls["name"]], dtype=object)
    cat = np.array([names[int(i)][1] for i in calls["name"]], dtype=object)
    corr, direction, pageable = _copies_by_corr(act)
    pos = np.clip(np.searchsorted(corr, calls["corr"]), 0, max(0, corr.size - 1))
    has_copy = (corr[pos] == calls["corr"]) if corr.size else np.zeros(cat.size, bool)
    d2h = has_copy & (direction[pos] == C.DTOH if corr.size else False)
    is_async = np.array(["Async" in b for b in base], dtype=bool)
    pageable_copy = has_copy & (pageable[pos] if corr.size else False)
    blocking = (cat == "memcpy") & d2h & (~is_async | pageable_copy)
    keep = (cat == "sync") | blocking
    out = {k: v[keep] for k, v in calls.items()}
    out["base"] = base[keep]
    return out


def _resumes_quickly(
    trace: T.Trace,
    st: C.Steady,
    syncs: dict[str, np.ndarray],
    blocking_rows: np.ndarray,
    r_ns: float,
) -> np.ndarray:
    """For each sync: does the same thread make a non-blocking CUDA call (overlapping the window)
    that starts within ``r_ns`` of the sync's end?

    Only calls starting in [end, end + r_ns] of some sync can answer yes, so only those are read:
    the API table is filtered in SQL by buckets of width ~r_ns around the syncs' ends.
    """
    ends, tids = syncs["end"], syncs["tid"]
    if ends.size == 0 or r_ns < 0:
        return np.zeros(ends.size, bool)
    width = max(1, int(r_ns))
    lo_b, hi_b = ends // width - 1, (ends + int(np.ceil(r_ns))) // width + 1
    buckets = np.unique(
        np.concatenate([np.arange(a, b + 1) for a, b in zip(lo_b, hi_b, strict=True)])
    )
    where = (
        f"{C.WINDOW} AND (t.start / {width}) IN ({C.id_list(buckets)}) "
        f"AND t.globalTid IN ({C.id_list(np.unique(tids))})"
    )
    cols = {"start": "t.start", "tid": "t.globalTid", "rowid": "t.rowid"}
    near = T.int_columns(trace, C.RUNTIME, cols, where, {"lo": st.lo, "hi": st.hi}, few=True)
    other = ~np.isin(near["rowid"], blocking_rows)
    quick = np.zeros(ends.size, bool)
    for tid in np.unique(tids):
        starts = np.sort(near["start"][other & (near["tid"] == tid)])
        if starts.size == 0:
            continue
        mine = np.flatnonzero(tids == tid)
        i = np.searchsorted(starts, ends[mine], side="left")
        nxt = np.where(i < starts.size, starts[np.clip(i, 0, starts.size - 1)], np.inf)
        quick[mine] = (nxt - ends[mine]) <= r_ns
    return quick


def detect(trace: T.Trace, thresholds: Mapping[str, Any]) -> Finding:
    th = thresholds[KLASS]
    if not trace.has(C.RUNTIME):
        return C.missing(KLASS, C.RUNTIME, "CUDA API calls")
    st, act = C.steady_activity(trace, thresholds)
    blocking = _sync_calls(trace, st, act)
    first = blocking["start"] >= st.lo
    syncs = {k: v[first] for k, v in blocking.items()}
    metrics: dict[str, float] = {}
    name, value = st.rate("syncs", syncs["start"].size)
    metrics[name] = value
    # the same thread's next CUDA call after each sync returns, if it comes within resume_us
    quick = _resumes_quickly(trace, st, syncs, blocking["rowid"], th["resume_us"] * 1e3)
    bs, be = C.busy(trace, st, act)
    gs, ge = C.gaps(bs, be, st.lo, st.hi)
    gs, ge = gs[gs > st.lo], ge[gs > st.lo]  # a gap at the window's edge has no start to judge
    ss, se = syncs["start"], syncs["end"]
    j = np.searchsorted(ss, gs, side="right") - 1
    jj = np.clip(j, 0, None)
    exposed = (j >= 0) & (gs <= se[jj]) & quick[jj] if len(ss) else np.zeros(gs.size, bool)
    metrics["sync_exposed_share"] = C.length(gs[exposed], ge[exposed]) / st.span_ns
    metrics["sync_blocked_share"] = C.length(*C.union(ss, se)) / st.span_ns
    idx = np.flatnonzero(exposed)
    top = idx[np.argsort(-(ge[idx] - gs[idx]), kind="stable")[:3]]
    evidence = [
        C.stamp(st, gs[i], ge[i], after=str(syncs["base"][jj[i]]),
                nvtx=C.label_at(trace, st, gs[i], ge[i]))
        for i in top
    ]  # fmt: skip
    min_rate = th["min_syncs_per_step"] if st.per_step else th["min_syncs_per_s"]
    fired = value >= min_rate and metrics["sync_exposed_share"] >= th["min_sync_exposed_share"]
    reason = (
        f"{value:.2f} {name.replace('_', ' ')} (threshold {min_rate}); GPU idle right after a "
        f"sync {metrics['sync_exposed_share']:.1%} of the window (threshold "
        f"{th['min_sync_exposed_share']:.0%}); {st.note}"
    )
    return Finding(
        KLASS, fired, metrics["sync_exposed_share"] if fired else 0.0, metrics, evidence, reason
    )
