"""Integer columns of an SQLite table read straight from the file's b-tree pages with numpy.

Why: on a big export most of a diagnosis is SQLite formatting millions of integers as text and
numpy parsing them back (:mod:`analysis.trace_ints`). The activity tables are rowid tables of
integers, and SQLite's file format is documented and stable (https://sqlite.org/fileformat.html):
a table is a b-tree whose leaf cells hold a record, a header of serial types followed by the
values, big-endian. Walking the pages of a memory-mapped file and decoding whole columns at once
gives the same integers without either step.

The reader only answers what it can read exactly. It refuses (:class:`Unreadable`, and the
caller falls back to SQL) a file in WAL mode, a page that is not a table b-tree page, a record
whose payload spills onto overflow pages, a record shorter than the table (a column added
later), and a value that is not an integer (a REAL, a text, a blob): SQL then says what it says
about them. Values come in rowid order, as a rowid-range scan returns them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["Pages", "Unreadable"]

_LEAF, _INTERIOR = 0x0D, 0x05
#: Bytes of a value of each one-byte serial type (0 NULL, 1-6 integers, 7 REAL, 8 and 9 the
#: constants 0 and 1, 10-11 reserved; 12+ blobs and texts, even and odd).
_WIDTH = np.array([0, 1, 2, 3, 4, 6, 8, 8, 0, 0, 0, 0], np.int16)
#: Bytes of every one-byte serial type (texts and blobs of up to 57 bytes too).
_WIDTH16 = np.concatenate([_WIDTH, (np.arange(12, 128, dtype=np.int16) - 12) // 2])
#: Right shifts that leave an integer of each serial type of an 8-byte big-endian word.
_SHIFT = np.where(np.arange(128) < 12, 64 - 8 * np.resize(_WIDTH, 128), 0).astype(np.int64)


#: The top bit of each byte of an 8-byte word.
_TOPS = np.uint64(0x8080808080808080)


def _septets(word: np.ndarray, n: int) -> np.ndarray:
    """The low 7 bits of the first ``n`` bytes of big-endian ``word`` (uint64), joined."""
    out = np.zeros(word.size, np.uint64)
    for i in range(n):
        out |= (word >> np.uint64(56 - 8 * i) & np.uint64(0x7F)) << np.uint64(7 * (n - 1 - i))
    return out


class Unreadable(Exception):
    """The pages hold something this reader does not decode exactly: read it with SQL."""


def _ramp(counts: np.ndarray) -> np.ndarray:
    """0..n-1 for each n of ``counts``, concatenated."""
    total = int(counts.sum())
    starts = np.cumsum(counts) - counts
    return np.arange(total, dtype=np.int64) - np.repeat(starts, counts)


class Pages:
    """A read-only view of an SQLite file's pages (``np.memmap``), with views that read an
    8-byte big-endian word or a run of bytes at any offset in one gather."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.data = np.memmap(self.path, np.uint8, mode="r")
        head = bytes(self.data[:100])
        if len(head) < 100 or head[:16] != b"SQLite format 3\x00":
            raise Unreadable(f"{self.path} is not an SQLite file")
        if head[18] != 1 or head[19] != 1:  # 2: WAL, whose pages may be newer than the file's
            raise Unreadable(f"{self.path} is in WAL mode")
        size = int.from_bytes(head[16:18], "big")
        self.page_size = 65536 if size == 1 else size
        self.usable = self.page_size - head[20]
        self.pages = self.data.size // self.page_size
        # the file as 8-byte words starting at every byte (the last 7 bytes start none): as
        # raw bytes ("V8"), which numpy gathers as plain copies, ~40% faster than an unaligned
        # ">i8" view; the gathered words are then aligned for the byte swap
        self._word = np.ndarray((self.data.size - 7,), "V8", self.data, strides=(1,))

    def _runs(self, width: int) -> np.ndarray:
        """The file as runs of ``width`` raw bytes starting at every byte (numpy gathers
        them as plain copies: faster than rows of a 2-D strided view)."""
        return np.ndarray((self.data.size - width + 1,), f"V{width}", self.data, strides=(1,))

    def _be(self, at: np.ndarray, width: int) -> np.ndarray:
        """Unsigned big-endian integers of ``width`` (< 8) bytes at offsets ``at``."""
        return self.words(at) >> (64 - 8 * width) & ((1 << 8 * width) - 1)

    def words(self, at: np.ndarray) -> np.ndarray:
        """The 8 bytes at each offset ``at`` as a big-endian int64 (bytes past the file's end
        read as 0: a caller shifts them away)."""
        if not at.size or at.max() < self._word.size:
            return self._word[at].view(">i8").astype(np.int64)
        end = at >= self._word.size  # within the last 7 bytes: the bytes past the end as 0
        out = self._word[np.where(end, 0, at)].view(">i8").astype(np.int64)
        tail = np.zeros(8 * int(end.sum()), np.uint8).reshape(-1, 8)
        for i, a in enumerate(at[end]):
            rest = self.data[a : a + 8]
            tail[i, : rest.size] = rest
        out[end] = tail.view(">i8").ravel()
        return out

    def _offsets(self, pages: np.ndarray) -> np.ndarray:
        if pages.size and (pages.min() < 2 or pages.max() > self.pages):
            raise Unreadable(f"{self.path}: a page number out of range")
        return (pages - 1) * self.page_size

    def leaves(self, root: int) -> np.ndarray:
        """The leaf pages of the table b-tree rooted at page ``root``, in key order: each level
        expanded at once (every leaf of an SQLite b-tree is at the same depth)."""
        level = np.array([root], np.int64)
        for _ in range(40):
            at = self._offsets(level)
            kind = self.data[at]
            if (kind == _LEAF).all():
                return level
            if not (kind == _INTERIOR).all():
                raise Unreadable(f"{self.path}: page {root}'s tree holds a page of another kind")
            n = self._be(at + 3, 2)
            cells = np.repeat(at, n) + self._be(np.repeat(at + 12, n) + 2 * _ramp(n), 2)
            below = np.empty(int(n.sum()) + level.size, np.int64)
            group = np.arange(level.size)
            below[_ramp(n) + np.repeat(np.cumsum(n) - n + group, n)] = self._be(cells, 4)
            below[np.cumsum(n) + group] = self._be(at + 8, 4)  # the right-most child
            level = below
        raise Unreadable(f"{self.path}: page {root}'s tree is too deep")

    def cell_counts(self, leaves: np.ndarray) -> np.ndarray:
        """The number of cells of each of these leaf pages."""
        return self._be(self._offsets(leaves) + 3, 2)

    def cells(self, leaves: np.ndarray) -> np.ndarray:
        """The file offsets of every cell of these leaf pages, in key order."""
        at = self._offsets(leaves)
        n = self.cell_counts(leaves)
        return np.repeat(at, n) + self._be(np.repeat(at + 8, n) + 2 * _ramp(n), 2)

    def varint(self, at: np.ndarray, values: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """SQLite varints at offsets ``at``: (value, length in bytes); 7 bits a byte, the top
        bit set while more follow, a ninth byte of 8 bits. Each length found at once from
        the 8-byte word's top bits, then each length's values without a per-byte loop
        (``values=False``: the lengths only, the values left 0)."""
        word = self.words(at).view(np.uint64)
        stop = ~word & _TOPS  # the top bits of the bytes that end a varint
        # the first such byte from the top: its bit's position, read off float64's exponent
        # (exact: the bits are 8 apart, so none rounds up to the next)
        size = 8 - (np.frexp(stop.astype(np.float64))[1] - 1) // 8
        size[stop == 0] = 9
        value = np.zeros(at.size, np.uint64)
        if not values:
            return value.view(np.int64), size.astype(np.int64)
        low, high = int(size.min(initial=1)), int(size.max(initial=1))
        for n in range(low, min(high, 8) + 1):
            v = _septets(word, n)
            if low == high:
                value = v
            else:
                np.copyto(value, v, where=size == n)
        if high == 9:
            nine = size == 9
            last = self.data[at[nine] + 8].astype(np.uint64)
            value[nine] = _septets(word[nine], 8) << np.uint64(8) | last
        return value.view(np.int64), size.astype(np.int64)

    def records(
        self, cells: np.ndarray, ncols: int, wanted: list[int], rowids: bool = True
    ) -> tuple[np.ndarray, np.ndarray, dict[int, tuple[np.ndarray, np.ndarray | int]]]:
        """For leaf cells of a table with ``ncols`` columns: (rowids, 0 each where not
        ``rowids``; where each record's values start; and for each column index in ``wanted``
        its serial types and offsets from there: a number where the columns before it have
        one serial type each in these records, else one per record)."""
        if not cells.size:
            empty = np.zeros(0, np.int64)
            return empty, empty, {j: (np.zeros(0, np.uint8), empty) for j in wanted}
        payload, n1 = self.varint(cells)
        rowid, n2 = self.varint(cells + n1, rowids)
        start = cells + n1 + n2
        if (payload > self.usable - 35).any():
            raise Unreadable(f"{self.path}: a record spills onto overflow pages")
        head = self.data[start]
        if not (head == ncols + 1).all():
            # a serial type of more than one byte (a text or blob of 58 bytes or more), or a
            # record shorter than the table (a column added later)
            raise Unreadable(f"{self.path}: a record header this reader does not take")
        upto = ncols if ncols - 1 in wanted else max(wanted, default=-1) + 1
        types = np.zeros((0, start.size), np.uint8)  # row j: column j's serial types
        if upto:
            types = np.ascontiguousarray(
                self._runs(upto)[start + 1].view(np.uint8).reshape(-1, upto).T
            )
        low, high = types.min(axis=1), types.max(axis=1)
        wanted_set, fixed, varied = set(wanted), 0, None  # column j at fixed + varied
        out: dict[int, tuple[np.ndarray, np.ndarray | int]] = {}
        for j in range(upto):
            if j in wanted_set:
                out[j] = (types[j], fixed if varied is None else fixed + varied)
            if low[j] == high[j]:
                fixed += int(_WIDTH16[low[j]])
            else:
                w = _WIDTH16.take(types[j]).astype(np.int64)
                varied = w if varied is None else varied + w
        if upto == ncols:  # the last column ends within the payload
            end = fixed if varied is None else fixed + varied
            if (end + head > payload).any():
                raise Unreadable(f"{self.path}: a record longer than its payload")
        return rowid, start + head, out

    def integers(self, types: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """One column's values from its serial types and file offsets: (int64 values, NULL
        mask or None where there is no NULL); :class:`Unreadable` where one is not an
        integer."""
        low, high = (int(types.min()), int(types.max())) if types.size else (1, 1)
        if high > 9 or (low <= 7 <= high and (types == 7).any()):
            raise Unreadable(f"{self.path}: a value that is not an integer")
        if low == high:  # one serial type, as most stretches of a column have
            if _WIDTH[low] == 0:
                return np.full(types.size, int(low == 9), np.int64), (
                    np.ones(types.size, bool) if low == 0 else None
                )
            value = self.words(at)
            value >>= int(_SHIFT[low])
            return value, None
        value = self.words(at)
        np.right_shift(value, _SHIFT.take(types), out=value)
        small = types >= 8  # the constants 0 and 1 (serial types 8 and 9)
        if small.any():
            np.copyto(value, types == 9, where=small)
        null = types == 0
        if not null.any():
            return value, None
        value[null] = 0
        return value, null
