"""Helpers on the column dicts the detectors read (name -> aligned numpy array): row
selection, time order and first-occurrence lookup tables, each with a fast path for the
already-sorted rows SQLite usually returns."""

from __future__ import annotations

import numpy as np

__all__ = [
    "by_start",
    "counted",
    "distinct",
    "few_unique",
    "first_values",
    "lookup",
    "member",
    "process_of",
    "rows_where",
    "search",
    "top",
]


def rows_where(cols: dict[str, np.ndarray], mask: np.ndarray) -> dict[str, np.ndarray]:
    """The rows of ``cols`` where ``mask`` holds: views where they are one run (the usual case:
    all rows, or all but a few at either end), copies otherwise."""
    idx = np.flatnonzero(mask)
    if idx.size and idx[-1] - idx[0] + 1 == idx.size:
        return {k: v[idx[0] : idx[-1] + 1] for k, v in cols.items()}
    return {k: v[idx] for k, v in cols.items()}


def _lex_order(start: np.ndarray, end: np.ndarray) -> np.ndarray | None:
    """np.lexsort((end, start)), or None where the rows are in that order already."""
    if start.size < 2:
        return None
    ds = start[1:] - start[:-1]
    if ((ds > 0) | ((ds == 0) & (end[1:] >= end[:-1]))).all():
        return None
    return np.lexsort((end, start))


def _increasing(x: np.ndarray) -> bool:
    """Whether ``x`` is strictly increasing (correlation ids in start order usually are)."""
    return x.size < 2 or bool((x[1:] > x[:-1]).all())


def _sorted(x: np.ndarray) -> bool:
    """Whether ``x`` is in non-decreasing order."""
    return x.size < 2 or bool((x[1:] >= x[:-1]).all())


def by_start(cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``cols`` sorted by ``start``, ties in their order (a stable sort); left as they are
    where SQLite returned them sorted (nsys writes most tables in time order)."""
    s = cols["start"]
    if _sorted(s):
        return cols
    order = np.argsort(s, kind="stable")
    return {k: v[order] for k, v in cols.items()}


def lookup(keys: np.ndarray, values: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mask of ``x`` found in the sorted ``keys``, the matching ``values`` (of the first of equal
    keys), aligned with ``x``: garbage where not found)."""
    if keys.size == 0:
        return np.zeros(x.shape, bool), np.zeros(x.shape, values.dtype)
    pos = search(keys, x)
    np.minimum(pos, keys.size - 1, out=pos)  # never negative
    return keys[pos] == x, values[pos]


#: Values per block of :func:`search` (a block's keys stay in cache).
_SEARCH_BLOCK = 8192


def search(keys: np.ndarray, x: np.ndarray, side: str = "left") -> np.ndarray:
    """``np.searchsorted(keys, x, side)``; where millions of ``x`` come sorted (correlation ids
    and times in time order), block by block, each searching only the keys between its first
    value's place and the next block's: a binary search through millions of keys misses the
    cache at each step, one through a block's few thousand does not."""
    x = np.asarray(x)
    if x.ndim != 1 or x.size < 8 * _SEARCH_BLOCK or not _sorted(x):
        return np.searchsorted(keys, x, side=side)
    edges = [*np.searchsorted(keys, x[::_SEARCH_BLOCK], side=side).tolist(), keys.size]
    out = np.empty(x.size, np.intp)
    for i, k0 in enumerate(edges[:-1]):  # block i's places lie in [edges[i], edges[i + 1]]
        a = i * _SEARCH_BLOCK
        found = np.searchsorted(keys[k0 : edges[i + 1]], x[a : a + _SEARCH_BLOCK], side=side)
        np.add(found, k0, out=out[a : a + _SEARCH_BLOCK])
    return out


#: Up to this many keys, :func:`member` tests each with one comparison over ``x``.
_FEW_KEYS = 8


def member(x: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """``np.isin(x, keys)`` for integer ids, by one sort of ``keys`` (none when sorted) and a
    binary search: numpy 2's isin hashed 5 M correlation ids for 5.3 s where this takes 0.5;
    a few keys (the loop's threads, a few name ids) by one comparison each, faster still."""
    keys = np.asarray(keys)
    x = np.asarray(x)
    if keys.size <= _FEW_KEYS:
        out = np.zeros(x.shape, bool)
        for k in keys.tolist():
            out |= x == k
        return out
    if not _sorted(keys):
        keys = np.sort(keys)
    pos = search(keys, x)  # :func:`lookup`'s mask alone (its values would be the keys again)
    np.minimum(pos, keys.size - 1, out=pos)
    if keys.dtype != pos.dtype:
        return keys[pos] == x
    return np.take(keys, pos, out=pos, mode="clip") == x  # the places in range already


def counted(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(x, return_counts=True)`` of integers spanning a small range (stream ids, the
    global thread ids of a few processes): one count over the range, no sort of millions."""
    x = np.asarray(x)
    lo = int(x.min()) if x.size else 0
    span = int(x.max()) - lo + 1 if x.size else 0
    if x.size == 0 or x.dtype.kind != "i" or span > 4 * x.size + (1 << 20):
        return np.unique(x, return_counts=True)
    n = np.bincount(x - lo if lo else x, minlength=span)
    present = np.flatnonzero(n)
    return (present + lo).astype(x.dtype), n[present]


def few_unique(x: np.ndarray) -> np.ndarray:
    """``np.unique(x)`` of non-negative integers with few distinct small values (stream ids,
    thread slots): a bincount instead of sorting or hashing millions of values."""
    x = np.asarray(x)
    if x.size == 0 or x.min() < 0 or x.max() > 1 << 16:
        return np.unique(x)
    return np.flatnonzero(np.bincount(x)).astype(x.dtype)


#: nsys's global thread and process ids hold the process id in bits 24-47.
PID_MASK = 0xFFFFFF


def process_of(global_id: int | np.ndarray) -> int | np.ndarray:
    """The process id in nsys's global thread or process id(s) (bits 24-47)."""
    if isinstance(global_id, (int, np.integer)):
        return (int(global_id) >> 24) & PID_MASK
    out = np.right_shift(np.asarray(global_id, np.int64), 24)
    return np.bitwise_and(out, PID_MASK, out=out)


def distinct(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(ids, return_inverse=True)`` of integer ids (name ids, string ids): by a count
    over their range where it is small, as StringIds' ids are (no sort of millions of calls)."""
    ids = np.asarray(ids)
    lo = int(ids.min()) if ids.size else 0
    span = int(ids.max()) - lo + 1 if ids.size else 0
    if ids.size == 0 or span > 4 * ids.size + (1 << 20):
        uniq, inv = np.unique(ids, return_inverse=True)
        return uniq, inv.reshape(-1).astype(np.int64)
    present = np.flatnonzero(np.bincount(ids - lo, minlength=span))
    lut = np.zeros(span, np.int64)
    lut[present] = np.arange(present.size)
    return (present + lo).astype(ids.dtype), lut[ids - lo]


def first_values(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct ``keys``, the ``values`` at each one's first occurrence)."""
    if _increasing(keys):
        return keys, values
    uniq, first = np.unique(keys, return_index=True)
    return uniq, values[first]


def top(x: np.ndarray, k: int = 3) -> np.ndarray:
    """``np.argsort(-x, kind="stable")[:k]``: the indices of the ``k`` largest values, ties in
    index order, without sorting millions of values for three."""
    if x.size <= k:
        return np.argsort(-x, kind="stable")
    kth = np.partition(x, x.size - k)[x.size - k]
    cand = np.flatnonzero(x >= kth)
    return cand[np.argsort(-x[cand], kind="stable")[:k]]
