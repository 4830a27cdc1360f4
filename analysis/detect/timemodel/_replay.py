"""The replay: the steady window run again on its host's and its GPU's clocks, with one cause
removed.

Every finding predicts its speedup: "this cause removed entirely, everything else unchanged".
That number comes from replaying the window (:class:`~._timeline.Timeline`), not from a share
of it. Replayed unchanged, the model reproduces the recorded window (``model_fit``, replayed /
recorded, is reported). A cause is removed by editing the inputs, never the outputs: syncs stop
blocking (and their calls go); input stretches and the batch's host-to-device copies go; other
host work goes; dispatch goes (gaps, call times and launch latency: every kernel queued at once,
as one graph replay would); pageable copies go; GIL waits are cut out of the gaps (see
:func:`removal`). The GPU and the host then find their own new overlap, which is what a share of
the window cannot say: a sync that exposes host work costs more than its own blocked time, and
the host's or the GPU's floor stops a share near 1 from becoming a runaway speedup.

nsys itself slows every traced CUDA call (CUPTI's callbacks and records): the recorded host is
slower than the program's own. A cost per traced call is taken off every call's host time in
both replays, so the prediction is for the program as it runs untraced: ``predict.trace_overhead_us``,
or, where the program's untraced step was measured (``step_ms``), the cost (or the pace of the
host's stretches) that makes the replay take that step (``_forecast``, which also turns two
replays into the prediction).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis.detect import view as V
from analysis.detect.timemodel._timeline import DATA, DISPATCH, HOST, Timeline
from bottlenecks import SPECS

__all__ = ["CAUSE_OF", "Removal", "Replayed", "edge_items", "removal", "replay", "replay_inputs"]


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
    graph_turn_share: float = 0.0
    """With ``no_latency`` (one graph replay a step): the share of the GPU's turnaround
    between two stream-queued items that is left between two of the graph's kernels, for the
    items whose turnaround was not recorded (``predict.graph_turn_share``)."""
    item_scale: np.ndarray | None = None
    """Per item: its duration multiplied by this (the same work at another rate: the GPU-side
    causes, ``_gpu_causes``); None: every item as long as it lasted."""

    def durations(self, tl: Timeline) -> np.ndarray:
        """Each item's duration (ns) after the removal's rescaling."""
        dur = tl.item_end - tl.item_start
        if self.item_scale is None or self.item_scale.size != dur.size:
            return dur
        return np.rint(dur * self.item_scale).astype(np.int64)


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


def replay_inputs(
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
    launch = tl.cat == V.LAUNCH
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
    turn = tl.item_turn if tl.item_turn.size == lat.size else np.zeros_like(lat)
    if rm.no_latency:  # one graph launch: no latency; the turnarounds seen are kept, and the
        # others (a launch-bound loop queues little) shrink to a graph's kernel-to-kernel share
        lat = np.zeros_like(lat)
        turn = (
            np.where(tl.item_turn_seen, turn, np.rint(rm.graph_turn_share * turn).astype(np.int64))
            if tl.item_turn_seen.size == turn.size
            else 0 * turn
        )
    gone = rm.item_gone if rm.item_gone is not None else np.zeros(tl.item_op.size, bool)
    return gap, own, block, (lat, turn), gone


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
    gap, own, block, lat, gone = replay_inputs(
        tl, rm or Removal(), overhead_ns, scale, speed, share
    )  # lat: (launch latency, the GPU's turnaround behind a queued item), per item
    n = tl.n_ops
    op_start = np.zeros(n, np.int64)
    i_start, i_end = tl.item_start.copy(), tl.item_end.copy()  # unlaunched items keep theirs
    dur = (rm or Removal()).durations(tl)
    if speed != 1.0:  # a pageable copy is staged through pinned buffers by the host's CPU:
        # it runs at the host's pace, as the host's own time does
        dur = np.where(tl.pageable_h2d, np.rint(dur / speed).astype(np.int64), dur)
    free: dict[int, int] = {}
    t = tl.t0
    drains = _drains(tl, rm or Removal())
    stops = np.append(np.flatnonzero(block | drains), n - 1)
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
        elif drains[b]:  # the device's queued work first, then the free's own time
            t = max(int(op_start[b]), max(free.values(), default=tl.t0)) + int(own[b])
        else:
            t = int(op_start[b] + own[b])
        a = b + 1
    return _sim_edges(tl, gap, op_start, i_start, i_end, t, gone)


def _drains(tl: Timeline, rm: Removal) -> np.ndarray:
    """Per call: a free that waits for the device's queued work (``Timeline.drains``), unless
    the removal takes it out (``unblock``: a warm cache makes no such call)."""
    if tl.drains.size != tl.n_ops:
        return np.zeros(tl.n_ops, bool)
    if rm.unblock is None or rm.unblock.size != tl.n_ops:
        return tl.drains
    return tl.drains & ~rm.unblock


def _run_items(tl, a, b, op_start, lat, gone, dur, i_start, i_end, free) -> None:
    """Place the items launched by calls a..b: start = max(launch + latency, the stream's
    previous end, the replayed end of the item on another stream it waited for, plus its
    wake-up: ``Timeline.item_dep``), as a running max per stream (end_j = c_j + max(free,
    max_i<=j ready_i - c_(i-1)), c the cumulative durations), in runs that each start at an
    item waiting for one placed in an earlier run."""
    lo, hi = int(tl.item_ptr[a]), int(tl.item_ptr[b + 1])
    if hi <= lo:
        return
    if tl.item_dep.size != tl.item_op.size:
        _place(tl, lo, hi, op_start, lat, gone, dur, i_start, i_end, free)
        return
    dep = tl.item_dep[lo:hi]
    cuts = lo + np.flatnonzero(dep >= lo)  # waits for an item of this run: a new run
    for p, q in zip(np.concatenate([[lo], cuts]), np.concatenate([cuts, [hi]]), strict=True):
        if q > p:
            _place(tl, int(p), int(q), op_start, lat, gone, dur, i_start, i_end, free)


def _place(tl, lo, hi, op_start, lat, gone, dur, i_start, i_end, free) -> None:
    """:func:`_run_items` for the items lo..hi, whose waits on other streams are placed
    (``lat``: each item's launch latency and its turnaround, :func:`replay_inputs`)."""
    lat, turn = lat
    ks = np.arange(lo, hi)
    ready = op_start[tl.item_op[ks]] + lat[ks]
    if tl.item_dep.size == tl.item_op.size:
        d = tl.item_dep[ks]
        w = d >= 0
        if w.any():
            ready[w] = np.maximum(ready[w], i_end[d[w]] + tl.item_dep_gap[ks[w]])
    g = gone[ks]
    i_start[ks[g]] = i_end[ks[g]] = ready[g]
    ks, ready = ks[~g], ready[~g]
    streams = tl.lanes[ks]
    for sid in np.unique(streams):
        on = streams == sid
        k, r = ks[on], ready[on]
        # end_j = max(ready_j, end_(j-1) + turn_j) + dur_j: the turnaround as part of the
        # item's length, its ready time moved back by the same
        c = np.cumsum(dur[k] + turn[k])
        base = np.maximum.accumulate(r - c + dur[k])
        end = c + np.maximum(base, free.get(int(sid), tl.t0))
        i_end[k] = end
        i_start[k] = end - dur[k]
        free[int(sid)] = int(end[-1])


def _target(tl: Timeline, b: int, i_end: np.ndarray, free: dict[int, int]) -> int:
    """When blocking call ``b`` returns in the replay: the replayed end of what it waited for,
    else of all work so far in the queue of the stream it last launched onto."""
    k = int(tl.wait_item[b])
    if k >= 0:
        return int(i_end[k])
    sid = int(tl.wait_stream[b])
    if sid >= 0 and tl.item_lane.size:  # the stream's queue (``Timeline.lanes``)
        sid = tl.stream_lane.get(sid, sid)
    if sid >= 0 and sid in free:
        return free[sid]
    return max(free.values(), default=tl.t0)


def _next_live(live: np.ndarray) -> np.ndarray:
    """Per item: the index of the first item at or after it (in launch order) that is not
    removed, -1 where none is."""
    idx = np.where(live, np.arange(live.size), live.size)
    nxt = np.minimum.accumulate(idx[::-1])[::-1]
    return np.where(nxt < live.size, nxt, -1)


def edge_items(tl: Timeline) -> np.ndarray:
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
    k = edge_items(tl)
    k = np.where(k >= 0, nxt[np.maximum(k, 0)] if nxt.size else -1, -1)
    done = max(host_end, int(i_end.max()) if i_end.size else host_end)
    gpu = np.maximum.accumulate(np.where(k >= 0, i_start[np.maximum(k, 0)], done))
    n = gpu.size - 1
    first = 1 if n >= 3 else 0
    ends_open = tl.edge_side == "host" or k[-1] < 0  # the last edge has no item of its own
    last = n - 1 if ends_open and n - 1 - first >= 1 else n
    return Replayed(gpu, slice(first, last + 1), i_start, i_end)


#: Class -> the cause the replay removes for it (``ClassSpec.replay_cause``, bottlenecks/classes.py).
CAUSE_OF: dict[str, str] = {s.name: s.replay_cause for s in SPECS if s.replay_cause is not None}


def removal(
    tl: Timeline, cause: str, *, dispatch_percentile: float = 75.0, graph_turn_share: float = 0.0
) -> Removal:
    """What removing ``cause`` entirely edits (see the module docstring);
    ``dispatch_percentile``: the cap on the host's other gaps once its input work is gone;
    ``graph_turn_share``: :attr:`Removal.graph_turn_share` of the launch removal."""
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
        # The allocator's driver calls stay too (a cause of their own: a graph replay does not
        # give back the memory an ``empty_cache`` frees), with the host's way in and out.
        alloc, beside = _alloc_marks(tl)
        back |= alloc | beside
        # Host work goes with it, not the host's sleep on another thread (nor its GIL waits).
        return Removal(
            gap_zero=(tl.gap_kind != DATA) & ~back,
            gap_keep=tl.blocked,
            own_zero=~tl.block & ~back,
            no_latency=True,
            graph_turn_share=graph_turn_share,
        )
    if cause == "pageable":  # the pageable copies gone (resident, or pinned and hidden)
        gone = tl.pageable_h2d
        calls = _only(tl, gone, blocking=True)
        return Removal(item_gone=gone, own_zero=calls, unblock=calls)
    if cause == "gil":  # the waits cut out; what a contended gap held besides them, capped
        return Removal(gap_cut=_gil_side_effects(tl, dispatch_percentile))
    host_side = _host_side_removal(tl, cause)
    if host_side is not None:
        return host_side
    raise ValueError(f"unknown cause {cause!r}; known: {sorted(set(CAUSE_OF.values()))}")


def _host_side_removal(tl: Timeline, cause: str) -> Removal | None:
    """The host-side causes (None for any other): ``alloc``, the device-memory calls'
    own time gone and none of them blocking (a warm caching allocator serves every request);
    ``io``, the loop thread's write runs gone with the host stretches in them and the
    device-to-host copies made for them (calls and all), and of a save another thread writes
    the loop's staging copies and its waits for that writer: nothing saved on the loop thread.
    A save every N steps costs the iterations that hold it: the replay's mean over the
    sampled iterations spreads it over the period."""
    if cause == "alloc":
        calls, beside = _alloc_marks(tl)
        return Removal(gap_zero=beside, own_zero=calls, unblock=calls)
    if cause == "io":
        if tl.io_gap.size != tl.n_ops or not tl.io_gap.any():
            return Removal()
        on = tl.item_op >= 0
        gone = np.zeros(tl.item_op.size, bool)
        gone[on] = tl.item_d2h[on] & tl.io_call[tl.item_op[on]]
        calls = _only(tl, gone, blocking=True)
        return Removal(gap_zero=tl.io_gap, item_gone=gone, own_zero=calls, unblock=calls)
    return None


def _alloc_marks(tl: Timeline) -> tuple[np.ndarray, np.ndarray]:
    """Per call: the allocator's host time (its device-memory calls, and the calls of no GPU
    work between the same two launches: the capture checks, the events it records), and the
    gaps of its round trips (between those launches, and the next launch's way back). A run
    of cudaFree after the sync the first one makes, then a cudaMalloc before each op, open a
    gap on the GPU at every allocation that a warm cache never opens."""
    n = tl.n_ops
    if tl.alloc_call.size != n or not tl.alloc_call.any():
        none = np.zeros(n, bool)
        return none, none
    on = tl.item_op >= 0
    issues = np.bincount(tl.item_op[on], minlength=n)[:n] > 0
    seg = np.cumsum(issues)  # a launch opens a segment; the calls up to the next share it
    touched = np.bincount(seg[tl.alloc_call], minlength=int(seg[-1]) + 2) > 0
    inside = touched[seg] & ~issues
    back = issues & touched[np.maximum(seg - 1, 0)] & (seg > 0)
    own = tl.alloc_call | (inside & ~tl.block)
    return own, (inside | back) & (tl.gap_kind != DATA)


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
    interval, the mutex around the GIL, a core shared with the holder); not of a gap in a save
    (``io``'s)."""
    cut = tl.gil_cut.astype(np.int64)
    held = (cut > 0) & (tl.gap_kind != DATA)  # input work is the input's, waits or not
    if tl.io_gap.size == cut.size:  # and a save's stretch the save's (its writer's hold and
        # the loop's wait for it go with the save: cause ``io``)
        held &= ~tl.io_gap
    dispatch = tl.gap[tl.gap_kind == DISPATCH]
    if not held.any() or dispatch.size == 0:
        return cut
    cap = int(np.percentile(dispatch, percentile))
    rest = tl.gap - cut
    return np.where(held, cut + np.maximum(0, rest - cap), cut)


def _copies(tl: Timeline) -> np.ndarray:
    """Items that are copies or memsets (not kernels or graph replays)."""
    return tl.item_kind != V.KIND_KERNEL


def _only(tl: Timeline, gone: np.ndarray, *, blocking: bool = False) -> np.ndarray:
    """Calls all of whose items are ``gone`` (and which launched at least one); blocking ones
    only with ``blocking`` (a pageable copy's call goes with its copy)."""
    has = tl.item_op >= 0
    n_items = np.bincount(tl.item_op[has], minlength=tl.n_ops)
    n_gone = np.bincount(tl.item_op[has & gone], minlength=tl.n_ops)
    out = (n_items > 0) & (n_gone == n_items)
    return out if blocking else out & ~tl.block
