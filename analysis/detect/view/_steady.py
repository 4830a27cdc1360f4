"""The steady state of a report that carries none of the suite's NVTX ranges.

A training or inference loop issues the same GPU work every iteration. Reading the GPU timeline
as a sequence of item codes (a kernel's name, a copy's direction, a CUDA graph replay's
executable id, in start order), an iteration is the stretch from one occurrence of an *anchor*
code to the next, and the steady state is where those stretches repeat with the same content.
Start-up (imports, weight upload, cuDNN autotuning, torch.compile, loader start-up) runs other
GPU work or none, so it falls before the first repeat; a first iteration that repeats the
content but took far longer than the rest (a compile or autotune inside it) is dropped too.

Without GPU tables (a CPU capture) the same idea runs on NVTX ranges of any name: the push/pop
range that repeats most often on one thread, covering the most time, is the iteration.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis import trace as T
from analysis.detect.config import WindowThresholds

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
GRAPH = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"


@dataclass(frozen=True)
class Iterations:
    """Repeating iterations found in a report: their start times and what found them."""

    starts: np.ndarray
    """Start (ns) of each steady iteration, plus the end of the last one (len = n + 1)."""
    source: str
    """What repeats: e.g. 'GPU work (anchor kernel foo, 212 items per iteration)'."""
    skipped_ns: int
    """Time from the first GPU item (or range) to the steady state: start-up left out."""
    on_host: bool = False
    """The edges are host times (NVTX ranges), not starts of GPU items."""
    tid: int | None = None
    """The thread of the NVTX range that repeats (edges on the host); None otherwise."""

    @property
    def n(self) -> int:
        return int(self.starts.size - 1)


def gpu_sequence(trace: T.Trace, *, full_names: bool = False) -> dict[str, np.ndarray]:
    """start, code, dev and stream of every GPU item, sorted by start.

    Codes: a kernel's short-name id (>= 0; with ``full_names`` its demangled name's id, which
    tells apart the template instances a short name such as ``vectorized_elementwise_kernel``
    merges); copies -(1 + copyKind); memsets -100; graph replays -(1000 + graphExecId).
    """
    parts = []
    name = "demangledName" if full_names else "shortName"
    specs = (
        (KERNEL, f"t.{name}"),
        (MEMCPY, "-(1 + t.copyKind)"),
        (MEMSET, "-100"),
        (GRAPH, "-(1000 + t.graphExecId)"),
    )
    for table, code in specs:
        if not trace.has(table):
            continue
        cols = {"start": "t.start", "code": code}
        cols["dev"] = "t.deviceId" if trace.has(table, "deviceId") else "0"
        cols["stream"] = "t.streamId" if trace.has(table, "streamId") else "0"
        bits = T.name_bits(trace, table, name) if table == KERNEL else None
        pack = [("stream", "code", bits)] if bits is not None else []
        parts.append(T.int_columns(trace, table, cols, pack=pack))
    keys = ("start", "code", "dev", "stream")
    if not parts:
        return {k: np.zeros(0, np.int64) for k in keys}
    cat = {k: np.concatenate([p[k] for p in parts]) for k in keys}
    order = np.argsort(cat["start"], kind="stable")
    return {k: v[order] for k, v in cat.items()}


@dataclass(frozen=True)
class Anchor:
    code: int
    period: int
    cover: int
    positions: np.ndarray  # of the anchor in the sequence
    modal: np.ndarray  # per segment between consecutive anchors: has the modal content

    @property
    def stretch(self) -> tuple[int, int]:
        """Positions (in the sequence) of the first modal segment's start and the last's end."""
        seg = np.flatnonzero(self.modal)
        return int(self.positions[seg[0]]), int(self.positions[seg[-1] + 1])


@dataclass(frozen=True)
class CodeGroups:
    """The item codes grouped: each distinct code, how often it occurs, each item's code index,
    and every item's position, code by code (``bounds[u]:bounds[u + 1]`` for code ``u``)."""

    uniq: np.ndarray
    counts: np.ndarray
    inv: np.ndarray
    by_code: np.ndarray
    bounds: np.ndarray


def group_codes(codes: np.ndarray) -> CodeGroups:
    """:class:`CodeGroups` from one stable sort: trying every code as the anchor then costs one
    pass over the items, not one per code (and no more than ``np.unique`` did alone)."""
    by_code = np.argsort(codes, kind="stable")
    ordered = codes[by_code]
    bounds = np.concatenate([[0], np.flatnonzero(ordered[1:] != ordered[:-1]) + 1, [codes.size]])
    counts = np.diff(bounds)
    inv = np.empty(codes.size, np.intp)
    inv[by_code] = np.repeat(np.arange(counts.size), counts)
    return CodeGroups(ordered[bounds[:-1]], counts, inv, by_code, bounds)


def _try_anchor(code: int, pos: np.ndarray, cum: np.ndarray, min_repeats: int) -> Anchor | None:
    """The anchor at positions ``pos``, or None when its commonest segment (content and
    length) repeats fewer than ``min_repeats`` times."""
    length = np.diff(pos).astype(np.uint64)
    key = (cum[pos[1:]] - cum[pos[:-1]]) ^ (length * np.uint64(0x9E3779B97F4A7C15))
    keys, kcount = np.unique(key, return_counts=True)
    best = int(np.argmax(kcount))
    if kcount[best] < min_repeats:
        return None
    modal = key == keys[best]
    period = int(length[np.argmax(modal)])
    return Anchor(code, period, int(kcount[best]) * period, pos, modal)


def anchors(
    codes: np.ndarray,
    min_repeats: int,
    candidates: int = 0,
    min_cover: float = 0.3,
    min_local_cover: float = 0.9,
) -> list[Anchor]:
    """The anchors whose repeating segments cover at least ``min_cover`` of the stream's items
    or at least ``min_local_cover`` of the items from their first segment to their last (a
    short loop after a long autotuning or compile phase holds few of the stream's items but
    nearly all of its own stretch; a layer that repeats inside a step holds a small part of
    both).

    Every code that occurs often enough is tried (``candidates`` > 0: only that many, the
    most frequent first): a kernel that runs once a step is rare beside each layer's kernels,
    and rarer still beside an autotuner's or compiler's trial runs of the same kernels, so the
    most frequent codes may hold no step anchor at all."""
    g = group_codes(codes)
    order = np.argsort(-g.counts, kind="stable")
    order = order[g.counts[order] >= min_repeats + 1]
    if candidates > 0:
        order = order[:candidates]
    rng = np.random.default_rng(12345)
    weight = rng.integers(1, 2**62, size=g.uniq.size, dtype=np.int64).astype(np.uint64)
    cum = np.concatenate([[np.uint64(0)], np.cumsum(weight[g.inv], dtype=np.uint64)])
    found = []
    for u in order:
        pos = g.by_code[g.bounds[u] : g.bounds[u + 1]]
        anchor = _try_anchor(int(g.uniq[u]), pos, cum, min_repeats)
        if anchor is None:
            continue
        a, b = anchor.stretch
        if anchor.cover >= min_cover * codes.size or anchor.cover >= min_local_cover * (b - a):
            found.append(anchor)
    return found


def pick_anchor(found: list[Anchor]) -> Anchor | None:
    """The anchor covering the most items; among those within 10% of it, the longest period
    (one anchor per step, not one per layer); None when nothing qualified (what repeats is a
    detail, not the loop)."""
    if not found:
        return None
    top = max(a.cover for a in found)
    return max((a for a in found if a.cover >= 0.9 * top), key=lambda a: (a.period, a.cover))


def _trim(starts: np.ndarray, ends: np.ndarray, outlier: float) -> tuple[np.ndarray, np.ndarray]:
    """Drop leading and trailing iterations that took over ``outlier`` x the median (a
    compile or autotune inside the first, a tear-down after the last)."""
    dur = ends - starts
    med = float(np.median(dur))
    ok = dur <= outlier * max(med, 1.0)
    if not ok.any():
        return starts, ends
    first, last = int(np.argmax(ok)), int(ok.size - 1 - np.argmax(ok[::-1]))
    return starts[first : last + 1], ends[first : last + 1]


@dataclass(frozen=True)
class Stall:
    """A one-off iteration left out at the window's start (:func:`settle`)."""

    index: int
    """Its place among the iterations found (0: the first kept after ``skip_iterations``)."""
    ns: int
    """How long it took."""
    median_ns: int
    """The median iteration, for scale."""
    next_ns: int
    """The longest iteration after it."""

    def describe(self) -> str:
        return (
            f"a one-off {self.ns / 1e6:.1f} ms iteration left out before them (iteration "
            f"{self.index + 1}, {self.ns / max(self.median_ns, 1):.0f}x the median "
            f"{self.median_ns / 1e6:.2f} ms, {self.ns / max(self.next_ns, 1):.1f}x the longest "
            f"after it, {self.next_ns / 1e6:.1f} ms)"
        )


def period_calls(
    trace: T.Trace, calls: list[str], lo: int, hi: int | None = None, tid: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Starts and ends (ns, in start order) of the periodic-work calls ``calls`` (OSRT_API):
    those starting at ``lo`` or later, or with ``hi`` those overlapping [lo, hi]; of thread
    ``tid`` (None: any). The one reader of them for the window's stall rule and its periods."""
    empty = np.zeros(0, np.int64)
    if not calls or not (trace.has("OSRT_API") and trace.has("StringIds")):
        return empty, empty
    names = ", ".join(f"'{n}'" for n in calls)
    where = 'o.start < :hi AND o."end" > :lo' if hi is not None else "o.start >= :lo"
    if tid is not None:
        where += f" AND o.globalTid = {int(tid)}"
    rows = trace.query(
        'SELECT o.start, o."end" FROM OSRT_API o JOIN StringIds s ON s.id = o.nameId '
        f"WHERE {where} AND s.value IN ({names}) ORDER BY o.start",
        {"lo": int(lo), "hi": int(hi if hi is not None else 0)},
    )[1]
    if not rows:
        return empty, empty
    return np.array([r[0] for r in rows], np.int64), np.array([r[1] for r in rows], np.int64)


def _writes_ns(trace: T.Trace | None, calls: list[str], lo: int, hi: int) -> int:
    """Time (ns) any thread spends in the periodic-work calls ``calls`` within [lo, hi]."""
    if trace is None:
        return 0
    s, e = period_calls(trace, calls, lo, hi)
    return int((np.minimum(e, hi) - np.maximum(s, lo)).sum())


def settle(
    starts: np.ndarray,
    ends: np.ndarray,
    window: WindowThresholds,
    trace: T.Trace | None = None,
) -> tuple[np.ndarray, np.ndarray, Stall | None]:
    """The iterations from after the last one-off stall in their first part on (``stall_*``),
    each timed to the next one's start (the window's edges: a gap between repeats, other work
    between them, counts in the iteration before it).

    ``_trim`` drops long iterations at the very start only; a warm-up stall a few iterations in
    (a sub-step loop whose first steps still allocate or compile) would stay and read as GPU
    idle. A stall is dropped only where no later iteration comes near it (periodic work recurs:
    a checkpoint every N steps belongs in the mean step) and it holds no periodic writes."""
    n = starts.size
    dur = (np.append(starts[1:], ends[-1:]) - starts).astype(np.int64)
    lead = int(np.ceil(window.stall_lead_share * n))
    if n < window.min_repeats + 1 or lead < 1:
        return starts, ends, None
    med = max(float(np.median(dur)), 1.0)
    later = np.append(np.maximum.accumulate(dur[::-1])[::-1][1:], 0)  # longest after each
    k = window.stall_factor
    hit = (dur > k * med) & (dur > k * later)
    hit[lead:] = False
    hit[n - window.min_repeats :] = False  # keep enough iterations to judge
    min_run = int(window.min_period_run_ms * 1e6)
    for i in np.flatnonzero(hit)[::-1]:
        hi = int(starts[i] + dur[i])
        if _writes_ns(trace, window.period_calls, int(starts[i]), hi) >= min_run:
            continue
        stall = Stall(int(i), int(dur[i]), int(med), int(later[i]))
        return starts[i + 1 :], ends[i + 1 :], stall
    return starts, ends, None


def _repeat_ns(anchor: Anchor, start: np.ndarray) -> int:
    """The time (ns) the anchor's modal segments take (``start``: its stream's item starts)."""
    at = start[anchor.positions]
    return int((at[1:] - at[:-1])[anchor.modal].sum())


def _later_ns(found: list[Anchor], start: np.ndarray) -> np.ndarray:
    """Per anchor, the most time any other anchor's repeats take that begin only after its
    last repeat ends (0 where none do): a later, longer run of repeats is the stretch the
    program settles into."""
    lo = np.array([start[a.stretch[0]] for a in found], np.int64)
    hi = np.array([start[a.stretch[1]] for a in found], np.int64)
    ns = np.array([_repeat_ns(a, start) for a in found], np.int64)
    order = np.argsort(lo, kind="stable")
    suffix = np.maximum.accumulate(np.append(ns[order], 0)[::-1])[::-1]
    return suffix[np.searchsorted(lo[order], hi)]


def _distrust(
    anchor: Anchor,
    start: np.ndarray,
    dev_start: np.ndarray,
    later_ns: int,
    window: WindowThresholds,
) -> str | None:
    """Why the anchor's repeats cannot be the loop, or None (``start``: its stream's item
    starts; ``dev_start``: the device's, sorted; ``later_ns``: :func:`_later_ns`). Their
    stream must hold ``min_device_share`` of the device's items in their stretch (else a side
    stream's detail: a cuDNN handle's few identical memsets beside an autotuner's thousands of
    trial kernels); no later run of repeats may take longer (else a phase the program left,
    such as a weight upload's thousands of identical copies before a shorter loop); and no
    more than ``max_after_share`` of the device's items from their start on may follow them
    (the same, where the loop that follows does not repeat as a whole)."""
    a, b = anchor.stretch
    i, j = (int(x) for x in np.searchsorted(dev_start, [start[a], start[b]]))
    share = (b - a) / max(j - i, 1)
    if share < window.min_device_share:
        return f"on a stream holding {share:.1%} of the GPU's items in their stretch"
    if later_ns > _repeat_ns(anchor, start):
        return f"followed by repeats taking longer ({later_ns / 1e6:.1f} ms)"
    after = dev_start.size - j
    if after > window.max_after_share * (dev_start.size - i):
        return f"followed by {after} of the GPU's {dev_start.size - i} items from their start"
    return None


def _stream_anchor(
    seq: dict[str, np.ndarray], window: WindowThresholds
) -> tuple[tuple[Anchor, np.ndarray] | None, str | None]:
    """The trusted anchor, and its stream's item starts, of the stream whose trusted repeats
    cover the most items (the busiest streams of the busiest device searched); else None and
    why the best untrusted repeats were left out (None when nothing repeats)."""
    devs, dcount = np.unique(seq["dev"], return_counts=True)
    on_dev = seq["dev"] == devs[np.argmax(dcount)]
    dev_start = seq["start"][on_dev]
    streams, scount = np.unique(seq["stream"][on_dev], return_counts=True)
    best: tuple[Anchor, np.ndarray] | None = None
    why: tuple[int, str] | None = None
    for stream in streams[np.argsort(-scount, kind="stable")][: window.streams]:
        mine = on_dev & (seq["stream"] == stream)
        start = seq["start"][mine]
        found = anchors(
            seq["code"][mine],
            window.min_repeats,
            window.anchor_candidates,
            window.min_cover_share,
            window.min_local_cover_share,
        )
        trusted = []
        for anchor, later in zip(found, _later_ns(found, start) if found else [], strict=True):
            reason = _distrust(anchor, start, dev_start, int(later), window)
            if reason is None:
                trusted.append(anchor)
            elif why is None or anchor.cover > why[0]:
                n, k = anchor.cover // anchor.period, anchor.period
                why = (anchor.cover, f"{n} repeats of {k} GPU item{'s' * (k > 1)}, {reason}")
        pick = pick_anchor(trusted)
        if pick is not None and (best is None or pick.cover > best[0].cover):
            best = (pick, start)
    return best, None if best is not None or why is None else why[1]


def _one_name_run(anchor: Anchor, window: WindowThresholds) -> bool:
    """Whether the anchor's iteration is one item that covers less than
    ``min_local_cover_share`` of its own stretch: a run of one kernel name inside a longer
    loop (a per-parameter optimizer's hundreds of elementwise kernels, which one short name
    covers), not a loop of one kernel; the search is then made again on the kernels' full
    names."""
    a, b = anchor.stretch
    return anchor.period == 1 and anchor.cover < window.min_local_cover_share * (b - a)


def gpu_search(trace: T.Trace, window: WindowThresholds) -> tuple[Iterations | None, str | None]:
    """:func:`gpu_iterations`, and when it finds none although some GPU work repeats, why
    those repeats were not trusted as the loop (else None)."""
    min_rep = window.min_repeats
    seq = gpu_sequence(trace)
    if seq["code"].size < 2 * min_rep:
        return None, None
    best, why = _stream_anchor(seq, window)
    if best is not None and _one_name_run(best[0], window):
        finer, _ = _stream_anchor(gpu_sequence(trace, full_names=True), window)
        best = finer if finer is not None else best
    if best is None:
        return None, why
    anchor, start = best
    at = start[anchor.positions]
    seg_start, seg_end = at[:-1][anchor.modal], at[1:][anchor.modal]
    skip = min(window.skip_iterations, max(0, seg_start.size - min_rep))
    seg_start, seg_end = _trim(seg_start[skip:], seg_end[skip:], window.outlier_factor)
    seg_start, seg_end, stall = settle(seg_start, seg_end, window, trace)
    if seg_start.size < min_rep:
        return None, None
    what = "kernel" if anchor.code >= 0 else "copy or graph replay"
    left = f"; {stall.describe()}" if stall is not None else ""
    return Iterations(
        np.concatenate([seg_start, seg_end[-1:]]),
        f"repeating GPU work ({anchor.period} items per iteration, anchored on a {what}{left})",
        int(seg_start[0] - seq["start"][0]),
    ), None


def gpu_iterations(trace: T.Trace, window: WindowThresholds) -> Iterations | None:
    """Iterations from repeating GPU work, or None when nothing repeats often enough or what
    repeats cannot be the loop (:func:`_distrust`).

    Judged per stream of the busiest device (a loader's or DALI's kernels on their own
    streams interleave with the training loop's and would break its repeats); the stream
    whose trusted repeats cover the most items wins.
    """
    return gpu_search(trace, window)[0]


def nvtx_iterations(trace: T.Trace, window: WindowThresholds) -> Iterations | None:
    """Iterations from the push/pop NVTX range (any name) that repeats on one thread and
    covers the most time, or None."""
    if not trace.has("NVTX_EVENTS"):
        return None
    min_rep = window.min_repeats
    r = T.nvtx_ranges(trace)
    r = r[(r["range_type"] == "push_pop") & r["end_ns"].notna() & r["text"].notna()]
    if r.empty:
        return None
    r = r.astype({"end_ns": "int64", "duration_ns": "int64"})
    groups = r.groupby(["global_tid", "text"], sort=False)["duration_ns"].agg(["size", "sum"])
    groups = groups[groups["size"] >= min_rep + 1]
    if groups.empty:
        return None
    tid, text = groups["sum"].idxmax()
    mine = r[(r["global_tid"] == tid) & (r["text"] == text)].sort_values("start_ns")
    s, e = mine["start_ns"].to_numpy(np.int64), mine["end_ns"].to_numpy(np.int64)
    skip = min(window.skip_iterations, max(0, s.size - min_rep))
    s, e = _trim(s[skip:], e[skip:], window.outlier_factor)
    s, e, stall = settle(s, e, window, trace)
    if s.size < min_rep:
        return None
    edges = np.concatenate([s, e[-1:]])
    skipped = int(s[0] - r["start_ns"].min())
    left = f" ({stall.describe()})" if stall is not None else ""
    return Iterations(
        edges, f"repeating NVTX range `{text}`{left}", skipped, on_host=True, tid=int(tid)
    )
