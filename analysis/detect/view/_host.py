"""Why the GPU is idle: the training thread's timeline set against the GPU's, with a
counterfactual for the syncs.

Every moment of the steady window in which the GPU does nothing is attributed to what the main
thread (the one that launches most kernels) was doing at that moment:

- ``sync``: blocked in a call that waits for the GPU (stream/device/event synchronise, a
  blocking device-to-host copy);
- ``data``: in a *host stretch* (no CUDA call for at least ``stretch_ms``) that shows input
  work: an OS-runtime file read or wait (a queue fed by loader workers, a pipe, a condition
  variable) covering part of it, a host-to-device copy of the new batch right after it, or a
  user NVTX range whose name hints at loading; unless the loop threads spend all of it but
  less than ``stretch_ms`` waiting for the GIL (``gil_bound``): a thread that waited a switch
  interval for the GIL before the batch's copy did no input work (its waits are a cause of
  their own, ``gil``, whatever the stretch);
- ``host``: in a host stretch without such evidence (CPU work of some other kind);
- ``dispatch``: between and inside CUDA calls that come close together (Python, autograd and
  launch overhead: the host cannot issue work as fast as the GPU finishes it);
- ``queued``: none of the host's doing: the kernel that ends the gap had been launched before
  the gap began (the GPU waited on another stream, an event or a copy engine).

Syncs only *expose* host time: without them the host runs ahead and its work overlaps the
GPU's. So the idle the syncs cost is counterfactual: with ``H`` the main thread's time not
blocked in syncs and ``G`` the GPU's busy time, the window would take ``max(H, G)`` without
them, and ``T - max(H, G)`` is what removing the syncs saves. The host's own pace,
``max(0, H - G)``, is split between data, host and dispatch by the idle each covers; when the
host is the slower side (``H > G``), removing a block of input or other host work, syncs kept,
saves all the idle it covers, and that is its share instead (see :func:`_host_savings`). Each
class's impact is therefore an estimate of the window share that removing that one cause would
save, and the larger one is the primary.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis import trace as T
from analysis.detect.config import DiagnosisConfig, GilContentionThresholds, HostThresholds
from analysis.detect.view import _intervals as I
from analysis.detect.view._api import LAUNCH
from analysis.detect.view._arrays import counted, member, process_of, rows_where, search, top
from analysis.detect.view._calls import (
    activity_launch_ends,
    blocking_calls,
    caller_tids,
    prefetch_calls,
    window_calls,
)
from analysis.detect.view._gil_waits import read_waits
from analysis.detect.view._gpu import (
    HTOD,
    KIND_KERNEL,
    KIND_MEMCPY,
    Activity,
    busy,
    gpu_starts,
    steady_activity,
)
from analysis.detect.view._osrt import WAIT_CALLS, osrt_ids, prefetch_osrt, thread_osrt
from analysis.detect.view._reads import RUNTIME, has_gpu, name_ids, trace_cache
from analysis.detect.view._window import Steady, loop_thread, steady

CAUSES = ("sync", "data", "host", "dispatch")


@dataclass(frozen=True)
class HostView:
    """The attribution of one steady window (all times in ns)."""

    tid: int
    issuing: np.ndarray
    """The threads that issue the loop's GPU work (the main thread among them)."""
    span_ns: int
    gpu_busy_ns: int
    blocked_ns: int
    idle_by: dict[str, int]
    saving_by: dict[str, float]
    stretch_ns: dict[str, int]
    evidence: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[tuple[int, int]]] = field(default_factory=dict)

    @property
    def idle_ns(self) -> int:
        return self.span_ns - self.gpu_busy_ns

    def share(self, cause: str) -> float:
        """Estimated share of the window that removing ``cause`` would save."""
        return float(self.saving_by.get(cause, 0.0)) / max(1, self.span_ns)


def _osrt(trace: T.Trace, st: Steady, tid: int, ids: list[int], every: list[int]):
    """Union of the thread's OS-runtime calls with name ids ``ids`` in the window, out of the
    one read of those in ``every`` (all the names the host view asks about)."""
    if not trace.has("OSRT_API") or not ids:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    rows = thread_osrt(trace, st, tid, every)
    rows = rows_where({k: rows[k] for k in ("start", "end")}, member(rows["name"], ids))
    return I.union(np.maximum(rows["start"], st.lo), np.minimum(rows["end"], st.hi))


def hint_ranges(trace: T.Trace, st: Steady, tid: int, hints: list[str]):
    """Union of the thread's NVTX ranges whose name contains a loading hint (lower-cased, as
    :func:`analysis.trace.nvtx_ranges` would give them, marks and open ranges left out)."""
    if not trace.has("NVTX_EVENTS") or not hints:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    rows = _hint_candidates(trace, st, tid, hints)
    low = pd.Series([r[2] for r in rows], dtype=T.STR).str.lower()
    hit = np.zeros(len(rows), bool)
    for h in hints:
        hit |= low.str.contains(h, regex=False).to_numpy(bool)
    s = np.array([r[0] for r in rows], np.int64)[hit]
    e = np.array([r[1] for r in rows], np.int64)[hit]
    return I.union(np.clip(s, st.lo, None), np.clip(e, None, st.hi))


def _hint_candidates(
    trace: T.Trace, st: Steady, tid: int, hints: list[str]
) -> list[tuple[int, int, str]]:
    """(start, end, text) of the thread's NVTX ranges in the window that may hold a hint: one
    lean query instead of :func:`analysis.trace.nvtx_ranges` (names, domains, depths: a
    second per range on a loop that marks every operator). SQLite's LIKE folds ASCII case
    alone, so a text with another character is kept for pandas to judge, as is every text
    where a hint is not plain ASCII."""
    types = "SELECT id FROM {} WHERE name IN ('NvtxPushPopRange', 'NvtxStartEndRange')"
    text = "COALESCE(n.text, s.value)"
    params: dict[str, object] = {"tid": int(tid), "lo": st.lo, "hi": st.hi}
    like = ""
    if all(h.isascii() for h in hints):
        params |= {f"h{i}": "%" + _like_escaped(h) + "%" for i, h in enumerate(hints)}
        params["other"] = "*[^\x01-\x7f]*"  # any character beyond ASCII
        ors = [f"{text} LIKE :h{i} ESCAPE '\\'" for i in range(len(hints))]
        like = f" AND ({' OR '.join([*ors, f'{text} GLOB :other'])})"
    sql = f"""SELECT n.start, n."end", {text} FROM NVTX_EVENTS AS n
              LEFT JOIN StringIds AS s ON s.id = n.textId
              WHERE n.eventType IN ({types.format(T.enum_table(trace, "ENUM_NSYS_EVENT_TYPE"))})
              AND n.globalTid = :tid AND n."end" > :lo AND n.start < :hi
              AND {text} IS NOT NULL{like}"""
    return trace.query(sql, params)[1]


def _like_escaped(text: str) -> str:
    """``text`` as a literal inside a LIKE pattern with ``ESCAPE '\\'``."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def suite_ranges(trace: T.Trace, st: Steady, name: str):
    """Union of the step thread's NVTX ranges called ``name``, clipped to the window."""
    r = T.step_ranges(trace, name)
    r = r[(r["global_tid"] == st.step_tid) & r["end_ns"].notna()].astype({"end_ns": "int64"})
    return I.union(r["start_ns"].clip(lower=st.lo), r["end_ns"].clip(upper=st.hi))


def host_stretches(calls: dict[str, np.ndarray], st: Steady, min_ns: int):
    """Gaps of at least ``min_ns`` between the thread's consecutive CUDA calls (window edges
    count as calls): (start, end, index of the call that follows, -1 at the window end)."""
    s, e = calls["start"], calls["end"]
    if s.size == 0:  # one stretch, the whole window, if long enough
        n = int(st.hi - st.lo >= min_ns)
        return np.full(n, st.lo, np.int64), np.full(n, st.hi, np.int64), np.full(n, -1, np.int64)
    run = np.maximum.accumulate(e)  # the host is in a call until the latest end so far
    nxt = np.flatnonzero(s[1:] - run[:-1] >= min_ns) + 1  # calls that end a stretch
    head, tail = s[0] - st.lo >= min_ns, st.hi - run[-1] >= min_ns
    nxt = np.concatenate([[0] if head else [], nxt, [-1] if tail else []]).astype(np.int64)
    lo = np.where(nxt > 0, run[np.maximum(nxt - 1, 0)], np.where(nxt == 0, st.lo, run[-1]))
    hi = np.where(nxt >= 0, s[nxt], st.hi)
    return np.clip(lo, st.lo, st.hi), np.clip(hi, st.lo, st.hi), nxt


def _h2d_follows(trace, act, calls, nxt, look: int) -> np.ndarray:
    """For each stretch: is one of the next ``look`` CUDA calls, before the first kernel launch,
    a host-to-device copy? Pinning a batch (``pin_memory``) makes a few calls of its own (event
    queries, a host allocation) before the copy; a launch first means the stretch fed compute."""
    cp = act.take((act.kind == KIND_MEMCPY) & (act.direction == HTOD))
    h2d_corr = np.unique(cp.corr)
    n = calls["corr"].size
    out = np.zeros(nxt.size, bool)
    open_ = nxt >= 0  # still looking: no launch seen yet
    for k in range(look):  # only the calls after a stretch are looked up
        idx = nxt + k
        ok = open_ & (idx < n)
        out[ok] |= np.isin(calls["corr"][idx[ok]], h2d_corr)
        open_ = ok & ~out
        open_[ok] &= calls["cat"][idx[ok]] != LAUNCH
    return out


def _who_launched(trace: T.Trace, st: Steady, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """(launching thread, stream) of each GPU item starting in [lo, hi), joined on the
    correlation id with the window's launch and copy calls (both read once, cached)."""
    g = gpu_starts(trace, st.lo, st.hi, lo, hi, ("corr", "stream"))
    found, tids = caller_tids(trace, st, g["corr"])
    return tids, g["stream"][found]


def issuing_threads(
    trace: T.Trace, st: Steady, act: Activity | None, min_share: float
) -> tuple[int, np.ndarray] | None:
    """(main thread, threads that issue the training loop's GPU work), or None.

    Read on the whole window: which thread launched each kernel (by correlation id) onto which
    stream. The loop's threads take turns within a step (the main thread's forward, PyTorch's
    autograd thread's backward), so a part of the window shorter than a step, or a window of
    sub-step iterations, would see one of them only. The main thread is the step thread when it
    launches, else :func:`~._window.loop_thread` of those launching onto the busiest stream
    (the process's main thread over PyTorch's autograd thread); the issuing threads are those
    of its process that launch a fair share onto its streams (the autograd thread, which runs
    the backward while the main thread waits), not those feeding streams of their own (DALI's,
    a side loader's), nor another process's: a stream id names a stream of one CUDA context,
    and another rank's threads feed another context (its own GPU) with ids of their own.
    Cached (the host view and the time model both ask); ``act`` is not read.
    """
    key = ("issuing", st.lo, st.hi, st.step_tid, st.min_call_ns, float(min_share))
    cache = trace_cache(trace)
    if key not in cache:
        cache[key] = _issuing(trace, st, min_share)
    return cache[key]


def _issuing(trace: T.Trace, st: Steady, min_share: float) -> tuple[int, np.ndarray] | None:
    """:func:`issuing_threads`, uncached."""
    tid_of, stream_of = _who_launched(trace, st, st.lo, st.hi)
    if tid_of.size == 0:
        return None
    if st.step_tid is not None and (tid_of == st.step_tid).any():
        main = int(st.step_tid)
    else:
        streams, n = counted(stream_of)
        busiest = streams[np.argmax(n)]
        tids, n = counted(tid_of[stream_of == busiest])
        main = loop_thread(tids, n)
    own = _same_process(tid_of, main)
    if not own.all():  # another process's launches: left out
        tid_of, stream_of = tid_of[own], stream_of[own]
    mine, n = counted(stream_of[tid_of == main])
    main_streams = mine[n >= 0.05 * n.sum()]
    tids, n = counted(tid_of[member(stream_of, main_streams)])
    issuing = tids[n >= min_share * n.sum()]
    return main, np.union1d(issuing, [main]).astype(np.int64)


def _same_process(tids: np.ndarray, main: int) -> np.ndarray:
    """Mask of the global thread ids ``tids`` in ``main``'s process (nsys's global thread id
    holds the process id above bit 24: :func:`~._window.process_main_thread`)."""
    return process_of(tids) == process_of(main)


def host_view(trace: T.Trace, cfg: DiagnosisConfig) -> HostView | None:
    """The attribution of the steady window, or None without CUDA API calls or a main thread
    (a CPU capture). Cached per trace and settings (``cfg``'s ``window``, ``host``, the
    ``gil_contention`` section's GIL reading and ``data_stall.range_name``)."""
    key = ("host_view", repr(cfg.host), repr(cfg.window), repr(cfg.gil_contention))
    key += (cfg.data_stall.range_name,)
    cache = trace_cache(trace)
    if key in cache:
        return cache[key]
    cache[key] = result = _compute(trace, cfg)
    return result


def _compute(trace: T.Trace, cfg: DiagnosisConfig) -> HostView | None:
    hc, gil = cfg.host, cfg.gil_contention
    if not trace.has(RUNTIME) or not has_gpu(trace):
        return None
    st = steady(trace, cfg.window)
    prefetch_calls(trace, st)  # the API table read beside the GPU tables
    # the threads first (the GPU's rows as read are enough), then one OS-runtime scan for the
    # input evidence and the GIL waits, read beside the rest (the Activity built first)
    found = issuing_threads(trace, st, None, hc.min_launch_share)
    if found is None:
        return None
    tid, issuing = found
    gil_ids = name_ids(trace, list(gil.wait_calls))
    prefetch_osrt(trace, st, issuing, [*osrt_ids(trace, hc), *gil_ids])
    act = steady_activity(trace, cfg.window)[1]
    every = window_calls(trace, st)
    calls = rows_where(every, member(every["tid"], issuing) & (every["end"] > st.lo))
    # every issuing thread's blocking calls: a sync in a backward hook runs on PyTorch's
    # autograd thread while the main thread waits for the backward, and blocks the loop alike
    block = blocking_calls(trace, act, calls)
    bs, be = I.union(
        np.maximum(calls["start"][block], st.lo), np.minimum(calls["end"][block], st.hi)
    )

    gbs, gbe = busy(trace, st, act)
    gs, ge = I.gaps(gbs, gbe, st.lo, st.hi)
    queued = _queued_gaps(trace, st, act, gs, ge)  # the next kernel was launched long before
    # the loop threads' waits for the GIL are a cause of their own, out of every stretch
    ws, we = I.difference(*_gil_waits(trace, gil, st, tid, issuing), bs, be)

    ss, se, nxt = host_stretches(calls, st, int(hc.stretch_ms * 1e6))
    ev = input_evidence(trace, cfg, st, act, tid, calls, (ss, se, nxt), gil=(ws, we))
    is_data = is_input(ev)
    if st.mode == "nvtx":  # the suite's own capture marks every batch fetch: it decides
        is_data &= ev["suite_range"]
    ds, de = I.difference(*I.union(ss[is_data], se[is_data]), ws, we)
    hs, he = I.difference(*I.union(ss[~is_data], se[~is_data]), ws, we)
    idle_sync, idle_data, idle_host, idle_gil = I.overlap_totals(
        gs, ge, [(bs, be), (ds, de), (hs, he), (ws, we)]
    )
    idle_total = I.length(gs, ge)
    idle_queued = I.length(gs[queued], ge[queued])
    idle_dispatch = max(0, idle_total - idle_queued - idle_sync - idle_data - idle_host - idle_gil)

    span, gpu_busy = st.span_ns, I.length(gbs, gbe)
    blocked = I.length(bs, be)
    host_time = span - blocked
    sync_saving = float(max(0, span - max(host_time, gpu_busy)))
    own_pace = float(max(0, min(idle_total - idle_queued, host_time - gpu_busy)))
    idle_own = {"data": idle_data, "host": idle_host, "gil": idle_gil, "dispatch": idle_dispatch}
    saving = {"sync": sync_saving} | _host_savings(idle_own, own_pace)
    return HostView(
        tid=int(tid),
        issuing=issuing,
        span_ns=span,
        gpu_busy_ns=gpu_busy,
        blocked_ns=blocked,
        idle_by={
            "sync": idle_sync,
            "data": idle_data,
            "host": idle_host,
            "queued": idle_queued,
            "gil": idle_gil,
            "dispatch": idle_dispatch,
        },
        saving_by=saving,
        stretch_ns={"data": I.length(ds, de), "host": I.length(hs, he)},
        evidence={k: int(ev[k].sum()) for k in ("read", "wait", "h2d_after", "nvtx_hint")}
        | {"gil_bound": int((ev["gil_bound"] & is_evidence(ev)).sum())}
        | {"stretches": int(ss.size)},
        examples=_examples(gs, ge, ds, de, hs, he, bs, be),
    )


def _gil_waits(
    trace: T.Trace, gil: GilContentionThresholds, st: Steady, tid: int, issuing: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The loop threads' GIL waits in the window (``_gil_waits.read_waits``), as a union."""
    found = read_waits(trace, st, tid, gil, issuing)
    if found is None:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    s = np.clip(np.asarray(found.starts, np.int64), st.lo, st.hi)
    return I.union(s, np.clip(np.asarray(found.ends, np.int64), st.lo, st.hi))


def input_evidence(
    trace: T.Trace,
    cfg: DiagnosisConfig,
    st: Steady,
    act: Activity,
    tid: int,
    calls: dict[str, np.ndarray],
    stretches: tuple[np.ndarray, np.ndarray, np.ndarray],
    gil: tuple[np.ndarray, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """Per host stretch (:func:`host_stretches`' start, end, next call), which evidence of input work
    it shows: ``read`` (an OS-runtime file read in it), ``wait`` (waits on other threads or
    processes over ``min_wait_share`` of it), ``h2d_after`` (the batch's copy among the next
    calls), ``nvtx_hint`` (a user range named like loading), ``suite_range`` (the suite's own
    ``data_load`` range overlaps it), and against them ``gil_bound`` (the loop threads, those
    making ``calls``, wait for the GIL through all of it but less than ``stretch_ms``: no host
    work of their own, whatever comes after). Shared by the host view and the time model
    (``timemodel``), which decide with :func:`is_input`; ``gil``: those waits where the caller
    has read them already (a union), else they are read here."""
    hc = cfg.host
    ss, se, nxt = stretches
    file_ids, wait_ids, _ = evidence_ids(trace, hc)
    every = osrt_ids(trace, hc)  # the model's blocked calls too: one scan serves both
    prefetch_osrt(trace, st, [tid], every)  # the OS-runtime scan runs beside the rest
    ns, ne = hint_ranges(trace, st, tid, [h.lower() for h in hc.data_hints])
    size = np.maximum(1, se - ss)
    out = {
        "h2d_after": _h2d_follows(trace, act, calls, nxt, hc.h2d_lookahead_calls),
        "nvtx_hint": I.overlap_each(ss, se, ns, ne) >= 0.5 * size,
        "suite_range": np.ones(ss.size, bool),
    }
    if st.mode == "nvtx":
        ls, le = suite_ranges(trace, st, cfg.data_stall.range_name)
        out["suite_range"] = I.overlap_each(ss, se, ls, le) > 0
    rs, re_ = _osrt(trace, st, tid, file_ids, every)
    ws, we = _osrt(trace, st, tid, wait_ids, every)
    out["read"] = _material_reads(ss, se, *_reads_not_saving(trace, cfg, st, tid, rs, re_), hc)
    out["wait"] = I.overlap_each(ss, se, ws, we) >= hc.min_wait_share * size
    if gil is None:
        gil = _gil_waits(trace, cfg.gil_contention, st, tid, np.unique(calls["tid"]))
    gs, ge = gil
    own = (se - ss) - I.overlap_each(ss, se, gs, ge)
    out["gil_bound"] = (own < int(hc.stretch_ms * 1e6)) & (se > ss)
    keys = ("read", "wait", "h2d_after", "nvtx_hint", "suite_range", "gil_bound")
    return {k: out[k] for k in keys}


def _material_reads(ss, se, rs, re_, hc: HostThresholds) -> np.ndarray:
    """Per stretch: its file reads are input work's (``min_read_share`` of it or ``min_reads``
    calls), not a few small reads beside other host work."""
    if rs.size == 0:
        return np.zeros(ss.size, bool)
    took = I.overlap_each(ss, se, rs, re_)
    calls = np.searchsorted(rs, se, side="left") - np.searchsorted(rs, ss, side="left")
    return (took > 0) & (
        (took >= hc.min_read_share * np.maximum(1, se - ss)) | (calls >= hc.min_reads)
    )


def _reads_not_saving(trace, cfg, st, tid, rs, re_) -> tuple[np.ndarray, np.ndarray]:
    """The file reads (and opens) that are not part of a save: those inside a write run of
    the thread, or in the lead before one, open or read what the save writes (output, never
    input work)."""
    from analysis.detect.view._writes import near_writes  # it reads this module's names

    ws, we = near_writes(trace, cfg, st, tid)
    if ws.size == 0 or rs.size == 0:
        return rs, re_
    inside = I.overlap_each(rs, re_, ws, we) >= np.maximum(re_ - rs, 1)
    return rs[~inside], re_[~inside]


def is_evidence(ev: Mapping[str, np.ndarray]) -> np.ndarray:
    """Per stretch: does it show any evidence of input work (``input_evidence``)?"""
    return ev["read"] | ev["wait"] | ev["h2d_after"] | ev["nvtx_hint"]


def is_input(ev: Mapping[str, np.ndarray]) -> np.ndarray:
    """Per stretch: input work, i.e. evidence of it and host work of the loop's own beyond its
    GIL waits (the suite's ``data_load`` ranges, where the capture has them, are the callers'
    to add)."""
    return is_evidence(ev) & ~ev["gil_bound"]


def evidence_ids(trace: T.Trace, host: HostThresholds) -> tuple[list[int], list[int], list[int]]:
    """StringIds ids of the host settings' file calls, of the waits on input
    (:data:`WAIT_CALLS`) and of both (one OS-runtime scan reads the union)."""
    file_ids = name_ids(trace, list(host.file_calls))
    wait_ids = name_ids(trace, list(WAIT_CALLS))
    return file_ids, wait_ids, sorted(set(file_ids) | set(wait_ids))


def _host_savings(idle: dict[str, int], own_pace: float) -> dict[str, float]:
    """What removing each kind of host work would save.

    Every kind gets its part of the host's own pace, ``max(0, H - G)``, split by the idle each
    covers. Input and other host work come in blocks that can go as a whole: removing one, syncs
    kept, saves all the GPU idle it covers, so each gets at least that. (Only saving the
    own-pace part where the GPU is the slower side, ``H <= G``, missed measured second causes:
    ``hs_step_logging`` and ``hs_hard_mining`` gain 1.24x and 1.25x from dropping their input
    work, syncs kept.) Dispatch is spread over the launches: the idle it leaves after each sync
    is the sync's cost (the drained queue refilling), so it stays at its own-pace part."""
    pool = sum(idle.values())
    out = {c: (own_pace * v / pool if pool else 0.0) for c, v in idle.items()}
    return out | {c: float(max(out[c], idle[c])) for c in ("data", "host", "gil") if c in idle}


def _queued_gaps(
    trace: T.Trace, st: Steady, act: Activity, gs: np.ndarray, ge: np.ndarray
) -> np.ndarray:
    """Mask of the idle gaps that the host did not cause: the kernel that ends the gap had
    its launch call return before the gap began (the GPU waited on something else: another
    stream, an event, a copy engine)."""
    if gs.size == 0:
        return np.zeros(0, bool)
    is_k = act.kind == KIND_KERNEL
    ends = activity_launch_ends(trace, st, act)
    ks, ke = (act.start, ends) if is_k.all() else (act.start[is_k], ends[is_k])
    if ks.size == 0:
        return np.zeros(gs.size, bool)
    i = search(ks, ge)  # never negative: clipped above alone, in place
    np.minimum(i, ks.size - 1, out=i)
    at = np.flatnonzero(ks[i] == ge)  # the gaps a kernel ends: the launch looked up for those
    launch_end = ke[i[at]]
    out = np.zeros(gs.size, bool)
    out[at] = np.isfinite(launch_end) & (launch_end < gs[at])
    return out


def _examples(gs, ge, ds, de, hs, he, bs, be) -> dict[str, list[tuple[int, int]]]:
    """The three longest idle gaps overlapping each kind of host interval."""
    out: dict[str, list[tuple[int, int]]] = {}
    for cause, (s, e) in {"data": (ds, de), "host": (hs, he), "sync": (bs, be)}.items():
        hit = I.overlap_any(gs, ge, s, e)
        idx = np.flatnonzero(hit)
        longest = idx[top(ge[idx] - gs[idx])]
        out[cause] = [(int(gs[i]), int(ge[i])) for i in longest]
    return out


def launching_threads(trace: T.Trace, cfg: DiagnosisConfig) -> tuple[int, list[int]] | None:
    """(main thread, the threads issuing the loop's GPU work) on a GPU capture (the host
    view's), the suite's step thread alone on a CPU one; None where there is none."""
    st = steady(trace, cfg.window)
    if not has_gpu(trace):
        return (st.step_tid, [st.step_tid]) if st.mode == "nvtx" and st.step_tid else None
    found = host_view(trace, cfg)
    return None if found is None else (found.tid, [int(t) for t in found.issuing])


def gil_waits(trace: T.Trace, cfg: DiagnosisConfig) -> tuple[np.ndarray, np.ndarray]:
    """The union of the launching threads' GIL-wait intervals in the steady window, as two
    sorted int64 arrays (starts_ns, ends_ns) on the trace's clock, disjoint and clipped to the
    window: read from nsys's GIL trace when the report has one, else from the threads'
    OS-runtime wait calls (``_gil_waits``, by the ``gil_contention`` section's reading
    settings); empty arrays when the report has neither or no launching thread. For the time
    model: removing the GIL contention takes these intervals out of the loop's host time."""
    who = launching_threads(trace, cfg)
    st = steady(trace, cfg.window)
    found = None if who is None else read_waits(trace, st, who[0], cfg.gil_contention, who[1])
    if found is None:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return found.starts.astype(np.int64), found.ends.astype(np.int64)
