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

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from analysis import trace as T

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

    @property
    def n(self) -> int:
        return int(self.starts.size - 1)


def _gpu_sequence(trace: T.Trace) -> dict[str, np.ndarray]:
    """start, code, dev and stream of every GPU item, sorted by start.

    Codes: a kernel's short-name id (>= 0); copies -(1 + copyKind); memsets -100; graph
    replays -(1000 + graphExecId).
    """
    parts = []
    specs = (
        (KERNEL, "t.shortName"),
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
        bits = T.name_bits(trace, table, "shortName") if table == KERNEL else None
        pack = [("stream", "code", bits)] if bits is not None else []
        parts.append(T.int_columns(trace, table, cols, pack=pack))
    keys = ("start", "code", "dev", "stream")
    if not parts:
        return {k: np.zeros(0, np.int64) for k in keys}
    cat = {k: np.concatenate([p[k] for p in parts]) for k in keys}
    order = np.argsort(cat["start"], kind="stable")
    return {k: v[order] for k, v in cat.items()}


@dataclass(frozen=True)
class _Anchor:
    code: int
    period: int
    cover: int
    positions: np.ndarray  # of the anchor in the sequence
    modal: np.ndarray  # per segment between consecutive anchors: has the modal content


def _best_anchor(
    codes: np.ndarray,
    min_repeats: int,
    candidates: int,
    min_cover: float = 0.3,
    min_local_cover: float = 0.9,
) -> _Anchor | None:
    """The anchor whose repeating segments cover the most items, among those that cover at
    least ``min_cover`` of the stream's items or at least ``min_local_cover`` of the items from
    their first segment to their last (a short loop after a long autotuning or compile phase
    holds few of the stream's items but nearly all of its own stretch; a layer that repeats
    inside a step holds a small part of both); among those within 10% of the best cover, the
    longest period (one anchor per step, not one per layer)."""
    uniq, inv, counts = np.unique(codes, return_inverse=True, return_counts=True)
    order = np.argsort(-counts, kind="stable")
    order = order[counts[order] >= min_repeats + 1][:candidates]
    if order.size == 0:
        return None
    rng = np.random.default_rng(12345)
    weight = rng.integers(1, 2**62, size=uniq.size, dtype=np.int64).astype(np.uint64)
    cum = np.concatenate([[np.uint64(0)], np.cumsum(weight[inv], dtype=np.uint64)])
    found: list[_Anchor] = []
    for u in order:
        pos = np.flatnonzero(inv == u)
        length = np.diff(pos).astype(np.uint64)
        key = (cum[pos[1:]] - cum[pos[:-1]]) ^ (length * np.uint64(0x9E3779B97F4A7C15))
        keys, kcount = np.unique(key, return_counts=True)
        best = int(np.argmax(kcount))
        if kcount[best] < min_repeats:
            continue
        modal = key == keys[best]
        period = int(length[np.argmax(modal)])
        cover = int(kcount[best]) * period
        seg = np.flatnonzero(modal)
        stretch = int(pos[seg[-1] + 1] - pos[seg[0]])
        if cover >= min_cover * codes.size or cover >= min_local_cover * stretch:
            found.append(_Anchor(int(uniq[u]), period, cover, pos, modal))
    if not found:  # what repeats is a detail, not the loop
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


def gpu_iterations(trace: T.Trace, cfg: Mapping[str, Any]) -> Iterations | None:
    """Iterations from repeating GPU work, or None when nothing repeats often enough.

    Judged per stream of the busiest device (a loader's or DALI's kernels on their own
    streams interleave with the training loop's and would break its repeats); the stream
    whose repeats cover the most items wins.
    """
    min_rep = int(cfg.get("min_repeats", 5))
    seq = _gpu_sequence(trace)
    if seq["code"].size < 2 * min_rep:
        return None
    devs, dcount = np.unique(seq["dev"], return_counts=True)
    on_dev = seq["dev"] == devs[np.argmax(dcount)]
    streams, scount = np.unique(seq["stream"][on_dev], return_counts=True)
    best: tuple[_Anchor, np.ndarray] | None = None
    for stream in streams[np.argsort(-scount, kind="stable")][: int(cfg.get("streams", 3))]:
        mine = on_dev & (seq["stream"] == stream)
        anchor = _best_anchor(
            seq["code"][mine],
            min_rep,
            int(cfg.get("anchor_candidates", 24)),
            float(cfg.get("min_cover_share", 0.3)),
            float(cfg.get("min_local_cover_share", 0.9)),
        )
        if anchor is not None and (best is None or anchor.cover > best[0].cover):
            best = (anchor, seq["start"][mine])
    if best is None:
        return None
    anchor, start = best
    at = start[anchor.positions]
    seg_start, seg_end = at[:-1][anchor.modal], at[1:][anchor.modal]
    skip = min(int(cfg.get("skip_iterations", 1)), max(0, seg_start.size - min_rep))
    seg_start, seg_end = _trim(
        seg_start[skip:], seg_end[skip:], float(cfg.get("outlier_factor", 3.0))
    )
    if seg_start.size < min_rep:
        return None
    what = "kernel" if anchor.code >= 0 else "copy or graph replay"
    return Iterations(
        np.concatenate([seg_start, seg_end[-1:]]),
        f"repeating GPU work ({anchor.period} items per iteration, anchored on a {what})",
        int(seg_start[0] - seq["start"][0]),
    )


def nvtx_iterations(trace: T.Trace, cfg: Mapping[str, Any]) -> Iterations | None:
    """Iterations from the push/pop NVTX range (any name) that repeats on one thread and
    covers the most time, or None."""
    if not trace.has("NVTX_EVENTS"):
        return None
    min_rep = int(cfg.get("min_repeats", 5))
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
    skip = min(int(cfg.get("skip_iterations", 1)), max(0, s.size - min_rep))
    s, e = _trim(s[skip:], e[skip:], float(cfg.get("outlier_factor", 3.0)))
    if s.size < min_rep:
        return None
    edges = np.concatenate([s, e[-1:]])
    skipped = int(s[0] - r["start_ns"].min())
    return Iterations(edges, f"repeating NVTX range `{text}`", skipped, on_host=True)
