"""What no removal can beat: the floors a predicted step is clamped to.

A replay with one cause removed is a model; the trace itself says what cannot go. Whatever is
removed, everything else unchanged:

- the GPU still runs every item that stays, each stream in its order and each item as long as
  it lasted: no step is shorter than the **busiest stream's remaining work** per iteration
  (:func:`gpu_work_ns`). The busy time of all streams together (their union) is no floor: a
  removal may let two streams overlap where they did not; nor is the kernel sum of all
  streams (two streams run at once). On one stream (kernel_flood) all three are the same;
- the host still does every call and gap that stays, one after the other: no step is shorter
  than the **host's remaining time** per iteration (:func:`host_work_ns`: the gaps and
  non-blocking calls after the removal, at the pace the replay runs them);
- an instant host (``launch``) fills at most the GPU's idle time: it leaves the GPU's items,
  their streams and their overlap as they were, so the step it leaves is at least the base
  replay's **GPU busy time** (the union of the loop's items per iteration:
  :func:`gpu_busy_ns`). A launch-bound saving is so never more than the GPU idle time the
  untraced loop shows.

The replay respects these by construction up to its window's edges (the GPU's first and last
iteration may hold work of their neighbours); ``_forecast`` clamps a prediction that goes below
one by more than ``predict.clamp_tolerance_share`` and says so (:class:`Clamp`).
"""

from __future__ import annotations

import numpy as np

from analysis.detect.timemodel._replay import Removal, Replayed, edge_items
from analysis.detect.timemodel._timeline import Timeline
from bottlenecks.enums import StrEnum

__all__ = ["Clamp", "gpu_busy_ns", "gpu_work_ns", "host_work_ns", "measured_calls"]


class Clamp(StrEnum):
    """Which floor a predicted step was raised to (``none``: the replay's own step stands)."""

    NONE = "none"
    GPU_WORK = "gpu_work"
    """The busiest stream's remaining GPU work per iteration."""
    HOST_WORK = "host_work"
    """The host's remaining time per iteration (gaps and calls after the removal)."""
    GPU_IDLE = "gpu_idle"
    """An instant host's saving capped at the GPU idle time of the base replay."""


#: What each floor is, in a prediction's note.
WHAT: dict[Clamp, str] = {
    Clamp.GPU_WORK: "the GPU's own work (its busiest stream's items that stay)",
    Clamp.HOST_WORK: "the host's own remaining work (its gaps and calls that stay)",
    Clamp.GPU_IDLE: "the GPU's busy time in the replay with nothing removed (an instant host "
    "saves at most the GPU's idle time)",
}


def measured_calls(tl: Timeline, measured: slice) -> tuple[int, int]:
    """The calls ``[lo, hi)`` of the measured iterations: those from the call that launched
    the first measured iteration's first item up to the one that launched the next
    iteration's after the last (the replay's iterations start at those items)."""
    k = edge_items(tl)[measured]
    ops = np.where(k >= 0, tl.item_op[np.maximum(k, 0)], tl.n_ops)
    return int(ops[0]), int(max(ops[-1], ops[0]))


def _items_of(tl: Timeline, lo: int, hi: int) -> np.ndarray:
    """Items the calls ``lo..hi-1`` launched (items are in call order)."""
    return np.arange(int(tl.item_ptr[lo]), int(tl.item_ptr[hi]))


def gpu_work_ns(tl: Timeline, rm: Removal, measured: slice, n: int) -> float:
    """The busiest queue's work (ns; ``Timeline.lanes``) per iteration that stays after ``rm``, over the ``n``
    measured iterations."""
    lo, hi = measured_calls(tl, measured)
    ks = _items_of(tl, lo, hi)
    if rm.item_gone is not None:
        ks = ks[~rm.item_gone[ks]]
    if ks.size == 0 or n <= 0:
        return 0.0
    _, where = np.unique(tl.lanes[ks], return_inverse=True)
    busy = np.bincount(where, weights=rm.durations(tl)[ks].astype(float))
    return float(busy.max()) / n


def host_work_ns(gap: np.ndarray, own: np.ndarray, block: np.ndarray, lo: int, hi: int, n: int):
    """The host's time (ns) per iteration in the calls ``lo..hi-1`` as a replay runs them
    (``gap``, ``own``, ``block``: its inputs, ``_replay.replay_inputs``): every gap and every
    non-blocking call's own time (a blocking call's time is the GPU's)."""
    if n <= 0 or hi <= lo:
        return 0.0
    own = np.where(block[lo:hi], 0, own[lo:hi])
    return float(gap[lo:hi].sum() + own.sum()) / n


def gpu_busy_ns(tl: Timeline, r: Replayed) -> float:
    """The union (ns) of the busy intervals of the loop's items in replay ``r``, inside its
    measured span, per measured iteration."""
    if r.item_start is None or r.item_end is None:
        return 0.0
    e = r.gpu_edges[r.measured]
    a, b = int(e[0]), int(e[-1])
    s, t = np.clip(r.item_start, a, b), np.clip(r.item_end, a, b)
    keep = (t > s) & (tl.item_op >= 0)
    if not keep.any() or r.iterations <= 0:
        return 0.0
    order = np.argsort(s[keep], kind="stable")
    s, t = s[keep][order], t[keep][order]
    run = np.maximum.accumulate(t)
    new = np.concatenate([[True], s[1:] > run[:-1]])  # a new busy interval starts
    starts, ends = s[new], np.maximum.reduceat(t, np.flatnonzero(new))
    return float((ends - starts).sum()) / r.iterations
