"""The time model's inputs: the steady window's host calls and GPU items as the replay walks them.

The replay (``_replay``) re-runs the window on two clocks, and this is what it runs:

- the **host**: the threads that issue the loop's GPU work (the main thread and PyTorch's
  autograd thread), merged into one sequence of CUDA calls, each preceded by the host time
  since the previous call (a *gap*: dispatch when short, a stretch of input or other host work
  when it is at least ``host.stretch_ms`` long, as the trace view's host reading classifies
  it) and taking its own time. A blocking call (a sync, a device-to-host read) ends when the
  GPU work it waits for ends, plus the call's own wake-up time; a call that synchronises the
  device before its own work (a synchronous free, a launch that loads its kernel: ``drains``)
  does that work once all the work launched before it has ended;
- the **GPU**: every kernel, copy, memset and graph replay launched by those calls, in launch
  order per stream, starting at ``max(launch + latency, the stream's previous item's end)`` and
  lasting what it lasted. Items the replayed calls did not launch (another thread's, another
  process's) keep their recorded times.

The window replayed is the last steady iterations (furthest from the start-up), as many as
``predict.max_calls`` and ``predict.max_iterations`` allow.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from analysis import trace as T
from analysis.detect import view as V
from analysis.detect.config import PredictConfig

__all__ = ["BATCH_BYTES", "DATA", "DISPATCH", "HOST", "Timeline", "timeline"]

#: Gap kinds: how the host spent the time before a call (the host reading's stretches).
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
    """Activity kind of each item (``view.KIND_*``)."""
    item_lat: np.ndarray
    """Recorded launch latency where the stream was free (else -1: the median is used)."""
    item_turn: np.ndarray
    """Per item: the GPU's own time between the end of its stream's previous item and its
    start when it was already launched (queued: a dependent kernel or copy does not start the
    moment the one before ends), as recorded; the window's median for items not queued."""
    item_turn_seen: np.ndarray
    """Per item: its turnaround was recorded (it was queued), not the median."""
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
    item_rowid: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """Per item: its row in its activity's table (a kernel's name, for the GPU-side causes)."""
    item_d2h: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    """Per item: a device-to-host copy."""
    alloc_call: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    """Per call: it allocates or frees device memory (cudaMalloc, cudaFree, their async and
    driver forms: :data:`~analysis.detect.view.DEVICE_ALLOC`)."""
    drains: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    """Per call: it synchronises the device before it does its own work, so it cannot end
    before all work launched before it has: a synchronous free
    (:data:`~analysis.detect.view.DEVICE_SYNC_FREE`), a launch that loaded its kernel first
    (``_sync_launches``)."""
    io_call: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    """Per call: made inside a run of the loop thread's file writes, or ending just before
    one (``blocking_io.lead_ms``: the copy a save makes before it writes), or inside the
    loop's part of a save another thread writes (its staging copies: ``offloaded_saves``)."""
    io_gap: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    """Per call: its gap is part of a run of file writes (or a host stretch just before one),
    or of the loop's part of a save another thread writes (its wait for that writer)."""
    item_dep: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """Per item: the item on another stream it waited for as recorded (an event a stream
    waits on: cuDNN's FFT convolutions on its own streams, a side stream's copy), -1 for none
    (:func:`_cross_stream_waits`); empty where none was found."""
    item_dep_gap: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """... and its recorded start after that item's end (the GPU's wake-up)."""
    item_lane: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """Per item: the queue the replay runs it in, its stream, or the loop's stream for a stream
    whose kernels hardly ran beside another stream's as recorded (:func:`_lanes`); empty: its
    stream."""

    @cached_property
    def stream_lane(self) -> dict[int, int]:
        """Each stream's queue (``item_lane`` of its first item) by stream id, made once for
        every replay's blocking calls."""
        if not self.item_lane.size:
            return {}
        ids, first = np.unique(self.item_stream, return_index=True)
        return {int(i): int(self.item_lane[f]) for i, f in zip(ids, first, strict=True)}

    @property
    def lanes(self) -> np.ndarray:
        """Per item: the queue the replay runs it in (``item_lane``, else its stream)."""
        return self.item_lane if self.item_lane.size == self.item_op.size else self.item_stream

    @property
    def n_ops(self) -> int:
        return int(self.op_start.size)

    @property
    def n_iterations(self) -> int:
        return int(self.edges.size - 1)


def _edges(trace: T.Trace, st: V.Steady) -> tuple[np.ndarray, str]:
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


def timeline(view: V.TraceView) -> Timeline | None:
    """The replay's inputs for the steady window (cached per trace and settings), or None when
    the report has no GPU activity, no CUDA calls or no launching thread."""
    cfg = view.config
    key = ("timeline", repr(cfg.host), repr(cfg.predict), repr(cfg.window))
    key += (repr(cfg.gil_contention), cfg.data_stall.range_name)
    cache = V.trace_cache(view.trace)
    if key not in cache:
        cache[key] = _timeline(view)
    return cache[key]


@dataclass(frozen=True)
class _Sample:
    """The iterations the replay takes: the window from the earliest launch of their items
    (``st``), their edges, the GPU items and the calls of the threads issuing them."""

    st: V.Steady
    edges: np.ndarray
    side: str
    act: V.Activity
    calls: dict[str, np.ndarray]
    tid: int
    issuing: np.ndarray


def _sample(view: V.TraceView) -> _Sample | None:
    """The last steady iterations (furthest from the start-up), as many as the calls and
    iterations allowed in a replay (``predict.max_calls``, ``max_iterations``) hold."""
    trace, pc = view.trace, view.config.predict
    st, act = view.steady(), view.activity()
    found = V.issuing_threads(trace, st, act, view.config.host.min_launch_share)
    if found is None or len(act) == 0:
        return None
    tid, issuing = found
    edges, side = _edges(trace, st)
    if edges.size < 2:
        return None
    every = view.calls()
    mine = V.member(every["tid"], issuing)
    per_it = np.count_nonzero(mine & (every["start"] >= st.lo)) / max(1, edges.size - 1)
    n_it = _sample_size(edges, per_it, pc.max_calls, pc.min_iterations)
    cap = pc.max_iterations if st.mode == "nvtx" else pc.max_found_iterations
    n_it = min(n_it, max(cap, pc.min_iterations))
    edges = edges[edges.size - 1 - n_it :]  # the last ones: furthest from the start-up
    lo, hi = int(edges[0]), int(edges[-1])
    inside = (act.end > lo) & (act.start <= hi)  # the item at hi starts the next iteration
    # the replay starts at the earliest launch of an item in the (sampled) window
    first, call_of = V.first_values(every["corr"][mine], np.flatnonzero(mine))
    has_call, idx = V.lookup(first, call_of, act.corr)
    on = inside & has_call
    t0 = int(min(lo, every["start"][idx[on]].min())) if on.any() else lo
    if side == "host":  # a host ahead of its GPU: the work its last steps launched runs later
        inside |= (act.end > lo) & has_call & (every["start"][idx] < hi)
    calls = V.rows_where(every, mine & (every["end"] > t0) & (every["start"] < hi))
    if calls["start"].size == 0:
        return None
    st0 = V.Steady(t0, hi, st.mode, st.n_steps, st.step_ns, st.step_tid, st.note, st.min_call_ns)
    return _Sample(st0, edges, side, act.take(inside), calls, int(tid), issuing)


def _timeline(view: V.TraceView) -> Timeline | None:
    trace = view.trace
    if not trace.has(V.RUNTIME) or not view.has_gpu:
        return None
    sm = _sample(view)
    if sm is None:
        return None
    act, calls = sm.act, sm.calls
    # what waits for the loop's own work (an event sync on DALI's stream does not)
    block = V.blocking_calls(trace, act, calls, V.loop_streams(act, calls["corr"]))
    stretches = V.host_stretches(calls, sm.st, int(view.config.host.stretch_ms * 1e6))
    gil = V.union(*view.gil_waits())  # read once: the input evidence and the gaps
    ev = V.input_evidence(trace, view.config, sm.st, act, sm.tid, calls, stretches, gil=gil)
    is_data = V.is_input(ev)
    if sm.st.mode == "nvtx":  # the suite's ranges decide, but the batch's own copy prep is input
        is_data &= ev["suite_range"] | ev["h2d_after"]
    tl = _assemble(
        calls, block, stretches[2], is_data, act, sm.st.lo, sm.edges, sm.side, view.config.predict
    )
    tl = replace(tl, tid=calls["tid"])
    if not (tl.item_op >= 0).any():  # no GPU item of the window was launched by these calls
        return None
    tl = _with_waits(view, sm.st, sm.tid if len(sm.issuing) == 1 else None, tl, gil)
    return _with_host_side(view, sm, calls, tl)


def _with_host_side(view: V.TraceView, sm: _Sample, calls, tl: Timeline) -> Timeline:
    """The timeline with the host-side causes' marks: the device-memory calls
    (:data:`~analysis.detect.view.DEVICE_ALLOC`) and the loop thread's runs of file writes
    (:func:`analysis.detect.view.write_runs`) with the calls and gaps inside them."""
    alloc = np.zeros(tl.n_ops, bool)
    if calls["name"].size:
        alloc = V.base_name_in(view.trace, calls["name"], V.DEVICE_ALLOC)
    ws, we = V.write_runs(view.trace, view.config, sm.st, sm.tid)
    lead = int(view.config.blocking_io.lead_ms * 1e6)
    os_, oe = V.offloaded_saves(
        view.trace, view.config, view.steady(), sm.tid, view.activity(), view.calls()
    )
    a, b = tl.op_start - tl.gap, tl.op_start
    runs = V.union(np.concatenate([ws, os_]), np.concatenate([we, oe]))
    in_run = V.overlap_each(a, b, *runs) > 0 if runs[0].size else np.zeros(tl.n_ops, bool)
    before = (
        V.overlap_each(a, b, *V.union(ws - lead, ws)) > 0 if ws.size else np.zeros(tl.n_ops, bool)
    )
    gap = in_run | (before & (tl.gap_kind != DISPATCH))
    io = np.zeros(tl.n_ops, bool)
    if runs[0].size:  # a call in a run, or ending within the lead before one (the copy it
        # writes); a call in the loop's part of a save another thread writes (its staging)
        ls, le = V.union(np.concatenate([ws - lead, os_]), np.concatenate([we, oe]))
        io = (
            V.overlap_each(calls["start"], np.maximum(calls["end"], calls["start"] + 1), ls, le) > 0
        )
    frees = np.zeros(tl.n_ops, bool)
    if calls["name"].size:
        frees = V.base_name_in(view.trace, calls["name"], V.DEVICE_SYNC_FREE)
    return replace(tl, alloc_call=alloc, drains=tl.drains | frees, io_call=io, io_gap=gap)


def _with_waits(
    view: V.TraceView,
    st: V.Steady,
    tid: int | None,
    tl: Timeline,
    gil: tuple[np.ndarray, np.ndarray],
) -> Timeline:
    """The timeline with each gap's GIL-wait time (the launching threads waiting for the GIL,
    ``gil``: :meth:`TraceView.gil_waits`, read by the caller) and, in each host stretch, the
    time the main thread ``tid`` slept until another thread woke it (``host.blocked_calls``,
    out of the one OS-runtime read of the input evidence: :func:`~analysis.detect.view.osrt_ids`).
    Only where it is the one thread issuing the loop's work (``tid`` None otherwise): beside
    PyTorch's autograd thread the main thread sleeps through every backward, which that thread
    is busy running (torch.compile's backward, between its launches, is host work of its own)."""
    trace, host = view.trace, view.config.host
    a, b = tl.op_start - tl.gap, tl.op_start

    def within(starts, ends) -> np.ndarray:
        if len(starts) == 0:
            return np.zeros(tl.n_ops, np.int64)
        ws, we = V.union(np.asarray(starts, np.int64), np.asarray(ends, np.int64))
        return np.minimum(V.overlap_each(a, b, ws, we), tl.gap)

    cut = within(*gil)
    ids = V.name_ids(trace, list(host.blocked_calls))
    blocked = np.zeros(tl.n_ops, np.int64)
    if tid is not None and ids and trace.has(V.OSRT):
        rows = V.thread_osrt(trace, st, int(tid), V.osrt_ids(trace, host))
        keep = np.isin(rows["name"], ids)
        blocked = np.where(tl.gap_kind == HOST, within(rows["start"][keep], rows["end"][keep]), 0)
    return replace(tl, gil_cut=cut, blocked=blocked)


def _assemble(
    calls, block, nxt, is_data, act: V.Activity, t0: int, edges, side, pc: PredictConfig
) -> Timeline:
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
    keys, vals = V.first_values(calls["corr"], np.arange(n))
    found, op = V.lookup(keys, vals, act.corr)
    item_op = np.where(found & (act.corr >= 0), op, -1)
    stream = act.stream.astype(np.int64).copy()
    dom = (
        np.bincount(stream[act.kind != V.KIND_MEMSET]).argmax()
        if (act.kind != V.KIND_MEMSET).any()
        else 0
    )
    stream[act.kind == V.KIND_MEMSET] = dom  # memsets carry no stream: the loop's own
    order = np.lexsort((act.start, np.where(item_op >= 0, item_op, n)))
    item_op, stream = item_op[order], stream[order]
    i_start, i_end = act.start[order].astype(np.int64), act.end[order].astype(np.int64)
    kind, direction = act.kind[order], act.direction[order]
    h2d = (kind == V.KIND_MEMCPY) & (direction == V.HTOD)
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
    block = block | (holds & (calls["cat"] == V.MEMCPY_CALL))
    wait_item, post = _waits(block, s, e, i_start, i_end, item_op, ptr)
    wait_stream = _last_stream(n, item_op, stream)
    launches = (calls["cat"] == V.LAUNCH) & (own > 0)
    cap = int(max(20_000, 5 * np.median(own[launches]))) if launches.any() else 20_000
    held, wake = int(pc.held_us * 1e3), int(pc.wake_us * 1e3)
    dep, dep_gap = _cross_stream_waits(i_start, i_end, stream, item_op, s, med_lat, held, wake)
    delivery = _delivery(gap_kind, calls["cat"])
    drains = _sync_launches(calls["cat"], s, own, e, i_start, i_end, ptr, cap)
    lane = _lanes(i_start, i_end, stream, kind, item_op, pc.concurrent_share)
    turn, seen = _turnarounds(i_start, i_end, lane, item_op, s, med_lat)  # the replay's queues
    turn[lane != stream] = 0  # a side stream's item run in another's queue: it overlapped
    if dep.size == turn.size:  # waited for another stream's item: that wait is placed apart
        turn[dep >= 0] = 0
    return Timeline(
        t0=t0, op_start=s, op_end=e, gap=gap, own=own, block=block, cat=calls["cat"],
        gap_kind=gap_kind, wait_item=wait_item, wait_stream=wait_stream, post=post,
        item_op=item_op, item_start=i_start, item_end=i_end, item_stream=stream, item_kind=kind,
        item_lat=np.where(plausible, lat, -1), item_turn=turn, item_turn_seen=seen, item_ptr=ptr,
        pageable_h2d=pageable_h2d, batch_h2d=h2d & (act.nbytes[order] >= BATCH_BYTES),
        nccl=act.nccl[order], med_lat=med_lat, edges=edges, edge_side=side, launch_cap=cap,
        delivery=delivery, item_rowid=act.rowid[order].astype(np.int64),
        item_d2h=(kind == V.KIND_MEMCPY) & (direction == V.DTOH), drains=drains,
        item_dep=dep, item_dep_gap=dep_gap, item_lane=lane,
    )  # fmt: skip


def _sync_launches(cat, start, own, end, i_start, i_end, ptr, cap: int) -> np.ndarray:
    """Per call: a launch that synchronised the device (a kernel loaded on its first use, CUDA's
    lazy loading, waits for the context to go idle): it took longer than ``cap``, the work
    launched before it was still running when it began and had all ended when it returned,
    and its own kernel started as it returned. A launch held by a full queue returns when a
    slot frees, its kernel a queue's length later; a slow launch onto an idle device waited
    for nothing."""
    n = cat.size
    has = ptr[1:] > ptr[:-1]
    last = max(i_start.size - 1, 0)
    first = np.where(has, i_start[np.minimum(ptr[:-1], last)], -1)
    own_end = np.full(n, np.iinfo(np.int64).min, np.int64)  # latest end of each call's items
    if i_end.size:
        own_end[has] = np.maximum.reduceat(i_end, np.minimum(ptr[:-1], last))[has]
    before = np.concatenate([[np.iinfo(np.int64).min], np.maximum.accumulate(own_end)[:-1]])
    waited = (before > start) & (before <= end)
    near = has & (np.abs(first - end) <= cap)
    return (cat == V.LAUNCH) & (own > cap) & near & waited


def _lanes(start, end, stream, kind, item_op, share: float) -> np.ndarray:
    """Per item: the queue the replay runs it in. Kernels of two streams share one GPU: a GEMM
    that fills every SM leaves another stream's kernel waiting for SMs, not for its own
    stream. Where a stream's kernels ran beside the loop's stream's (the one holding the most
    kernel time) for at most ``share`` (``predict.concurrent_share``) of their time, as recorded (cuDNN's FFT
    convolutions on two streams of its own, side by side, between the loop stream's kernels:
    serialised by events and by the SMs they fill), its items run in the loop stream's queue,
    in launch order; streams whose kernels did run beside the loop's (a communication kernel
    beside the compute) and copies keep their own."""
    lane = stream.copy()
    k = (kind == V.KIND_KERNEL) & (item_op >= 0)
    ids = np.unique(stream[k])
    if ids.size < 2:
        return lane
    busy = {int(i): V.union(start[k & (stream == i)], end[k & (stream == i)]) for i in ids}
    main = max(busy, key=lambda i: int((busy[i][1] - busy[i][0]).sum()))
    for i in ids:
        if int(i) == main:
            continue
        mine = busy[int(i)]
        total = float((mine[1] - mine[0]).sum())
        beside = float(V.overlap_each(mine[0], mine[1], *busy[main]).sum())
        if total > 0 and beside <= share * total:
            lane[stream == i] = main
    return lane


def _cross_stream_waits(start, end, stream, item_op, op_start, med_lat: int, held_ns: int,
                        wake_ns: int):  # fmt: skip
    """Per item (in launch order): the item on another stream, launched before it, whose end
    it waited for as recorded (-1: none), and its start after that end. A stream that waits on
    an event (``cudaStreamWaitEvent``: cuDNN's FFT convolutions fan out to streams of its own
    and back, a side stream's copy the loop's stream waits for) starts its next item only when
    the work recorded before the event ends; the replay keeps that order, which a scan per
    stream alone would lose (two streams' serial work replayed side by side). Read from the
    GPU's recorded times: an item held ``held_ns`` past its launch and its own stream's
    previous end that starts within ``wake_ns`` of another stream's item's end
    (``predict.held_us``, ``wake_us``)."""
    n = start.size
    dep = np.full(n, -1, np.int64)
    gap = np.zeros(n, np.int64)
    mine = item_op >= 0
    if n == 0 or np.unique(stream[mine]).size < 2:
        return dep, gap
    prev_end = np.full(n, np.iinfo(np.int64).min, np.int64)  # the stream's previous item's end
    for sid in np.unique(stream):
        on = np.flatnonzero(stream == sid)  # launch order
        run = np.maximum.accumulate(end[on])
        prev_end[on[1:]] = run[:-1]
    ready = np.where(mine, op_start[np.maximum(item_op, 0)] + med_lat, start)
    held = np.flatnonzero(mine & (start - np.maximum(prev_end, ready) > held_ns))
    if held.size == 0:
        return dep, gap
    by_end = np.argsort(end, kind="stable")
    ends = end[by_end]
    for i in held:
        j = int(np.searchsorted(ends, start[i], side="right")) - 1
        while j >= 0 and start[i] - ends[j] <= wake_ns:
            k = int(by_end[j])
            if stream[k] != stream[i] and k < i:  # another stream's, launched before it
                dep[i], gap[i] = k, start[i] - end[k]
                break
            j -= 1
    return dep, gap


def _delivery(gap_kind: np.ndarray, cat: np.ndarray) -> np.ndarray:
    """Calls from each input stretch's end up to the next kernel launch (not included)."""
    n = cat.size
    is_launch = cat == V.LAUNCH
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


#: The longest gap after a queued item's predecessor read as the GPU's own turnaround (a
#: longer one waited for something else: an event, another stream).
MAX_TURN_NS = 20_000


def _turnarounds(start, end, stream, item_op, op_start, med_lat: int):
    """Per item: start - the end of its stream's previous item, where it was launched (plus
    the median latency) before that end: the GPU's own time between two queued operations,
    up to ``MAX_TURN_NS``; the median of those for the other launched items, 0 for items
    launched elsewhere. Also whether each was recorded (queued) rather than the median."""
    by = np.lexsort((start, stream))
    same = np.zeros(by.size, bool)
    same[1:] = stream[by][1:] == stream[by][:-1]
    prev_end = np.full(by.size, np.iinfo(np.int64).min, np.int64)
    bounds = np.flatnonzero(~same)
    for a, b in zip(bounds, np.append(bounds[1:], by.size), strict=True):
        if b - a > 1:
            prev_end[a + 1 : b] = np.maximum.accumulate(end[by][a : b - 1])
    op = item_op[by]
    ready = np.where(op >= 0, op_start[np.maximum(op, 0)] + med_lat, np.iinfo(np.int64).max)
    gap = start[by] - prev_end
    known = same & (op >= 0) & (ready < prev_end) & (gap >= 0) & (gap <= MAX_TURN_NS)
    med = int(np.median(gap[known])) if known.any() else 0
    out = np.zeros(start.size, np.int64)
    out[by] = np.where(known, gap, np.where(op >= 0, med, 0))
    seen = np.zeros(start.size, bool)
    seen[by] = known
    return out, seen


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
