"""NCCL kernels split into waiting and transferring, by matching each one across the ranks.

A report of a torchrun job holds every rank of the node, one GPU each. A collective or a
send/receive is one NCCL kernel per taking part rank, and no rank's kernel can finish before the
last participant has arrived: a rank that arrives early spins inside its kernel until then. So
the kernel time is two things that call for opposite fixes: the **wait** (from the kernel's start
to the last participant's start), time this rank spent because a peer was late, and the
**transfer** (from then to the kernel's end), the communication itself.

Matching (mechanism only, no NVTX): a *lane* is one GPU's stream of NCCL kernels (PyTorch gives
every communicator its own stream on each GPU, and a pair of pipeline ranks a communicator of its
own). Every rank issues a communicator's operations in the same order, so the k-th kernel of a
lane goes with the k-th of its peer lanes on the other GPUs, up to an offset where a capture cut
them differently. Two lanes of different GPUs are peers when, at the best offset (within
``max_align_offset`` kernels), at least ``min_lane_match_share`` of their aligned kernels have the
same name, overlap in time and end within ``max_end_skew_us`` of each other (a collective's
kernels all run until its last participant has arrived and end together; a message's send and
receive run together). Pairs are taken best first, a lane of send/receive kernels taking one
peer lane (PyTorch gives each pair of ranks a communicator of its own), a collective's lane one
on every other GPU. Kernels are read up to ``match_margin_ms``
beyond the window, so that a peer's kernel that started before the window still counts.

Each kernel's wait ends at ``cut`` = the latest start among itself and its peers' aligned
kernels (clipped to the kernel); the peer that started last is its ``late_device``. A kernel
without peers (one GPU, or an unmatched lane) is all transfer, as nothing says it waited.

What a wait is charged to (:func:`charges`), by what the late rank was doing meanwhile, in this
order; only the part of a wait that the waiting rank's own compute does not hide is charged:

- ``peer_compute``: the late rank's GPU ran compute (kernels, copies): it had more GPU work;
- (the late rank was itself waiting in an NCCL kernel: the wait takes the late rank's own
  charge for those moments, followed along the chain);
- ``peer_host``: its GPU idled while its host was blocked in a sync or spent a stretch of at
  least ``host.stretch_ms`` without CUDA calls (input or other host work): that rank's own class;
- ``peer_work``: its host was issuing work, and it launched at least ``min_work_ratio`` times the
  waiting rank's kernels in the window: it had more work to issue;
- ``coupling``: its host was issuing the same work at the same pace: the ranks wait for each
  other because every collective makes them meet (its issue cost, and the skew between equal
  ranks that each collective passes on): communication.

``peer_compute`` and ``peer_work`` are unequal work (``stage_imbalance``); ``coupling`` is
communication (``exposed_comm``), as are transfers not hidden by the rank's own compute.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from analysis import trace as T
from analysis.detect.config import ExposedCommThresholds
from analysis.detect.view._api import LAUNCH
from analysis.detect.view._arrays import by_start, few_unique, process_of
from analysis.detect.view._calls import blocking_calls, window_calls
from analysis.detect.view._gpu import KIND_KERNEL, Activity, gpu_activity
from analysis.detect.view._intervals import difference, gaps, length, union
from analysis.detect.view._reads import KERNEL, RUNTIME, WINDOW, id_list, string_ids, trace_cache
from analysis.detect.view._window import Steady

if TYPE_CHECKING:
    from analysis.detect.view._trace_view import TraceView

__all__ = ["CHARGES", "Charges", "Comm", "charges", "comm", "compute_union"]


@dataclass(frozen=True)
class Comm:
    """The window's NCCL kernels (clipped to it) and where each one's wait ends."""

    start: np.ndarray
    end: np.ndarray
    device: np.ndarray
    cut: np.ndarray
    """Where the wait ends and the transfer begins (``start`` where it did not wait)."""
    late_device: np.ndarray
    """The GPU whose kernel started last (the kernel's own where it was last or unmatched)."""
    matched: np.ndarray
    """Whether the kernel was matched to a peer's kernel."""
    lanes: int
    """NCCL lanes (GPU, stream) in the window."""
    peer_lanes: int
    """Of them, those matched to a lane of another GPU."""

    def wait(self, device: int) -> tuple[np.ndarray, np.ndarray]:
        """The union of ``device``'s wait intervals."""
        on = self.device == device
        return union(self.start[on], self.cut[on])

    def transfer(self, device: int) -> tuple[np.ndarray, np.ndarray]:
        """The union of ``device``'s transfer intervals."""
        on = self.device == device
        return union(self.cut[on], self.end[on])

    def waits_on(self, device: int) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """``device``'s wait intervals grouped by the GPU it waited for (each a union)."""
        on = (self.device == device) & (self.cut > self.start)
        out = {}
        for late in np.unique(self.late_device[on]):
            mine = on & (self.late_device == late)
            out[int(late)] = union(self.start[mine], self.cut[mine])
        return out


def comm(trace: T.Trace, st: Steady, th: ExposedCommThresholds) -> Comm:
    """The window's NCCL kernels matched across GPUs (cached per window and settings: the
    matching's, ``th``)."""
    key = ("comm", st.lo, st.hi, th.match_margin_ms, th.min_lane_match_share)
    key += (th.max_align_offset, th.max_end_skew_us)
    cache = trace_cache(trace)
    if key not in cache:
        cache[key] = _split(_read(trace, st, int(th.match_margin_ms * 1e6)), st, th)
    return cache[key]


def _read(trace: T.Trace, st: Steady, margin: int) -> dict[str, np.ndarray]:
    """NCCL kernels overlapping the window widened by ``margin``: start, end, device, stream,
    name (unclipped), sorted by start."""
    ids = string_ids(trace, "%nccl%")
    if not ids or not trace.has(KERNEL):
        empty = {k: np.zeros(0, np.int64) for k in ("start", "end", "device", "stream", "name")}
        return empty | {"text": np.zeros(0, dtype=str)}
    has = lambda col: trace.has(KERNEL, col)  # noqa: E731
    name = "t.shortName" if has("shortName") else "t.demangledName"
    cols = {
        "start": "t.start",
        "end": 't."end"',
        "device": "t.deviceId" if has("deviceId") else "0",
        "stream": "t.streamId" if has("streamId") else "0",
        "name": name,
    }
    idl = id_list(ids)
    where = f"({WINDOW}) AND (t.shortName IN ({idl}) OR t.demangledName IN ({idl}))"
    rows = T.int_columns(
        trace, KERNEL, cols, where, {"lo": st.lo - margin, "hi": st.hi + margin}, few=True
    )
    rows = by_start(rows)
    ids = np.unique(rows["name"])
    text = dict(
        trace.query(f"SELECT id, value FROM StringIds WHERE id IN ({id_list(ids)})")[1]
        if ids.size
        else []
    )
    rows["text"] = np.array([str(text.get(int(i), "")) for i in rows["name"]], dtype=str)
    return rows


def _lanes(rows: dict[str, np.ndarray]) -> list[tuple[int, np.ndarray]]:
    """(device, row indices sorted by start) per (device, stream)."""
    out = []
    pairs = np.unique(np.stack([rows["device"], rows["stream"]], axis=1), axis=0)
    for d, s in pairs:
        idx = np.flatnonzero((rows["device"] == d) & (rows["stream"] == s))
        out.append((int(d), idx))
    return out


def _align(
    rows: dict[str, np.ndarray], a: np.ndarray, b: np.ndarray, max_offset: int, skew_ns: int
) -> tuple[float, np.ndarray, np.ndarray]:
    """The offset pairing lanes ``a`` and ``b`` in order whose pairs most often share a name,
    overlap in time and end within ``skew_ns`` of each other (an operation ends on every rank
    at about the same moment): (that share of the shorter lane, a's indices, b's indices)."""
    best = (0.0, np.zeros(0, np.int64), np.zeros(0, np.int64))
    shorter = max(1, min(a.size, b.size))
    start, end = rows["start"], rows["end"]
    for off in range(-max_offset, max_offset + 1):
        ia, ib = a[max(0, -off) :], b[max(0, off) :]
        n = min(ia.size, ib.size)
        if n == 0:
            continue
        ia, ib = ia[:n], ib[:n]
        ok = rows["name"][ia] == rows["name"][ib]
        ok &= np.minimum(end[ia], end[ib]) > np.maximum(start[ia], start[ib])
        ok &= np.abs(end[ia] - end[ib]) <= skew_ns
        share = float(ok.sum()) / shorter
        if share > best[0]:
            best = (share, ia[ok], ib[ok])
    return best


def _links(
    rows: dict[str, np.ndarray], lanes: list[tuple[int, np.ndarray]], th: ExposedCommThresholds
):
    """The lane pairs taken as one communicator's, best first: each candidate pair of lanes of
    different GPUs scored by :func:`_align`; a pair is taken when its score reaches
    ``min_lane_match_share``, neither lane has a peer on the other's GPU yet, and, for a
    point-to-point lane (send/receive kernels only), it has no peer at all yet: a communicator
    of two ranks has one peer lane, a collective's has one on every other GPU."""
    p2p = [bool(np.char.find(_names(rows, idx), "SendRecv").min() >= 0) for _, idx in lanes]
    found = []
    skew = int(th.max_end_skew_us * 1000)
    for i, (da, a) in enumerate(lanes):
        for j in range(i + 1, len(lanes)):
            db, b = lanes[j]
            if da != db:
                share, ia, ib = _align(rows, a, b, th.max_align_offset, skew)
                if share >= th.min_lane_match_share:
                    found.append((share, i, j, ia, ib))
    found.sort(key=lambda f: -f[0])
    peers: dict[int, set[int]] = {i: set() for i in range(len(lanes))}  # lane -> peer GPUs
    for _share, i, j, ia, ib in found:
        di, dj = lanes[i][0], lanes[j][0]
        if dj in peers[i] or di in peers[j] or ((p2p[i] or p2p[j]) and (peers[i] or peers[j])):
            continue
        peers[i].add(dj)
        peers[j].add(di)
        yield i, j, ia, ib


def _names(rows: dict[str, np.ndarray], idx: np.ndarray) -> np.ndarray:
    """The kernel names of rows ``idx`` (read with them: see :func:`_read`)."""
    return rows["text"][idx]


def _split(rows: dict[str, np.ndarray], st: Steady, th: ExposedCommThresholds) -> Comm:
    """Match the lanes, find each kernel's last arrival, clip to the window."""
    n = rows["start"].size
    last = rows["start"].copy()  # the latest start among a kernel and its peers' kernels
    late = rows["device"].copy()
    matched = np.zeros(n, bool)
    lanes = _lanes(rows)
    peered: set[int] = set()
    for i, j, ia, ib in _links(rows, lanes, th):
        peered |= {i, j}
        matched[ia] = matched[ib] = True
        for x, y in ((ia, ib), (ib, ia)):
            later = rows["start"][y] > last[x]
            last[x[later]] = rows["start"][y[later]]
            late[x[later]] = rows["device"][y[later]]
    keep = (rows["end"] > st.lo) & (rows["start"] < st.hi)
    start = np.clip(rows["start"][keep], st.lo, st.hi)
    end = np.clip(rows["end"][keep], st.lo, st.hi)
    cut = np.clip(last[keep], start, end)
    in_window = [idx for _, idx in lanes if keep[idx].any()]
    return Comm(
        start=start,
        end=end,
        device=rows["device"][keep],
        cut=cut,
        late_device=late[keep],
        matched=matched[keep],
        lanes=len(in_window),
        peer_lanes=sum(1 for k, (_, idx) in enumerate(lanes) if k in peered and keep[idx].any()),
    )


#: What a wait is charged to (see the module docstring), and the transfers: ``Charges`` keys.
CHARGES = ("transfer", "coupling", "peer_compute", "peer_work", "peer_host")


@dataclass(frozen=True)
class Charges:
    """Per GPU running NCCL in the window, the unions of its exposed NCCL time by what it is
    charged to (:data:`CHARGES`): each part not hidden by the GPU's own compute."""

    devices: list[int]
    parts: dict[int, dict[str, tuple[np.ndarray, np.ndarray]]]
    kernels: dict[int, int]
    """Compute kernels (and copies, memsets) each GPU ran in the window."""

    def ns(self, device: int, what: str) -> int:
        return length(*self.parts[device][what])

    def union(self, device: int, *what: str) -> tuple[np.ndarray, np.ndarray]:
        parts = [self.parts[device][w] for w in what]
        return union(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))


def charges(view: TraceView, st: Steady) -> Charges:
    """Every NCCL-running GPU's exposed transfers and waits, charged (cached per settings: the
    view's ``exposed_comm`` section matches the kernels, its ``host.stretch_ms`` reads a late
    rank's host)."""
    cfg = view.config
    key = ("charges", st.lo, st.hi, repr(cfg.exposed_comm), cfg.host.stretch_ms)
    cache = trace_cache(view.trace)
    if key not in cache:
        cache[key] = _charges(view.trace, st, cfg.exposed_comm, cfg.host.stretch_ms)
    return cache[key]


def compute_union(act: Activity, device: int) -> tuple[np.ndarray, np.ndarray]:
    """``device``'s own work in the window: non-NCCL kernels, copies, memsets, graph replays."""
    on = (act.device == device) & ~((act.kind == KIND_KERNEL) & act.nccl)
    return union(act.start[on], act.end[on])


def _charges(trace: T.Trace, st: Steady, th: ExposedCommThresholds, stretch_ms: float) -> Charges:
    act = gpu_activity(trace, st.lo, st.hi)
    nccl = (act.kind == KIND_KERNEL) & act.nccl
    devices = [int(d) for d in few_unique(act.device[nccl])]
    work = ~nccl
    every = few_unique(act.device)
    kernels = {int(d): int((work & (act.device == d)).sum()) for d in every}
    own = {int(d): compute_union(act, int(d)) for d in every}
    if not devices:
        return Charges([], {}, kernels)
    cm = comm(trace, st, th)
    hosts = _hosts(trace, st, stretch_ms, act) if trace.has(RUNTIME) else {}
    ratio = th.min_work_ratio
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    waiting = {d: difference(*cm.wait(d), *own.get(d, empty)) for d in devices}
    got: dict[int, dict[str, list]] = {d: {k: [] for k in CHARGES} for d in devices}
    pending: list[tuple[int, int, tuple[np.ndarray, np.ndarray]]] = []
    for d in devices:
        mine = own.get(d, empty)
        got[d]["transfer"].append(difference(*cm.transfer(d), *mine))
        for late, (s, e) in cm.waits_on(d).items():
            s, e = difference(s, e, *mine)
            peer = own.get(late, empty) if late != d else empty
            got[d]["peer_compute"].append(_intersect(s, e, *peer))
            s, e = difference(s, e, *peer)
            chained = waiting.get(late, empty) if late != d else empty
            pending.append((d, late, _intersect(s, e, *chained)))  # the late rank waited too
            s, e = difference(s, e, *chained)
            blocked = hosts.get(late, empty)
            got[d]["peer_host"].append(_intersect(s, e, *blocked))
            s, e = difference(s, e, *blocked)
            more = late != d and kernels.get(late, 0) >= ratio * max(1, kernels.get(d, 0))
            got[d]["peer_work" if more else "coupling"].append((s, e))
    parts = {d: {k: _merge(v) for k, v in got[d].items()} for d in devices}
    parts = _inherit(parts, pending, len(devices))
    return Charges(devices, parts, kernels)


def _inherit(parts, pending, rounds: int):
    """A wait on a rank that was itself waiting takes that rank's charge for the same moments
    (a pipeline's third stage waits for the second, which waits for the heavy first: both
    waits are the first stage's compute). Chains are followed ``rounds`` deep; what is left (a
    rank waiting on one that waits on it) is the collectives' coupling."""
    kinds = ("peer_compute", "peer_work", "peer_host", "coupling")
    for _ in range(rounds):
        left = []
        for d, late, (s, e) in pending:
            for k in kinds:
                part = _intersect(s, e, *parts[late][k]) if late in parts else (s[:0], e[:0])
                if part[0].size:
                    parts[d][k] = _merge([parts[d][k], part])
                    s, e = difference(s, e, *part)
            if s.size:
                left.append((d, late, (s, e)))
        if len(left) == len(pending) and all(
            length(*a[2]) == length(*b[2]) for a, b in zip(left, pending, strict=True)
        ):
            break
        pending = left
    for d, _late, iv in pending:
        parts[d]["coupling"] = _merge([parts[d]["coupling"], iv])
    return parts


def _intersect(s: np.ndarray, e: np.ndarray, bs: np.ndarray, be: np.ndarray):
    """The part of the union (s, e) that the union (bs, be) covers."""
    return difference(s, e, *difference(s, e, bs, be))


def _merge(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return union(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))


def _device_pids(trace: T.Trace, st: Steady) -> dict[int, int]:
    """The process that ran most of each GPU's kernels in the window (kernels carry it)."""
    if not trace.has(KERNEL, "globalPid") or not trace.has(KERNEL, "deviceId"):
        return {}
    sql = (
        f"SELECT t.deviceId, t.globalPid, COUNT(*) AS n FROM {KERNEL} AS t WHERE {WINDOW} "
        "GROUP BY t.deviceId, t.globalPid ORDER BY n"
    )
    rows = trace.query(sql, {"lo": st.lo, "hi": st.hi})[1]
    return {int(d): process_of(int(p)) for d, p, _ in rows if p is not None}


def _hosts(
    trace: T.Trace, st: Steady, stretch_ms: float, act: Activity
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per GPU, when the threads of its process that launch kernels were not issuing work:
    blocked in a call that waits for the GPU, or in a stretch of at least ``host.stretch_ms``
    without a CUDA call (input or other host work). GPUs whose process made no CUDA call in the
    window (an export without the API table's rows) are left out: their host is not known."""
    calls = window_calls(trace, st)
    pid = process_of(calls["tid"])
    launchers = calls["tid"][calls["cat"] == LAUNCH]
    blocking = blocking_calls(trace, act, calls)
    stretch = int(stretch_ms * 1e6)
    out = {}
    for d, p in _device_pids(trace, st).items():
        mine = (pid == p) & np.isin(calls["tid"], np.unique(launchers[process_of(launchers) == p]))
        if not mine.any():  # no CUDA calls of its process read (a GPU-only export): unknown
            continue
        s, e = calls["start"][mine], calls["end"][mine]
        gs, ge = gaps(*union(s, e), st.lo, st.hi)
        long_ = ge - gs >= stretch
        bs, be = union(s[blocking[mine]], e[blocking[mine]])
        out[d] = union(np.concatenate([gs[long_], bs]), np.concatenate([ge[long_], be]))
    return out
