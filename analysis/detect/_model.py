"""A time model of the steady window: its host and GPU timelines replayed, with one cause removed.

Every finding predicts its speedup: "this cause removed entirely, everything else unchanged".
That number comes from replaying the window, not from a share of it. The replay takes what the
export recorded and re-runs it on two clocks:

- the **host**: the threads that issue the loop's GPU work (the main thread and PyTorch's
  autograd thread), merged into one sequence of CUDA calls, each preceded by the host time
  since the previous call (a *gap*: dispatch when short, a stretch of input or other host work
  when it is at least ``host.stretch_ms`` long, as ``_host`` classifies it) and taking its own
  time. A blocking call (a sync, a device-to-host read) ends when the GPU work it waits for
  ends, plus the call's own wake-up time;
- the **GPU**: every kernel, copy, memset and graph replay launched by those calls, in launch
  order per stream, starting at ``max(launch + latency, the stream's previous item's end)`` and
  lasting what it lasted. Items the replayed calls did not launch (another thread's, another
  process's) keep their recorded times.

Replayed unchanged, the model reproduces the recorded window (``model_fit``, replayed / recorded,
is reported; on the committed H100 exports it is within a few per cent). A cause is removed by
editing the inputs, never the outputs: syncs stop blocking (and their calls go); input stretches
and the batch's host-to-device copies go; other host work goes; dispatch goes (gaps, call times
and launch latency: every kernel queued at once, as one graph replay would); pageable copies go;
GIL waits are cut out of the gaps (see :func:`removal`). The GPU and the host then find their own new overlap, which is
what a share of the window cannot say: a sync that exposes host work costs more than its own
blocked time, and the host's or the GPU's floor stops a share near 1 from becoming a runaway
speedup.

nsys itself slows every traced CUDA call (CUPTI's callbacks and records): the recorded host is
slower than the program's own. A cost per traced call is taken off every call's host time in both
replays, so the prediction is for the program as it runs untraced: ``predict.trace_overhead_us``,
or, where the program's untraced step was measured (``step_ms``), the cost (or the pace of the
host's stretches) that makes the replay take that step (``_forecast``, which also turns two
replays into the prediction).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from analysis import trace as T
from analysis.detect import _common as C
from analysis.detect import _events as E
from analysis.detect import _host as H
from bottlenecks import SPECS

#: Gap kinds: how the host spent the time before a call (``_host``'s stretch classification).
DISPATCH, DATA, HOST = 0, 1, 2

#: Host-to-device copies at least this large carry a batch (scalars and small tables do not).
BATCH_BYTES = 64 * 1024


@dataclass(frozen=True)
class Timeline:
    """The window's host calls and GPU items, as the replay needs them (times in ns)."""

    t0: int
    """Replay start: the earliest launch of an item in the window (a GPU-bound loop's host runs
    ahead of its GPU; starting there puts the right work in the queue)."""
    op_start: np.ndarray
    op_end: np.ndarray
    gap: np.ndarray
    """Host time before each call not covered by an earlier call (the union of the threads)."""
    own: np.ndarray
    """The part of each call not overlapped by earlier calls."""
    block: np.ndarray
    cat: np.ndarray
    gap_kind: np.ndarray
    wait_item: np.ndarray
    """Per call: the item a blocking call waited for as recorded (-1: none identified)."""
    wait_stream: np.ndarray
    """Per call: the stream of the latest item launched before it (a stream sync's target)."""
    post: np.ndarray
    """Per blocking call: its recorded time after the awaited item ended (wake-up)."""
    item_op: np.ndarray
    """Per GPU item (in launch order): the call that launched it, -1 for items launched
    elsewhere (they keep their recorded times)."""
    item_start: np.ndarray
    item_end: np.ndarray
    item_stream: np.ndarray
    item_kind: np.ndarray
    """Activity kind of each item (``_common.KIND_*``)."""
    item_lat: np.ndarray
    """Recorded launch latency where the stream was free (else -1: the median is used)."""
    item_ptr: np.ndarray
    """CSR pointer: items of call i are ``item_ptr[i]:item_ptr[i + 1]`` (launched items first,
    in call order)."""
    pageable_h2d: np.ndarray
    batch_h2d: np.ndarray
    nccl: np.ndarray
    med_lat: int
    edges: np.ndarray
    """Iteration edges (ns, recorded): steps of the suite's NVTX, else the found iterations."""
    edge_side: str
    """``host`` (NVTX steps: host times, the window ends in a sync) or ``gpu`` (anchor items)."""
    launch_cap: int
    """Largest own time of a launch call: longer ones waited on a full launch queue."""
    delivery: np.ndarray
    """Per call: part of a batch's delivery (the calls after a stretch of input work up to the
    first kernel launch: its copies, pinning, events and the syncs that wait for them)."""
    tid: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """Per call: the thread that made it."""
    gil_cut: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """Per call: GIL-wait time inside its gap (zeros where the report holds none)."""
    blocked: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """Per call: time inside its gap, where the gap is a host stretch, the main thread slept
    until another thread woke it (``host.blocked_calls``; zeros where none)."""

    @property
    def n_ops(self) -> int:
        return int(self.op_start.size)

    @property
    def n_iterations(self) -> int:
        return int(self.edges.size - 1)


@dataclass(frozen=True)
class Removal:
    """What removing one cause edits in the replay's inputs."""

    gap_zero: np.ndarray | None = None
    gap_keep: np.ndarray | None = None
    """Of a zeroed gap, what stays besides its GIL waits (a cause of their own)."""
    gap_cut: np.ndarray | None = None
    own_zero: np.ndarray | None = None
    unblock: np.ndarray | None = None
    item_gone: np.ndarray | None = None
    no_latency: bool = False


def _edges(trace: T.Trace, cfg: Mapping[str, Any], st: C.Steady) -> tuple[np.ndarray, str]:
    """The window's iteration edges and on which clock they are (see Timeline.edge_side)."""
    if st.mode == "nvtx":
        r = T.step_ranges(trace)
        r = r[(r["global_tid"] == st.step_tid) & r["end_ns"].notna()]
        r = r[(r["start_ns"] >= st.lo) & (r["end_ns"] <= st.hi)].sort_values("start_ns")
        s = r["start_ns"].to_numpy(np.int64)
        return np.concatenate([s, r["end_ns"].to_numpy(np.int64)[-1:]]), "host"
    if st.edges is not None:
        return st.edges.astype(np.int64), "host" if st.edges_on_host else "gpu"
    return np.array([st.lo, st.hi], np.int64), "gpu"


def _sample_size(edges: np.ndarray, calls_per_it: float, max_ops: int, min_it: int) -> int:
    """How many iterations the replay takes: all, or as many as stay under ``max_ops`` calls
    (a 2,000-step export replays a sample, not the whole)."""
    n = edges.size - 1
    fit = int(max_ops // max(calls_per_it, 1.0))
    return int(min(n, max(min_it, fit)))


def timeline(trace: T.Trace, cfg: Mapping[str, Any]) -> Timeline | None:
    """The replay's inputs for the steady window (cached per trace and settings), or None when
    the report has no GPU activity, no CUDA calls or no launching thread."""
    pc = cfg.get("predict", {})
    key = ("timeline", repr(sorted(cfg.get("host", {}).items())), repr(sorted(pc.items())))
    key += (repr(sorted(cfg.get("window", {}).items())),)
    cache = C._cache(trace)
    if key not in cache:
        cache[key] = _timeline(trace, cfg)
    return cache[key]


def _timeline(trace: T.Trace, cfg: Mapping[str, Any]) -> Timeline | None:
    if not trace.has(C.RUNTIME) or not C.has_gpu(trace):
        return None
    hc, pc = cfg.get("host", {}), cfg.get("predict", {})
    st, act = C.steady_activity(trace, cfg)
    found = H._issuing_threads(trace, st, act, float(hc.get("min_launch_share", 0.02)))
    if found is None or len(act) == 0:
        return None
    tid, issuing = found
    edges, side = _edges(trace, cfg, st)
    if edges.size < 2:
        return None
    every = C.window_calls(trace, st)
    mine = np.isin(every["tid"], issuing)
    n_it = _sample_size(
        edges,
        np.count_nonzero(mine & (every["start"] >= st.lo)) / max(1, edges.size - 1),
        int(pc.get("max_calls", 60_000)),
        int(pc.get("min_iterations", 3)),
    )
    cap = (
        pc.get("max_iterations", 30) if st.mode == "nvtx" else pc.get("max_found_iterations", 1000)
    )
    n_it = min(n_it, max(int(cap), int(pc.get("min_iterations", 3))))
    edges = edges[edges.size - 1 - n_it :]  # the last ones: furthest from the start-up
    lo, hi = int(edges[0]), int(edges[-1])
    inside = (act.end > lo) & (act.start <= hi)  # the item at hi starts the next iteration
    # the replay starts at the earliest launch of an item in the (sampled) window
    first, call_of = C._first_values(every["corr"][mine], np.flatnonzero(mine))
    has_call, idx = C._lookup(first, call_of, act.corr)
    on = inside & has_call
    t0 = int(min(lo, every["start"][idx[on]].min())) if on.any() else lo
    if side == "host":  # a host ahead of its GPU: the work its last steps launched runs later
        inside |= (act.end > lo) & has_call & (every["start"][idx] < hi)
    act = act.take(inside)
    calls = C.rows_where(every, mine & (every["end"] > t0) & (every["start"] < hi))
    if calls["start"].size == 0:
        return None
    # what waits for the loop's own work (an event sync on DALI's stream does not)
    block = C.blocking_calls(trace, act, calls, E.loop_streams(act, calls["corr"]))
    st0 = C.Steady(t0, hi, st.mode, st.n_steps, st.step_ns, st.step_tid, st.note, st.min_call_ns)
    stretches = H._stretches(calls, st0, int(float(hc.get("stretch_ms", 1.0)) * 1e6))
    from analysis.detect import gil_contention as G

    gil = C.union(*G.gil_waits(trace, cfg))  # read once: the input evidence and the gaps
    ev = H.input_evidence(trace, cfg, st0, act, tid, calls, stretches, gil=gil)
    is_data = H.is_input(ev)
    if st.mode == "nvtx":  # the suite's ranges decide, but the batch's own copy prep is input
        is_data &= ev["suite_range"] | ev["h2d_after"]
    tl = replace(
        _assemble(calls, block, stretches[2], is_data, act, t0, edges, side), tid=calls["tid"]
    )
    if not (tl.item_op >= 0).any():  # no GPU item of the window was launched by these calls
        return None
    return _with_waits(trace, cfg, st0, tid if len(issuing) == 1 else None, tl, gil)


def _with_waits(
    trace: T.Trace,
    cfg: Mapping[str, Any],
    st: C.Steady,
    tid: int | None,
    tl: Timeline,
    gil: tuple[np.ndarray, np.ndarray],
) -> Timeline:
    """The timeline with each gap's GIL-wait time (``gil_contention.gil_waits``: the launching
    threads waiting for the GIL) and, in each host stretch, the time the main thread ``tid``
    slept until another thread woke it (``host.blocked_calls``, out of the one OS-runtime read
    of the input evidence: ``_host.osrt_ids``). Only where it is the one thread issuing the
    loop's work (``tid`` None otherwise): beside PyTorch's autograd thread the main thread
    sleeps through every backward, which that thread is busy running (torch.compile's
    backward, between its launches, is host work of its own). ``gil``: the GIL waits
    (``gil_contention.gil_waits``), read by the caller."""
    from analysis.detect import gil_contention as G

    a, b = tl.op_start - tl.gap, tl.op_start

    def within(starts, ends) -> np.ndarray:
        if len(starts) == 0:
            return np.zeros(tl.n_ops, np.int64)
        ws, we = C.union(np.asarray(starts, np.int64), np.asarray(ends, np.int64))
        return np.minimum(C.overlap_each(a, b, ws, we), tl.gap)

    cut = within(*gil)
    ids = C.name_ids(trace, list(cfg.get("host", {}).get("blocked_calls", ())))
    blocked = np.zeros(tl.n_ops, np.int64)
    if tid is not None and ids and trace.has(G.OSRT):
        rows = C.thread_osrt(trace, st, int(tid), H.osrt_ids(trace, cfg))
        keep = np.isin(rows["name"], ids)
        blocked = np.where(tl.gap_kind == HOST, within(rows["start"][keep], rows["end"][keep]), 0)
    return replace(tl, gil_cut=cut, blocked=blocked)


def _assemble(calls, block, nxt, is_data, act: C.Activity, t0: int, edges, side) -> Timeline:
    """Ops (calls) and items (GPU work) in the arrays the replay walks."""
    s, e = calls["start"], calls["end"]
    n = s.size
    run = np.maximum.accumulate(e)
    prev = np.concatenate([[t0], run[:-1]])
    gap = np.maximum(0, s - prev)
    own = np.maximum(0, e - np.maximum(s, prev))
    gap_kind = np.full(n, DISPATCH, np.int8)
    at = nxt >= 0
    gap_kind[nxt[at]] = np.where(is_data[at], DATA, HOST)
    # items -> the call that launched them (first call with the correlation id)
    keys, vals = C._first_values(calls["corr"], np.arange(n))
    found, op = C._lookup(keys, vals, act.corr)
    item_op = np.where(found & (act.corr >= 0), op, -1)
    stream = act.stream.astype(np.int64).copy()
    dom = (
        np.bincount(stream[act.kind != C.KIND_MEMSET]).argmax()
        if (act.kind != C.KIND_MEMSET).any()
        else 0
    )
    stream[act.kind == C.KIND_MEMSET] = dom  # memsets carry no stream: the loop's own
    order = np.lexsort((act.start, np.where(item_op >= 0, item_op, n)))
    item_op, stream = item_op[order], stream[order]
    i_start, i_end = act.start[order].astype(np.int64), act.end[order].astype(np.int64)
    kind, direction = act.kind[order], act.direction[order]
    h2d = (kind == C.KIND_MEMCPY) & (direction == C.HTOD)
    lat, queued = _latencies(i_start, i_end, stream, item_op, s)
    plausible = (lat >= 0) & ~queued & (lat < 50_000)
    med_lat = int(np.median(lat[plausible])) if plausible.any() else 5_000
    ptr = np.searchsorted(item_op[item_op >= 0], np.arange(n + 1), side="left")
    pageable_h2d = h2d & act.pageable[order]
    # a large pageable host-to-device copy holds the host until the driver has staged it
    # through its small pinned buffer, which drains only as the copy runs: the call returns
    # with its copy, so it blocks like a read. One that fits the buffer (a scalar, a small
    # table) is staged at once and the call returns before the copy runs.
    holds = np.zeros(n, bool)
    large = pageable_h2d & (act.nbytes[order] >= BATCH_BYTES) & (item_op >= 0)
    holds[item_op[large]] = True
    block = block | (holds & (calls["cat"] == C.MEMCPY_CALL))
    wait_item, post = _waits(block, s, e, i_start, i_end, item_op, ptr)
    wait_stream = _last_stream(n, item_op, stream)
    launches = (calls["cat"] == C.LAUNCH) & (own > 0)
    cap = int(max(20_000, 5 * np.median(own[launches]))) if launches.any() else 20_000
    delivery = _delivery(gap_kind, calls["cat"])
    return Timeline(
        t0=t0, op_start=s, op_end=e, gap=gap, own=own, block=block, cat=calls["cat"],
        gap_kind=gap_kind, wait_item=wait_item, wait_stream=wait_stream, post=post,
        item_op=item_op, item_start=i_start, item_end=i_end, item_stream=stream, item_kind=kind,
        item_lat=np.where(plausible, lat, -1), item_ptr=ptr,
        pageable_h2d=pageable_h2d, batch_h2d=h2d & (act.nbytes[order] >= BATCH_BYTES),
        nccl=act.nccl[order], med_lat=med_lat, edges=edges, edge_side=side, launch_cap=cap,
        delivery=delivery,
    )  # fmt: skip


def _delivery(gap_kind: np.ndarray, cat: np.ndarray) -> np.ndarray:
    """Calls from each input stretch's end up to the next kernel launch (not included)."""
    n = cat.size
    is_launch = cat == C.LAUNCH
    starts = np.flatnonzero(gap_kind == DATA)
    launches = np.append(np.flatnonzero(is_launch), n)  # n: no launch after it
    stop = launches[np.searchsorted(launches, starts)]
    marks = np.zeros(n + 1, np.int64)
    np.add.at(marks, starts, 1)
    np.add.at(marks, np.maximum(stop, starts), -1)
    return (np.cumsum(marks[:-1]) > 0) & ~is_launch


def _latencies(start, end, stream, item_op, op_start):
    """Per item: recorded start - its launch call's start (-1 without a call), and whether it
    waited behind the stream's previous item (queued: its latency says nothing)."""
    lat = np.where(item_op >= 0, start - op_start[np.maximum(item_op, 0)], -1)
    queued = np.zeros(start.size, bool)
    by = np.lexsort((start, stream))
    same = stream[by][1:] == stream[by][:-1]
    prev_end = np.empty(by.size, np.int64)  # running max of the ends, restarted per stream
    bounds = np.flatnonzero(np.concatenate([[True], ~same]))
    for a, b in zip(bounds, np.append(bounds[1:], by.size), strict=True):
        prev_end[a:b] = np.maximum.accumulate(end[by][a:b])
    q = np.zeros(by.size, bool)
    q[1:] = same & (prev_end[:-1] >= start[by][1:] - 10_000)
    queued[by] = q
    return lat, queued


def _waits(block, s, e, i_start, i_end, item_op, ptr):
    """Per blocking call: the item it waited for as recorded (its own copy's, else the latest
    item launched before it that ended during the call; -1 if none) and its wake-up time."""
    n = s.size
    wait_item = np.full(n, -1, np.int64)
    post = np.zeros(n, np.int64)
    launched = np.flatnonzero(item_op >= 0)
    by_end = launched[np.argsort(i_end[launched], kind="stable")]
    ends = i_end[by_end]
    for i in np.flatnonzero(block):
        own_items = np.arange(ptr[i], ptr[i + 1])
        if own_items.size:
            k = int(own_items[np.argmax(i_end[own_items])])
        else:
            j = int(np.searchsorted(ends, e[i], side="right")) - 1
            while j >= 0 and item_op[by_end[j]] >= i:  # launched later: not what it waited for
                j -= 1
            k = int(by_end[j]) if j >= 0 and ends[j] >= s[i] else -1
        wait_item[i] = k
        post[i] = e[i] - max(s[i], i_end[k]) if k >= 0 else 0
    return wait_item, np.maximum(post, 0)


def _last_stream(n: int, item_op: np.ndarray, stream: np.ndarray) -> np.ndarray:
    """Per call: the stream of the latest item launched by an earlier call (-1 before any)."""
    out = np.full(n, -1, np.int64)
    has = item_op >= 0
    out[item_op[has]] = stream[has]  # the last item of each call wins (items in call order)
    filled = np.maximum.accumulate(np.where(out >= 0, np.arange(n), -1))
    shifted = np.concatenate([[-1], filled[:-1]])
    return np.where(shifted >= 0, out[np.maximum(shifted, 0)], -1)


# --- the replay --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Replayed:
    """One replay, read on the GPU's clock: when each iteration's first remaining GPU item
    starts (both replays of a window share these items, so their phase)."""

    gpu_edges: np.ndarray
    measured: slice
    """The edges measured: the first iteration is the replay's warm-up (it starts with an
    empty queue, which the steady state never has) and, on host (NVTX) edges or where the
    window holds no item at its last edge, the last one ends at the window's close (the host's
    last call, the GPU's last item) rather than at a next iteration's first item."""
    item_start: np.ndarray | None = None
    item_end: np.ndarray | None = None
    """Each item's replayed start and end (ns; a removed item is empty at its launch)."""

    @property
    def total_ns(self) -> int:
        e = self.gpu_edges[self.measured]
        return int(e[-1] - e[0])

    @property
    def iterations(self) -> int:
        return int(self.gpu_edges[self.measured].size - 1)

    @property
    def per_iteration_ns(self) -> np.ndarray:
        return np.diff(self.gpu_edges[self.measured])


def _inputs(
    tl: Timeline,
    rm: Removal,
    overhead_ns: int,
    scale: float = 1.0,
    speed: float = 1.0,
    share: float = 0.0,
):
    """Gaps, call times, blocking flags and latencies after the removal, the host stretches
    scaled by ``scale``, the host's time divided by ``speed`` (the timed processes' host speed
    relative to the profiled one's) and then nsys's cost taken off each call: ``overhead_ns``
    (at the timed host's pace) plus ``share`` of the call's recorded dispatch gap and own time
    (at the pace it was recorded, scaled with the rest)."""
    gap = tl.gap.copy()
    if rm.gap_zero is not None:  # the host work goes; its waits for the GIL, a cause of their
        # own, stay
        keep = tl.gil_cut if tl.gil_cut.size == gap.size else np.zeros_like(gap)
        if rm.gap_keep is not None and rm.gap_keep.size == gap.size:
            keep = np.minimum(gap, keep + rm.gap_keep)
        gap[rm.gap_zero] = keep[rm.gap_zero]
    if rm.gap_cut is not None:
        gap = np.maximum(0, gap - rm.gap_cut)
    if scale != 1.0:  # the program's own pace in its stretches (see _forecast's calibration)
        stretch = tl.gap_kind != DISPATCH
        gap[stretch] = np.rint(gap[stretch] * scale).astype(np.int64)
    own = tl.own.copy()
    launch = tl.cat == C.LAUNCH
    own[launch] = np.minimum(own[launch], tl.launch_cap)  # a full launch queue, not host work
    if rm.own_zero is not None:
        own[rm.own_zero] = 0
    if speed != 1.0:  # the profiled host's pace -> the timed one's (not the blocked waits)
        gap = np.rint(gap / speed).astype(np.int64)
        own = np.where(tl.block, own, np.rint(own / speed).astype(np.int64))
    cost = np.full(gap.size, overhead_ns, np.int64)
    if share > 0:  # nsys's cost runs at the recorded host's pace: a share of each call's time
        mine = np.where(tl.gap_kind == DISPATCH, tl.gap, 0)
        mine = mine + np.where(tl.block, 0, np.minimum(tl.own, tl.launch_cap))
        cost += np.rint(share * mine / speed).astype(np.int64)
    if cost.any():  # nsys's cost per traced call: off the host time around each call
        rest = np.maximum(0, cost - gap)
        gap = np.maximum(0, gap - cost)
        own = np.where(tl.block, own, np.maximum(0, own - rest))
    block = tl.block & ~rm.unblock if rm.unblock is not None else tl.block
    lat = np.where(tl.item_lat >= 0, tl.item_lat, tl.med_lat)
    if rm.no_latency:
        lat = np.zeros_like(lat)
    gone = rm.item_gone if rm.item_gone is not None else np.zeros(tl.item_op.size, bool)
    return gap, own, block, lat, gone


def replay(
    tl: Timeline,
    rm: Removal | None = None,
    overhead_ns: int = 0,
    scale: float = 1.0,
    speed: float = 1.0,
    share: float = 0.0,
) -> Replayed:
    """Run the window again with ``rm`` applied (``overhead_ns``, ``share``: nsys's cost per
    call taken off; ``scale``: the host's stretches scaled; ``speed``: the host's time, and the
    pageable copies the host stages, divided by it), in segments between blocking calls: within a segment the host's times are a
    running sum and each stream's items a max-plus scan."""
    gap, own, block, lat, gone = _inputs(tl, rm or Removal(), overhead_ns, scale, speed, share)
    n = tl.n_ops
    op_start = np.zeros(n, np.int64)
    i_start, i_end = tl.item_start.copy(), tl.item_end.copy()  # unlaunched items keep theirs
    dur = tl.item_end - tl.item_start
    if speed != 1.0:  # a pageable copy is staged through pinned buffers by the host's CPU:
        # it runs at the host's pace, as the host's own time does
        dur = np.where(tl.pageable_h2d, np.rint(dur / speed).astype(np.int64), dur)
    free: dict[int, int] = {}
    t = tl.t0
    stops = np.append(np.flatnonzero(block), n - 1)
    a = 0
    for b in stops:
        if b < a:
            continue
        inc = gap[a : b + 1].copy()
        inc[1:] += own[a:b]
        op_start[a : b + 1] = t + np.cumsum(inc)
        _run_items(tl, a, b, op_start, lat, gone, dur, i_start, i_end, free)
        if block[b]:
            target = _target(tl, b, i_end, free)
            t = max(int(op_start[b]) + min(int(own[b]), 2_000), target)
            t += min(int(tl.post[b]), int(own[b]))
        else:
            t = int(op_start[b] + own[b])
        a = b + 1
    return _sim_edges(tl, gap, op_start, i_start, i_end, t, gone)


def _run_items(tl, a, b, op_start, lat, gone, dur, i_start, i_end, free) -> None:
    """Place the items launched by calls a..b: start = max(launch + latency, the stream's
    previous end), as a running max per stream (end_j = c_j + max(free, max_i<=j ready_i -
    c_(i-1)), c the cumulative durations)."""
    lo, hi = tl.item_ptr[a], tl.item_ptr[b + 1]
    if hi <= lo:
        return
    ks = np.arange(lo, hi)
    ready = op_start[tl.item_op[ks]] + lat[ks]
    g = gone[ks]
    i_start[ks[g]] = i_end[ks[g]] = ready[g]
    ks, ready = ks[~g], ready[~g]
    streams = tl.item_stream[ks]
    for sid in np.unique(streams):
        on = streams == sid
        k, r = ks[on], ready[on]
        c = np.cumsum(dur[k])
        base = np.maximum.accumulate(r - (c - dur[k]))
        end = c + np.maximum(base, free.get(int(sid), tl.t0))
        i_end[k] = end
        i_start[k] = end - dur[k]
        free[int(sid)] = int(end[-1])


def _target(tl: Timeline, b: int, i_end: np.ndarray, free: dict[int, int]) -> int:
    """When blocking call ``b`` returns in the replay: the replayed end of what it waited for,
    else of all work so far on the stream it last launched onto."""
    k = int(tl.wait_item[b])
    if k >= 0:
        return int(i_end[k])
    sid = int(tl.wait_stream[b])
    if sid >= 0 and sid in free:
        return free[sid]
    return max(free.values(), default=tl.t0)


def _next_live(live: np.ndarray) -> np.ndarray:
    """Per item: the index of the first item at or after it (in launch order) that is not
    removed, -1 where none is."""
    idx = np.where(live, np.arange(live.size), live.size)
    nxt = np.minimum.accumulate(idx[::-1])[::-1]
    return np.where(nxt < live.size, nxt, -1)


def _edge_items(tl: Timeline) -> np.ndarray:
    """Per iteration edge: the first item (launch order) of the iteration, -1 past the end.
    GPU edges are the starts of anchor items; host edges (NVTX steps) take the first item on
    the loop's stream (the one holding the most GPU time) launched by a call at or after the
    edge: a copy of the next batch on a side stream runs when launched, while the loop's stream
    may still be steps behind (a host ahead of its GPU), so it does not mark the step."""
    launched = np.flatnonzero(tl.item_op >= 0)
    if tl.edge_side == "gpu":
        order = launched[np.argsort(tl.item_start[launched], kind="stable")]
        pos = np.searchsorted(tl.item_start[order], tl.edges, side="left")
        return np.where(pos < order.size, order[np.minimum(pos, order.size - 1)], -1)
    streams, where = np.unique(tl.item_stream[launched], return_inverse=True)
    busy = np.bincount(where, weights=(tl.item_end - tl.item_start)[launched])
    cand = launched[tl.item_stream[launched] == streams[np.argmax(busy)]] if busy.size else launched
    op = np.searchsorted(tl.op_start, tl.edges, side="left")
    pos = np.searchsorted(tl.item_op[cand], op, side="left")  # items are in call order
    return np.where(pos < cand.size, cand[np.minimum(pos, max(cand.size - 1, 0))], -1)


def _sim_edges(tl, gap, op_start, i_start, i_end, host_end, gone) -> Replayed:
    """The iteration edges on the replay's GPU clock (see :class:`Replayed`)."""
    del gap, op_start
    live = ~gone
    nxt = _next_live(live)
    k = _edge_items(tl)
    k = np.where(k >= 0, nxt[np.maximum(k, 0)] if nxt.size else -1, -1)
    done = max(host_end, int(i_end.max()) if i_end.size else host_end)
    gpu = np.maximum.accumulate(np.where(k >= 0, i_start[np.maximum(k, 0)], done))
    n = gpu.size - 1
    first = 1 if n >= 3 else 0
    ends_open = tl.edge_side == "host" or k[-1] < 0  # the last edge has no item of its own
    last = n - 1 if ends_open and n - 1 - first >= 1 else n
    return Replayed(gpu, slice(first, last + 1), i_start, i_end)


# --- causes and predictions --------------------------------------------------------------------

#: Class -> the cause the replay removes for it (``ClassSpec.replay_cause``, bottlenecks/classes.py).
CAUSE_OF: dict[str, str] = {s.name: s.replay_cause for s in SPECS if s.replay_cause is not None}


def removal(tl: Timeline, cause: str, *, dispatch_percentile: float = 75.0) -> Removal:
    """What removing ``cause`` entirely edits (see the module docstring);
    ``dispatch_percentile``: the cap on the host's other gaps once its input work is gone."""
    if cause == "sync":  # the blocking reads are gone, calls and all
        return Removal(unblock=tl.block, own_zero=tl.block)
    if cause == "data":  # input work and the batch's delivery: data resident on the device
        if not (tl.gap_kind == DATA).any():  # no input work: a batch copy alone is no stall
            return Removal()
        on = tl.item_op >= 0
        delivered = np.zeros(tl.item_op.size, bool)
        delivered[on] = tl.delivery[tl.item_op[on]]
        gone = tl.batch_h2d | (delivered & _copies(tl))
        own_zero = _only(tl, gone, blocking=True) | tl.delivery
        return Removal(
            gap_zero=tl.gap_kind == DATA, item_gone=gone, own_zero=own_zero,
            unblock=own_zero & tl.block, gap_cut=_input_side_effects(tl, dispatch_percentile),
        )  # fmt: skip
    if cause == "host":
        return Removal(gap_zero=tl.gap_kind == HOST)
    if cause == "launch":  # a host that issues instantly: one graph replay per step
        # The syncs stay, and with each the host's way back from it to the next launch (the
        # Python after a ``.item()``, the replay's own launch).
        back = np.zeros(tl.n_ops, bool)
        back[1:] = tl.block[:-1]
        # Host work goes with it, not the host's sleep on another thread (nor its GIL waits).
        return Removal(
            gap_zero=(tl.gap_kind != DATA) & ~back,
            gap_keep=tl.blocked,
            own_zero=~tl.block & ~back,
            no_latency=True,
        )
    if cause == "pageable":  # the pageable copies gone (resident, or pinned and hidden)
        gone = tl.pageable_h2d
        calls = _only(tl, gone, blocking=True)
        return Removal(item_gone=gone, own_zero=calls, unblock=calls)
    if cause == "gil":  # the waits cut out; what a contended gap held besides them, capped
        return Removal(gap_cut=_gil_side_effects(tl, dispatch_percentile))
    raise ValueError(f"unknown cause {cause!r}; known: {sorted(set(CAUSE_OF.values()))}")


def _input_side_effects(tl: Timeline, percentile: float) -> np.ndarray:
    """Per call, the part of its gap a host freed from its input work would not spend: every
    gap that is not input work itself is capped at ``percentile`` of the window's dispatch
    gaps, where the window holds input work at all. A busy input pipeline slows the loop's own
    host beyond its stretches: the host batch released before the first launch, a thread that
    slept through the load woken late (its core had gone idle), caches and cores the loader
    took."""
    dispatch = tl.gap[tl.gap_kind == DISPATCH]
    if dispatch.size == 0 or not (tl.gap_kind == DATA).any():  # no input work: no side effects
        return np.zeros(tl.n_ops, np.int64)
    cap = int(np.percentile(dispatch, percentile))
    return np.where(tl.gap_kind != DATA, np.maximum(0, tl.gap - cap), 0)


def _gil_side_effects(tl: Timeline, percentile: float) -> np.ndarray:
    """Per call, the part of its gap that goes with the GIL contention: the waits, and of a gap
    that held any (not input work: a loop waiting on its loader's queue keeps that wait), what
    is left over ``percentile`` of the window's dispatch gaps. A thread
    that waits for the GIL between two calls would otherwise pass from one to the next at its
    dispatch pace: the rest of such a gap is the contention's own (the wake-ups every switch
    interval, the mutex around the GIL, a core shared with the holder)."""
    cut = tl.gil_cut.astype(np.int64)
    held = (cut > 0) & (tl.gap_kind != DATA)  # input work is the input's, waits or not
    dispatch = tl.gap[tl.gap_kind == DISPATCH]
    if not held.any() or dispatch.size == 0:
        return cut
    cap = int(np.percentile(dispatch, percentile))
    rest = tl.gap - cut
    return np.where(held, cut + np.maximum(0, rest - cap), cut)


def _copies(tl: Timeline) -> np.ndarray:
    """Items that are copies or memsets (not kernels or graph replays)."""
    return tl.item_kind != C.KIND_KERNEL


def _only(tl: Timeline, gone: np.ndarray, *, blocking: bool = False) -> np.ndarray:
    """Calls all of whose items are ``gone`` (and which launched at least one); blocking ones
    only with ``blocking`` (a pageable copy's call goes with its copy)."""
    has = tl.item_op >= 0
    n_items = np.bincount(tl.item_op[has], minlength=tl.n_ops)
    n_gone = np.bincount(tl.item_op[has & gone], minlength=tl.n_ops)
    out = (n_items > 0) & (n_gone == n_items)
    return out if blocking else out & ~tl.block
