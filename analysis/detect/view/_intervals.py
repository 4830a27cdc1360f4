"""Interval arithmetic on numpy arrays: unions, gaps, differences and overlaps.

The detectors measure time as lengths of unions of intervals (GPU busy, host blocked, waits),
and these run vectorised over millions of kernels, so none of them loops per interval in
Python. A *union* is sorted and disjoint, as :func:`union` returns it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "covered",
    "difference",
    "gaps",
    "length",
    "overlap_any",
    "overlap_each",
    "overlap_total",
    "overlap_totals",
    "union",
]


def union(starts: Any, ends: Any) -> tuple[np.ndarray, np.ndarray]:
    """Merge intervals into sorted, disjoint ones."""
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    keep = e > s
    if not keep.all():
        s, e = s[keep], e[keep]
    if s.size == 0:
        return s, e
    if not bool((s[1:] >= s[:-1]).all()):  # GPU activity comes sorted already
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
    run_end = np.maximum.accumulate(e)
    new = s[1:] > run_end[:-1]
    if new.all():  # disjoint already (one thread's calls, one after another): ends as they are
        return (s if s is not starts and s.base is None else s.copy()), run_end
    last = np.flatnonzero(new)  # the groups' last members but the final group's
    # a group's end is the running maximum at its last member (earlier groups end before it)
    ends = np.empty(last.size + 1, np.int64)
    np.take(run_end, last, out=ends[:-1])
    ends[-1] = run_end[-1]
    starts = np.empty(last.size + 1, np.int64)  # the next member starts a group
    starts[0] = s[0]
    last += 1
    np.take(s, last, out=starts[1:])
    return starts, ends


def gaps(s: np.ndarray, e: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """The holes of a disjoint sorted union within [lo, hi] (window edges included)."""
    gs = np.concatenate([[lo], e])
    ge = np.concatenate([s, [hi]])
    keep = ge > gs
    if keep[1:-1].all():  # a union's inner holes are never empty: only its edges can be
        a, b = int(not keep[0]), gs.size - int(not keep[-1])
        return gs[a:b], ge[a:b]
    return gs[keep], ge[keep]


def difference(
    s: np.ndarray, e: np.ndarray, bs: np.ndarray, be: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The disjoint sorted union (s, e) less the disjoint sorted union (bs, be)."""
    if s.size == 0 or bs.size == 0:
        return s, e
    pts = np.unique(np.concatenate([s, e, bs, be]))
    lo, hi = pts[:-1], pts[1:]
    mid = lo + (hi - lo) // 2

    def inside(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        i = np.searchsorted(a, mid, side="right") - 1
        return (i >= 0) & (mid < b[np.maximum(i, 0)])

    keep = inside(s, e) & ~inside(bs, be) & (hi > lo)
    return union(lo[keep], hi[keep])


def covered(bs: np.ndarray, be: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Length of the disjoint sorted union (bs, be) lying before each point x."""
    x = np.asarray(x, dtype=np.int64)
    if bs.size == 0:
        return np.zeros(x.shape, dtype=np.int64)
    return _covered(bs, be, np.concatenate([[0], np.cumsum(be - bs)]), x)


def _covered(bs: np.ndarray, be: np.ndarray, cum: np.ndarray, x: np.ndarray) -> np.ndarray:
    """:func:`covered` with the union's prefix lengths ``cum`` given: built in one array, in
    place (millions of points: each temporary is fresh memory the kernel must zero)."""
    # the index of the interval at or before each x, plus one
    j = np.asarray(np.searchsorted(bs, x, side="right"))
    before = j == 0  # x before the union's first interval: nothing covered
    j -= 1
    j[before] = 0
    out = np.asarray(np.minimum(x, be[j]))
    out -= bs[j]
    out += cum[j]
    out[before] = 0
    return out


def overlap_total(s: np.ndarray, e: np.ndarray, bs: np.ndarray, be: np.ndarray) -> int:
    """``overlap_each(s, e, bs, be).sum()`` for two disjoint sorted unions: the length of their
    intersection, which is symmetric, so the fewer intervals are the ones looked up."""
    if s.size > bs.size:
        s, e, bs, be = bs, be, s, e
    return int(overlap_each(s, e, bs, be).sum())


def overlap_totals(
    s: np.ndarray, e: np.ndarray, unions: list[tuple[np.ndarray, np.ndarray]]
) -> list[int]:
    """``[overlap_total(s, e, bs, be) for bs, be in unions]``, the prefix lengths of the union
    (s, e) computed once for all those with fewer intervals (the GPU's idle gaps against the
    host's few blocks of each kind: millions of gaps, summed once instead of once a kind)."""
    cum = None
    out = []
    for bs, be in unions:
        if bs.size >= s.size:
            out.append(overlap_total(s, e, bs, be))
            continue
        if cum is None:
            cum = _prefix(s, e)
        bs, be = np.asarray(bs, dtype=np.int64), np.asarray(be, dtype=np.int64)
        out.append(int((_covered(s, e, cum, be) - _covered(s, e, cum, bs)).sum()))
    return out


def overlap_any(s: np.ndarray, e: np.ndarray, bs: np.ndarray, be: np.ndarray) -> np.ndarray:
    """``overlap_each(s, e, bs, be) > 0`` for two disjoint sorted unions, in time linear in
    ``s`` and small in ``bs``: each (bs, be) marks the run of (s, e) it overlaps."""
    first = np.searchsorted(e, bs, side="right")  # first interval ending after bs
    stop = np.searchsorted(s, be, side="left")  # past the last interval starting before be
    ok = first < stop
    marks = np.zeros(s.size + 1, np.int64)
    np.add.at(marks, first[ok], 1)
    np.add.at(marks, stop[ok], -1)
    return np.cumsum(marks[:-1], out=marks[:-1]) > 0  # a running count: in place


def overlap_each(s: np.ndarray, e: np.ndarray, bs: np.ndarray, be: np.ndarray) -> np.ndarray:
    """For each interval (s, e), how much of it the disjoint sorted union (bs, be) covers."""
    s, e = np.asarray(s, dtype=np.int64), np.asarray(e, dtype=np.int64)
    if bs.size == 0:
        return np.zeros(s.shape, dtype=np.int64)
    cum = _prefix(bs, be)
    out = _covered(bs, be, cum, e)
    if out.ndim == 0:
        return out - _covered(bs, be, cum, s)
    out -= _covered(bs, be, cum, s)
    return out


def _prefix(bs: np.ndarray, be: np.ndarray) -> np.ndarray:
    """``np.concatenate([[0], np.cumsum(be - bs)])``, the union's prefix lengths: in one array
    where both are int64 (a union of millions of intervals)."""
    if bs.dtype != np.int64 or be.dtype != np.int64:
        return np.concatenate([[0], np.cumsum(be - bs)])
    cum = np.empty(bs.size + 1, np.int64)
    cum[0] = 0
    np.subtract(be, bs, out=cum[1:])
    np.cumsum(cum[1:], out=cum[1:])
    return cum


def length(s: np.ndarray, e: np.ndarray) -> int:
    """Total length of intervals (of a union: the time it covers)."""
    s, e = np.asarray(s), np.asarray(e)
    if s.dtype == e.dtype == np.int64:  # the same sum modulo 2**64: no array of differences
        return (int(e.sum()) - int(s.sum()) + (1 << 63)) % (1 << 64) - (1 << 63)
    return int((e - s).sum())
