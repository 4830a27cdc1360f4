"""The CUDA API calls of the window: one scan of the API table (:func:`window_calls`) that
the host view, host_sync and launch_bound share, and lookups from a GPU item to its launch."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from analysis import trace as T
from analysis.detect.view import _events
from analysis.detect.view._api import (
    CATEGORIES,
    LAUNCH,
    MEMCPY_CALL,
    SYNC,
    _category_codes,
    api_names,
    category_ids,
)
from analysis.detect.view._arrays import by_start, first_values, lookup
from analysis.detect.view._gpu import DTOH, KIND_MEMCPY, Activity
from analysis.detect.view._reads import (
    RUNTIME,
    WINDOW,
    _end_back,
    _end_column,
    _name_under_duration,
    _read_ahead,
    _resolved,
    id_list,
    per_process_corr,
    scoped_corr,
    trace_cache,
)
from analysis.detect.view._window import Steady

__all__ = [
    "LAUNCH_LOOKBACK_NS",
    "activity_launch_ends",
    "blocking_calls",
    "caller_tids",
    "launch_ends",
    "prefetch_calls",
    "window_api",
    "window_calls",
]


def window_api(trace: T.Trace, st: Steady, categories: tuple[str, ...]) -> dict[str, np.ndarray]:
    """CUDA API calls of ``categories`` overlapping the window (start, end, corr, name, tid),
    sorted by start (ties in table order): taken from :func:`window_calls`, no scan of its own."""
    calls = window_calls(trace, st)
    codes = [CATEGORIES.index(c) for c in categories]
    keep = np.isin(calls["cat"], codes) & (calls["end"] > st.lo)
    return {k: v[keep] for k, v in calls.items()}


def blocking_calls(
    trace: T.Trace,
    act: Activity,
    calls: Mapping[str, np.ndarray],
    loop_streams: np.ndarray | None = None,
) -> np.ndarray:
    """Which of ``calls`` (rows of :func:`window_calls`) wait for the GPU: sync-category calls,
    and memcpy calls whose copy is device-to-host and either synchronous (no ``Async``) or into
    pageable memory. The copies are looked up for the memcpy calls only. With ``loop_streams``
    (the streams the loop's own work runs on: waits for *that* work), an event sync whose event
    was recorded on another stream is left out (:mod:`analysis.detect._events`: it waits for
    another pipeline, DALI's, and leaves the loop's queue running); without, every blocking
    call counts (the host is blocked either way)."""
    out = _blocking(trace, act, calls)
    if loop_streams is not None:
        out &= ~_events.foreign_event_syncs(trace, calls["corr"], loop_streams)
    return out


def _blocking(trace: T.Trace, act: Activity, calls: Mapping[str, np.ndarray]) -> np.ndarray:
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


#: How far before the window launch calls are read: a kernel queued ahead was launched earlier.
LAUNCH_LOOKBACK_NS = 1_000_000_000


def window_calls(trace: T.Trace, st: Steady) -> dict[str, np.ndarray]:
    """Every CUDA API call overlapping the window or made up to :data:`LAUNCH_LOOKBACK_NS`
    before it (start, end, corr, name, tid, and ``cat``: the CATEGORIES code of the name),
    sorted by start: the one scan of the API table that the host view, host_sync and
    launch_bound share (cached; see :func:`prefetch_calls`). Calls of no role ("other")
    shorter than ``st.min_call_ns`` are left out."""
    key = ("calls", st.lo, st.hi, st.min_call_ns)
    cache = trace_cache(trace)
    if key not in cache:
        cache[key] = _read_calls(trace, st)
    return _resolved(cache, key)


def prefetch_calls(trace: T.Trace, st: Steady) -> None:
    """Start :func:`window_calls`' scan on a thread of its own, through a second connection,
    so that it runs while the GPU tables are read and worked on (the two big reads of a big
    export then overlap instead of taking turns). window_calls waits for it."""
    key = ("calls", st.lo, st.hi, st.min_call_ns)
    if key not in trace_cache(trace) and trace.has(RUNTIME):
        _read_ahead(trace, key, "window-calls", lambda own: _read_calls(own, st))


def _read_calls(trace: T.Trace, st: Steady) -> dict[str, np.ndarray]:
    """The scan behind :func:`window_calls` (on whichever connection ``trace`` holds)."""
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
    if per_process_corr(trace):
        calls["corr"] = scoped_corr(calls["corr"], calls["tid"])
    calls = by_start(calls)
    return calls | {"cat": _category_codes(trace, calls["name"])}


def launch_ends(trace: T.Trace, st: Steady, corr: np.ndarray) -> np.ndarray:
    """For each correlation id, the end of the first launch call (in start order) among
    :func:`window_calls` that has it, NaN where none does; the lookup table is cached."""
    key = ("launch_ends", st.lo, st.hi)
    cache = trace_cache(trace)
    if key not in cache:
        calls = window_calls(trace, st)
        is_launch = calls["cat"] == LAUNCH
        uniq, ends = first_values(calls["corr"][is_launch], calls["end"][is_launch])
        cache[key] = (uniq, ends.astype(float))
    found, ends = lookup(*cache[key], corr)
    ends[~found] = np.nan
    return ends


def activity_launch_ends(trace: T.Trace, st: Steady, act: Activity) -> np.ndarray:
    """:func:`launch_ends` of every row of the window's activity ``act`` (cached: launch_bound
    and the host view both look them up). Read-only."""
    key = ("activity_launch_ends", st.lo, st.hi)
    cache = trace_cache(trace)
    if key not in cache:
        cache[key] = launch_ends(trace, st, act.corr)
    return cache[key]


def caller_tids(trace: T.Trace, st: Steady, corr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mask of ``corr`` made by one of :func:`window_calls`, the thread of the first such call,
    for the found ones only); the lookup table is cached."""
    key = ("caller_tids", st.lo, st.hi)
    cache = trace_cache(trace)
    if key not in cache:
        calls = window_calls(trace, st)
        cache[key] = first_values(calls["corr"], calls["tid"])
    found, tids = lookup(*cache[key], corr)
    return found, tids[found]
