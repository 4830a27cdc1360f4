"""Bulk integer reads of the big activity tables as numpy arrays (:func:`int_columns`).

Millions of kernels and API calls are read as ``group_concat`` text that numpy parses, in
rowid chunks on parallel read-only connections, instead of one Python tuple per row: the
detectors' reads go through here.
"""

from __future__ import annotations

import os
import re
import sqlite3
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from analysis.trace_db import Trace, TraceError
from analysis.trace_expr import NotHere, parse
from analysis.trace_pages import Pages, Unreadable

__all__ = [
    "INT_COLUMNS_CHUNK",
    "PAGE_READS",
    "PARALLEL_READERS",
    "Pack",
    "id_bits",
    "int_columns",
    "name_bits",
]

#: Rowids per chunk (one SQL scan, one task) in int_columns: ~3 MB of text per column (smaller
#: chunks kept the text in cache and ran ~10% faster than 500,000 on a big export).
INT_COLUMNS_CHUNK = 250_000
#: Threads (each with its own read-only connection) that int_columns reads passes with.
PARALLEL_READERS = max(1, min(16, os.cpu_count() or 1))
#: Whether int_columns decodes a table's pages itself where it can (:func:`_paged`); False
#: always asks SQLite (the tests compare the two).
PAGE_READS = True
#: Leaf pages a page read decodes at a time (4 MB at nsys's 4 KB pages): few enough that the
#: stretch's temporaries stay small, enough that numpy's per-call costs are spread.
PAGES_PER_TASK = 1024

#: One packed pair of int_columns: (high column, low column, bits of the low one).
Pack = tuple[str, str, int]
#: A query's named parameters, and the arrays int_columns gives (name -> int64 array).
Params = Mapping[str, object] | None
Columns = dict[str, np.ndarray]


def int_columns(
    trace: Trace,
    table: str,
    columns: Mapping[str, str],
    where: str = "1",
    params: Mapping[str, object] | None = None,
    *,
    few: bool = False,
    null: int = -1,
    chunk_rows: int = INT_COLUMNS_CHUNK,
    pack: Iterable[Pack] = (),
) -> dict[str, np.ndarray]:
    """Integer columns of the rows of ``table`` (alias ``t``) matching ``where``, as int64 arrays.

    For the large activity tables (millions of kernels and API calls): each chunk of
    ``chunk_rows`` rowids is one SQL scan that folds every column into a ``group_concat`` text,
    which numpy parses, instead of one Python tuple per row (several times faster, and no object
    columns); chunks run on :data:`PARALLEL_READERS` threads with their own read-only
    connections (SQLite works without Python's lock). With ``few=True`` (a selective ``where``:
    syncs, copies) the columns come from one ordinary query instead.
    ``columns`` maps a result name to an SQL expression over ``t`` (``'t.start'``,
    ``"t.nameId IN (3, 5)"``) with integer values; NULL becomes ``null``, so every array has one
    entry per matching row, in rowid order (the order a rowid-range scan returns them); a
    value that is not an integer raises TraceError.
    ``table``, the expressions and ``where`` are SQL text from this package, never caller input;
    values go in ``params``. An empty or missing table gives empty arrays.
    ``pack`` pairs columns into one SQL value, ``high * 2**bits + low``, split again after
    parsing: each value formatted and parsed costs about as much as reading the row, so a
    pair read as one is cheaper. The caller guarantees ``0 <= low < 2**bits`` from a bound
    known without a scan (a flag, a string id under StringIds' largest); a ``high`` too large
    makes SQLite overflow into a REAL, which is refused, never read wrong.
    """
    empty = {name: np.zeros(0, np.int64) for name in columns}
    if not trace.has(table) or not columns:
        return empty
    values = {name: _or_null(trace, table, expr, null) for name, expr in columns.items()}
    pack = tuple(pack)
    plain = dict(values)  # a page read evaluates the pairs apart (_paged checks the packing)
    for high, low, bits in pack:
        values[high] = f"({values[high]}) * {1 << bits} + ({values.pop(low)})"
    if few:
        sql = (
            f"SELECT {', '.join(values.values())} FROM {table} AS t WHERE {where} ORDER BY t.rowid"
        )
        return _unpack(_few_rows(trace, table, sql, params, list(values)), pack, columns)
    out = _paged(trace, table, plain, where, params, pack) if PAGE_READS else None
    if out is None:
        out = _chunked(trace, table, values, where, params, chunk_rows, pack)
    return empty if out is None else {name: out[name] for name in columns}


def _few_rows(trace: Trace, table: str, sql: str, params: Params, names: list[str]) -> Columns:
    """:func:`int_columns`' ``names`` from one ordinary query (``sql``: a selective one)."""
    rows = trace.query(sql, params)[1]
    if any(type(v) is not int for row in rows for v in row):
        raise TraceError(trace.path, f"{table} holds values that are not integers")
    a = np.array(rows, dtype=np.int64).reshape(len(rows), len(names))
    return {name: a[:, i].copy() for i, name in enumerate(names)}


def _chunked(
    trace: Trace,
    table: str,
    values: Mapping[str, str],
    where: str,
    params: Mapping[str, object] | None,
    chunk_rows: int,
    pack: tuple[Pack, ...] = (),
) -> dict[str, np.ndarray] | None:
    """:func:`int_columns`' columns read chunk by chunk of rowids on parallel readers, each
    chunk one scan folding every column into a ``group_concat`` text and its ``pack`` pairs
    split on the reader (in cache, beside the other readers); None for an empty table."""
    # two subqueries: SQLite answers a lone MIN or MAX from the b-tree's edge, but a query with
    # both aggregates scans the whole table
    _, rows = trace.query(
        f"SELECT (SELECT MIN(rowid) FROM {table}), (SELECT MAX(rowid) FROM {table})"
    )
    first, last = rows[0]
    if first is None:
        return None
    tasks = list(range(int(first), int(last) + 1, chunk_rows))
    # One scan per chunk with one group_concat per column: the aggregates see the rows in the
    # same order (a rowid-range search visits them in rowid order), and one scan with several
    # aggregates costs far less than a scan per column or a per-row string concatenation.
    # As BLOBs: bytes for numpy to parse, without decoding them into str first.
    # COUNT(*) says how many values each text holds (cheaper than counting its separators)
    aggs = ", ".join(f"CAST(group_concat({v}, ' ') AS BLOB)" for v in values.values())
    sql = (
        f"SELECT COUNT(*), {aggs} FROM {table} AS t "
        f"WHERE t.rowid >= :_a AND t.rowid < :_b AND ({where})"
    )
    # Each chunk's arrays are kept as parsed and split; one concatenation per column joins
    # them (the reader threads parse in parallel, and nothing is copied twice).
    parts: list[dict[str, np.ndarray]] = [{} for _ in tasks]

    def run(a: int, conn: sqlite3.Connection | None) -> None:
        texts = trace.query(sql, {**(params or {}), "_a": a, "_b": a + chunk_rows}, conn=conn)
        n, *found = texts[1][0]
        arrays = _parse_ints(trace, table, list(values), found, n)
        cols = dict(zip(values, arrays, strict=True))
        parts[(a - tasks[0]) // chunk_rows] = _unpack(cols, pack)

    _run_parallel(trace, run, tasks)
    return {
        name: parts[0][name] if len(parts) == 1 else np.concatenate([p[name] for p in parts])
        for name in parts[0]
    }


#: Per trace: its file's :class:`Pages` (None: not one they read) and each table's layout.
_PAGES: weakref.WeakKeyDictionary[Trace, tuple[Pages | None, dict]] = weakref.WeakKeyDictionary()
_PAGES_LOCK = threading.Lock()


#: What a page read needs of a table: the file's pages, the column names in record order, the
#: INTEGER PRIMARY KEY column if any (SQLite stores it as the rowid, the record holds NULL)
#: and the leaf pages.
_Layout = tuple[Pages, list[str], str | None, np.ndarray]


def _table_pages(trace: Trace, table: str) -> _Layout | None:
    """``table``'s :data:`_Layout`; None where the table is not a rowid table of the file's
    own (a view, a virtual table, WITHOUT ROWID) or the file is not one :class:`Pages` reads.
    Cached per trace."""
    with _PAGES_LOCK:
        if trace not in _PAGES:
            _PAGES[trace] = (_open_pages(trace), {})
        pages, known = _PAGES[trace]
        if table not in known:
            known[table] = None if pages is None else _layout(trace, table, pages)
        return known[table]


def _open_pages(trace: Trace) -> Pages | None:
    try:
        return Pages(trace.path) if trace.path.is_file() else None
    except (Unreadable, OSError, ValueError):
        return None


def _layout(trace: Trace, table: str, pages: Pages) -> _Layout | None:
    sql = "SELECT type, rootpage, sql FROM sqlite_master WHERE name = :name"
    rows = trace.query(sql, {"name": table})[1]
    if len(rows) != 1:
        return None
    kind, root, sql = rows[0]
    if kind != "table" or not root or "WITHOUT ROWID" in (sql or "").upper():
        return None
    info = trace.query(f'PRAGMA table_info("{table}")')[1]
    keys = [r for r in info if r[5]]
    names = [r[1] for r in info]
    alias = keys[0][1] if len(keys) == 1 and str(keys[0][2]).upper() == "INTEGER" else None
    try:
        return pages, names, alias, pages.leaves(int(root))
    except Unreadable:
        return None


def _paged(
    trace: Trace,
    table: str,
    values: Mapping[str, str],
    where: str,
    params: Params,
    pack: tuple[Pack, ...],
) -> dict[str, np.ndarray] | None:
    """:func:`_chunked`'s answer computed from the table's pages (:mod:`analysis.trace_pages`)
    and the same SQL evaluated with numpy (:mod:`analysis.trace_expr`), :data:`PAGES_PER_TASK`
    leaf pages at a time on the calling thread (the big reads already run beside each other:
    more threads here only fought over the two cores); ``values`` unpacked (a pair is cheaper
    read apart than packed and split here: :func:`_check_packs`). None where either cannot
    give SQLite's answer exactly (the caller then asks SQLite)."""
    layout = _table_pages(trace, table)
    if layout is None:
        return None
    pages, names, alias, leaves = layout
    try:
        cond = parse(where)
        exprs = {name: parse(sql) for name, sql in values.items()}
    except NotHere:
        return None
    need = set(cond.columns).union(*(e.columns for e in exprs.values()))
    if not need <= set(names) | {"rowid"}:
        return None
    subs = {q for e in (cond, *exprs.values()) for q in e.subqueries}
    try:
        lists = {q: _values_of(trace, q) for q in subs}
    except NotHere:
        return None
    index = {n: i for i, n in enumerate(names) if n in need and n not in ("rowid", alias)}
    rowids = bool(need & {"rowid", alias})

    def part(first: int) -> dict[str, np.ndarray]:
        cells = pages.cells(leaves[first : first + PAGES_PER_TASK])
        rowid, base, found = pages.records(cells, len(names), sorted(index.values()), rowids)
        cols: dict = {"rowid": (rowid, None)}
        if alias is not None:
            cols[alias] = cols["rowid"]
        for name, i in index.items():  # the condition's columns first, the others at its rows
            if name in cond.columns:
                cols[name] = _column(pages, found[i], base, None)
        keep = cond.mask(cols, params or {}, lists)
        kept = None if keep.all() else np.flatnonzero(keep)
        if kept is not None:
            cols = {n: (v[kept], None if m is None else m[kept]) for n, (v, m) in cols.items()}
            base = base[kept]
        for name, i in index.items():
            if name not in cols:
                cols[name] = _column(pages, found[i], base, kept)
        out = {}
        for name, e in exprs.items():
            v, null = e.eval(cols, params or {}, lists)
            if null is not None and null.any():  # as group_concat would leave it short
                raise RuntimeError(f"int_columns: {table}.{name} came back short")
            out[name] = v
        _check_packs(out, pack)
        return out

    # each stretch written into arrays sized for every cell: its temporaries are freed and
    # reused by the next, where a list of stretches to join kept them all (fresh memory)
    total, out, filled = int(pages.cell_counts(leaves).sum()), {}, 0
    try:
        for first in range(0, leaves.size, PAGES_PER_TASK):
            got = part(first)
            out = out or {name: np.empty(total, np.int64) for name in got}
            n = next(iter(got.values())).size
            for name, v in got.items():
                out[name][filled : filled + n] = v
            filled += n
    except (Unreadable, NotHere):
        return None
    if filled < total // 2:  # a selective read: give the rest back
        return {name: v[:filled].copy() for name, v in out.items()}
    return {name: v[:filled] for name, v in out.items()}


def _column(
    pages: Pages,
    found: tuple[np.ndarray, np.ndarray | int],
    base: np.ndarray,
    kept: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """One column's values (:meth:`Pages.integers`) from its serial types and offsets as
    :meth:`Pages.records` found them, at the rows ``kept`` only (None: every row; ``base``:
    where those rows' values start)."""
    types, at = found
    if kept is None:
        return pages.integers(types, base + at)
    return pages.integers(types[kept], base + (at if np.ndim(at) == 0 else at[kept]))


def _check_packs(cols: dict[str, np.ndarray], pack: tuple[Pack, ...]) -> None:
    """NotHere unless each pair, packed as SQL packs it (``high * 2**bits + low``), stays in
    int64 with ``0 <= low < 2**bits`` in every row: then splitting the packed value gives the
    pair back exactly, and the page read's unpacked pair is SQL's answer (else SQL gives its
    own, or its error)."""
    for high, low, bits in pack:
        h, lo = cols[high], cols[low]
        if not h.size:
            continue
        lmin, lmax = int(lo.min()), int(lo.max())
        top, bottom = int(h.max()) * (1 << bits) + lmax, int(h.min()) * (1 << bits)
        if lmin < 0 or lmax >= 1 << bits or top >= 2**63 or bottom < -(2**63):
            raise NotHere(f"{high} and {low} do not pack in {bits} bits")


def _values_of(trace: Trace, sql: str) -> np.ndarray:
    """The integer values of an ``IN (SELECT ...)`` (NotHere where one is not an integer)."""
    rows = trace.query(sql)[1]
    vals = [r[0] for r in rows if r[0] is not None]
    if len(vals) < len(rows) or any(type(v) is not int for v in vals):
        raise NotHere(f"{sql} holds NULLs or values that are not integers")
    return np.unique(np.array(vals, np.int64))


def _unpack(
    cols: dict[str, np.ndarray], pack: tuple[Pack, ...], order: Iterable[str] | None = None
) -> dict[str, np.ndarray]:
    """Split the pairs of :func:`int_columns`' ``pack`` (in place), columns in ``order`` (as
    they are, the lows last, without one)."""
    for high, low, bits in pack:
        v = cols[high]
        cols[low] = np.bitwise_and(v, (1 << bits) - 1)
        cols[high] = np.right_shift(v, bits, out=v if v.flags.writeable else None)
    return cols if order is None else {name: cols[name] for name in order}


def _parse_ints(
    trace: Trace, table: str, names: list[str], texts: list[bytes | None], rows: int
) -> list[np.ndarray]:
    """The space-separated integers of each text, one array per column, ``rows`` in each: a
    value numpy cannot parse as one (a REAL, a text) raises, and an empty text value (which
    parses as nothing) leaves the array short."""
    arrays = []
    for name, text in zip(names, texts, strict=True):
        bad = TraceError(trace.path, f"{table}.{name} holds values that are not integers")
        try:
            arr = np.fromstring(text or b"", dtype=np.int64, sep=" ")
        except ValueError as exc:
            raise bad from exc
        if arr.size != rows:
            if arr.size < rows and (text is None or arr.size == text.count(b" ") + 1):
                # NULLs slipped through: a bug, not the file
                raise RuntimeError(f"int_columns: {table}.{name} came back short")
            raise bad
        arrays.append(arr)
    return arrays


def _run_parallel(
    trace: Trace, run: Callable[[int, sqlite3.Connection | None], None], tasks: list[int]
) -> None:
    """``run(task, connection)`` for every task: on :data:`PARALLEL_READERS` threads, each with
    a read-only connection of its own (SQLite works without Python's lock), or on the main
    connection when one thread is all there is."""
    workers = min(len(tasks), PARALLEL_READERS)
    if workers <= 1:
        for a in tasks:
            run(a, None)
        return
    local = threading.local()
    opened: list[sqlite3.Connection] = []
    lock = threading.Lock()

    def work(a: int) -> None:
        conn = getattr(local, "conn", None)
        if conn is None:
            conn = local.conn = trace.reader()
            with lock:
                opened.append(conn)
        run(a, conn)

    try:
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(work, tasks))
    finally:
        for conn in opened:
            conn.close()


_COLUMN_REF = re.compile(r't\.(?:"(\w+)"|(\w+))')


def _or_null(trace: Trace, table: str, expr: str, null: int) -> str:
    """``expr`` with NULL replaced by ``null``; as is where it cannot be NULL (NOT NULL columns
    and the rowid, alone or added and subtracted: ``t."end" - t.start``), which spares SQLite a
    COALESCE per row on the big tables."""
    names = [a or b for a, b in _COLUMN_REF.findall(expr)]
    rest = _COLUMN_REF.sub("", expr)
    safe = trace.not_null(table) | ({"rowid"} - trace.columns(table))  # rowid: the b-tree key
    if names and set(names) <= safe and not rest.strip(" +-"):
        return expr
    return f"COALESCE({expr}, {int(null)})"


def id_bits(trace: Trace, table: str, column: str = "rowid") -> int | None:
    """Bits that hold every value of an indexed key, ``MAX(column)`` of ``table`` read from the
    b-tree's edge (no scan): the bound :func:`int_columns`' ``pack`` needs. None where the
    table is missing or empty. ``table`` and ``column`` are names from this package."""
    if not trace.has(table):
        return None
    top = trace.query(f"SELECT MAX({column}) FROM {table}")[1][0][0]
    return int(top).bit_length() if isinstance(top, int) and top >= 0 else None


def name_bits(trace: Trace, table: str, column: str) -> int | None:
    """Bits that hold ``table.column``, a StringIds id, where the column cannot be NULL (the
    bound :func:`int_columns`' ``pack`` needs for a name id); None where it can or is unknown."""
    if column not in trace.not_null(table):
        return None
    return id_bits(trace, "StringIds", "id")
