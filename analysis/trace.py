"""Named, tested SQL over an Nsight Systems SQLite export, returning typed pandas DataFrames.

One function per table, Holistic-Trace-Analysis style: tidy frames, units in column names
(``start_ns``, ``duration_ns``, ``bytes``) and joins done in SQL. The queries live in
``analysis/sql/*.sql``; where nsys 2022.4 and 2025.3 exports differ (metadata table name, optional
columns, enum tables without ``label``) the Python side checks ``sqlite_master`` and
``PRAGMA table_info`` and fills a placeholder of the query with a table name or column expression
from a fixed list, never with caller input.

nsys exports tables lazily (only those with data), so a missing activity table yields an empty
frame with the same columns and dtypes as a full one. A file that is not a readable nsys export
raises :class:`TraceError` instead: it never comes back as an empty frame.
"""

from __future__ import annotations

import lzma
import os
import re
import shutil
import sqlite3
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from importlib import resources
from pathlib import Path
from types import TracebackType

import numpy as np
import pandas as pd

__all__ = [
    "ACTIVITY_TABLES",
    "CUDA_API",
    "GPU_INFO",
    "KERNELS",
    "MEMCPY",
    "MEMSET",
    "NVTX_RANGES",
    "OSRT",
    "STEP_RANGES",
    "SYNC_EVENTS",
    "THREADS",
    "Pack",
    "Trace",
    "TraceError",
    "api_base_name",
    "api_category",
    "cuda_api",
    "enum_table",
    "gpu_info",
    "id_bits",
    "int_columns",
    "kernels",
    "memcpy",
    "memset",
    "name_bits",
    "nsys_version",
    "nvtx_ranges",
    "open_trace",
    "osrt",
    "step_ranges",
    "sync_events",
    "tables",
    "threads",
    "window",
]

# --- column schemas ----------------------------------------------------------------------------
# Columns that nsys declares NOT NULL are plain numpy ints; columns that can be NULL in some export
# (ids, correlation, optional columns) are pandas' nullable Int64. Text is the "string" dtype.
I64 = "int64"
NI64 = "Int64"
F64 = "float64"
STR = "string"
BOOL = "boolean"

KERNELS: dict[str, str] = {
    "start_ns": I64,
    "end_ns": I64,
    "duration_ns": I64,
    "device_id": NI64,
    "stream_id": NI64,
    "context_id": NI64,
    "correlation_id": NI64,
    "pid": NI64,
    "global_pid": NI64,
    "name": STR,
    "short_name": STR,
    "grid_x": NI64,
    "grid_y": NI64,
    "grid_z": NI64,
    "block_x": NI64,
    "block_y": NI64,
    "block_z": NI64,
    "registers_per_thread": NI64,
    "static_shared_bytes": NI64,
    "dynamic_shared_bytes": NI64,
    "graph_node_id": NI64,
}

MEMCPY: dict[str, str] = {
    "start_ns": I64,
    "end_ns": I64,
    "duration_ns": I64,
    "bytes": I64,
    "copy_kind": STR,
    "direction": STR,
    "src_kind": STR,
    "dst_kind": STR,
    "pageable": BOOL,
    "device_id": NI64,
    "stream_id": NI64,
    "context_id": NI64,
    "correlation_id": NI64,
    "pid": NI64,
    "global_pid": NI64,
    "graph_node_id": NI64,
    "gbps": F64,
}

MEMSET: dict[str, str] = {
    "start_ns": I64,
    "end_ns": I64,
    "duration_ns": I64,
    "bytes": I64,
    "value": NI64,
    "mem_kind": STR,
    "device_id": NI64,
    "stream_id": NI64,
    "context_id": NI64,
    "correlation_id": NI64,
    "pid": NI64,
    "global_pid": NI64,
    "graph_node_id": NI64,
}

CUDA_API: dict[str, str] = {
    "start_ns": I64,
    "end_ns": I64,
    "duration_ns": I64,
    "name": STR,
    "base_name": STR,
    "category": STR,
    "api": STR,
    "correlation_id": NI64,
    "pid": NI64,
    "tid": NI64,
    "global_tid": NI64,
    "return_value": NI64,
}

SYNC_EVENTS: dict[str, str] = {
    "start_ns": I64,
    "end_ns": I64,
    "duration_ns": I64,
    "sync_type": STR,
    "device_id": NI64,
    "stream_id": NI64,
    "context_id": NI64,
    "correlation_id": NI64,
    "event_id": NI64,
    "pid": NI64,
    "global_pid": NI64,
}

NVTX_RANGES: dict[str, str] = {
    "start_ns": I64,
    "end_ns": NI64,  # a range still open when the capture stopped has no end
    "duration_ns": NI64,
    "text": STR,
    "domain": STR,
    "range_type": STR,
    "pid": NI64,
    "tid": NI64,
    "global_tid": NI64,
    "thread_name": STR,
    "domain_id": NI64,
    "category": NI64,
    "depth": NI64,
}

STEP_RANGES: dict[str, str] = {
    "step_index": I64,
    **{k: v for k, v in NVTX_RANGES.items() if k != "depth"},
}

OSRT: dict[str, str] = {
    "start_ns": I64,
    "end_ns": I64,
    "duration_ns": I64,
    "name": STR,
    "pid": NI64,
    "tid": NI64,
    "global_tid": NI64,
    "return_value": NI64,
    "nesting_level": NI64,
}

THREADS: dict[str, str] = {
    "global_tid": NI64,
    "pid": NI64,
    "tid": NI64,
    "thread_name": STR,
    "process_name": STR,
}

GPU_INFO: dict[str, str] = {
    "device_id": NI64,
    "cuda_device": NI64,
    "name": STR,
    "chip_name": STR,
    "bus_location": STR,
    "uuid": STR,
    "total_memory_bytes": NI64,
    "memory_bandwidth_bytes_per_s": NI64,
    "l2_cache_bytes": NI64,
    "clock_rate_hz": NI64,
    "sm_count": NI64,
    "compute_major": NI64,
    "compute_minor": NI64,
    "async_engines": NI64,
    "threads_per_warp": NI64,
}

#: Tables whose rows are timed activity (start, end); window() spans them when there is no
#: `measure` range.
ACTIVITY_TABLES = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "NVTX_EVENTS",
    "OSRT_API",
)

_SQLITE_MAGIC = b"SQLite format 3\x00"


class TraceError(Exception):
    """The file is not a readable nsys SQLite export (missing, not SQLite, truncated, corrupt)."""


class Trace:
    """A read-only connection to one nsys SQLite export, with cached schema look-ups.

    Use :func:`open_trace` to make one; it closes with ``close()`` or as a context manager.
    """

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path = path
        self.conn = conn
        self._tables: frozenset[str] | None = None
        self._columns: dict[str, frozenset[str]] = {}
        self._not_null: dict[str, frozenset[str]] = {}
        self._steps: dict[str, pd.DataFrame] = {}  # step_ranges by name: read once

    def __enter__(self) -> Trace:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Trace({str(self.path)!r})"

    def close(self) -> None:
        """Close the SQLite connection; the Trace is unusable afterwards."""
        self.conn.close()

    def query(
        self,
        sql: str,
        params: Mapping[str, object] | None = None,
        *,
        conn: sqlite3.Connection | None = None,
    ) -> tuple[list[str], list[tuple[object, ...]]]:
        """Run SQL and fetch everything, turning SQLite's corruption errors into TraceError.

        Corruption past the first page only shows when a query reads it, so every query goes
        through here and an unreadable file can never come back as an empty frame. ``conn``:
        one of this trace's :meth:`reader` connections instead of the main one.
        """
        try:
            cur = (conn or self.conn).execute(sql, params or {})
            rows = cur.fetchall()
        except sqlite3.DatabaseError as exc:
            if _is_bug(exc):
                raise
            raise TraceError(f"{self.path}: unreadable SQLite data ({exc})") from exc
        return [d[0] for d in cur.description or ()], rows

    def reader(self) -> sqlite3.Connection:
        """Another read-only connection to the same file, usable from another thread (SQLite
        runs queries without Python's lock, so several readers scan a big table in parallel).
        The caller closes it."""
        uri = self.path.resolve().as_uri() + "?mode=ro"
        try:
            return _mapped(sqlite3.connect(uri, uri=True, check_same_thread=False))
        except sqlite3.Error as exc:
            raise TraceError(f"{self.path}: cannot open as SQLite ({exc})") from exc

    def tables(self) -> frozenset[str]:
        """Names of the tables (and views) in the export, read once."""
        if self._tables is None:
            _, rows = self.query("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")
            self._tables = frozenset(r[0] for r in rows)
        return self._tables

    def columns(self, table: str) -> frozenset[str]:
        """Column names of ``table`` (empty if it does not exist), via PRAGMA table_info."""
        if table not in self._columns:
            if table not in self.tables():
                return frozenset()
            _, rows = self.query(f'PRAGMA table_info("{table}")')
            self._columns[table] = frozenset(r[1] for r in rows)
            self._not_null[table] = frozenset(r[1] for r in rows if r[3])
        return self._columns[table]

    def not_null(self, table: str) -> frozenset[str]:
        """Columns of ``table`` declared NOT NULL (SQLite enforces it, so no NULL can be read)."""
        self.columns(table)
        return self._not_null.get(table, frozenset())

    def has(self, table: str, column: str | None = None) -> bool:
        """Whether the export has ``table`` (and, if given, that column in it)."""
        if column is None:
            return table in self.tables()
        return column in self.columns(table)


_CORRUPTION_WORDS = ("malformed", "not a database", "disk i/o", "corrupt", "encrypted")


def _is_bug(exc: sqlite3.DatabaseError) -> bool:
    """Whether a SQLite error is a mistake in our SQL rather than a damaged file."""
    if type(exc) is sqlite3.DatabaseError:
        return False
    text = str(exc).lower()
    return not any(w in text for w in _CORRUPTION_WORDS)


# --- opening -----------------------------------------------------------------------------------


def _check_header(path: Path) -> None:
    """Reject non-SQLite and truncated files before SQLite gets a chance to half-read them.

    The header stores the page size (bytes 16-17) and, when valid, the page count (28-31); a
    file shorter than their product was cut off (an interrupted copy or export).
    """
    size = path.stat().st_size
    with path.open("rb") as fh:
        header = fh.read(100)
    if size == 0:
        raise TraceError(f"{path}: empty file, not an nsys SQLite export")
    if not header.startswith(_SQLITE_MAGIC):
        raise TraceError(f"{path}: file is not a database (no SQLite header)")
    if len(header) < 100:
        raise TraceError(f"{path}: truncated SQLite file ({size} bytes, header incomplete)")
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    page_count = int.from_bytes(header[28:32], "big")
    count_valid = header[24:28] == header[92:96] and page_count > 0
    if count_valid and size < page_size * page_count:
        raise TraceError(
            f"{path}: truncated SQLite file: header says {page_count} pages of {page_size} bytes "
            f"({page_size * page_count} bytes) but the file has {size} bytes"
        )


def unxz(path: Path, into: Path) -> Path:
    """``path`` (an xz-compressed export, ``NAME.sqlite.xz``) decompressed to ``into/NAME.sqlite``;
    raises ``lzma.LZMAError`` on a file that is not xz."""
    out = into / path.stem
    with lzma.open(path) as src, out.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    return out


def open_trace(path: str | Path) -> Trace:
    """Open an nsys SQLite export read-only, or raise :class:`TraceError` saying why not.

    Checks that the file exists, is SQLite, is not truncated, that its schema can be read and that
    it has the basic nsys table ``StringIds`` (every export has it; other tables are lazy).
    """
    p = Path(path)
    if not p.exists():
        raise TraceError(f"{p}: no such file")
    if not p.is_file():
        raise TraceError(f"{p}: not a regular file")
    _check_header(p)
    uri = p.resolve().as_uri() + "?mode=ro"
    try:
        conn = _mapped(sqlite3.connect(uri, uri=True))
    except sqlite3.Error as exc:
        raise TraceError(f"{p}: cannot open as SQLite ({exc})") from exc
    trace = Trace(p, conn)
    try:
        names = trace.tables()
        if "StringIds" not in names:
            raise TraceError(
                f"{p}: SQLite file lacks the nsys table StringIds: not an nsys export "
                f"(tables: {', '.join(sorted(names)[:10]) or 'none'})"
            )
        trace.query("SELECT id, value FROM StringIds LIMIT 1")
    except TraceError:
        conn.close()
        raise
    except sqlite3.Error as exc:
        conn.close()
        raise TraceError(f"{p}: unreadable SQLite data ({exc})") from exc
    return trace


# --- helpers -----------------------------------------------------------------------------------

#: Bytes of the file SQLite reads through a memory map instead of a read() per 4 KB page: on a
#: big export the page copies were a third of a scan's time, most of it in the kernel.
MMAP_BYTES = 1 << 36


def _mapped(conn: sqlite3.Connection) -> sqlite3.Connection:
    """``conn`` set to read the file through a memory map (read-only connections only)."""
    conn.execute(f"PRAGMA mmap_size = {MMAP_BYTES}")
    return conn


@cache
def _sql(name: str) -> str:
    """Text of ``analysis/sql/<name>.sql`` (package data, so it works from a wheel too)."""
    return resources.files("analysis").joinpath("sql", f"{name}.sql").read_text(encoding="utf-8")


def _stand_in(columns: Iterable[str]) -> str:
    """A zero-row subquery with these columns (and rowid), used in place of a missing table."""
    cols = ", ".join(f"NULL AS {c}" for c in (*columns, "rowid"))
    return f"(SELECT {cols} WHERE 0)"


def enum_table(trace: Trace, table: str) -> str:
    """A table expression with columns (id, name, label) for the nsys enum ``table`` (ENUM_*).

    nsys stores kinds (copy kind, memory kind, sync type, event class, ...) as integer ids whose
    meaning lives in ENUM_* tables of the same export; ids differ between nsys versions, so
    queries join the enum and test its ``name`` (e.g. ``name LIKE '%PAGEABLE'``) rather than
    hard-coding ids. Use the result in SQL where a table goes (``LEFT JOIN {expr} AS ck ON
    ck.id = m.copyKind``). It is the table itself when it has ``label``; older exports have some
    enums with only (id, name), so ``name`` stands in for the label; a missing enum becomes a
    zero-row stand-in. ``table`` must be a name from the nsys schema, never caller input.
    """
    if not trace.has(table):
        return _stand_in(("id", "name", "label"))
    if trace.has(table, "label"):
        return table
    return f"(SELECT id, name, name AS label FROM {table})"


#: Rowids per chunk (one SQL scan, one task) in int_columns: ~3 MB of text per column (smaller
#: chunks kept the text in cache and ran ~10% faster than 500,000 on a big export).
INT_COLUMNS_CHUNK = 250_000
#: Threads (each with its own read-only connection) that int_columns reads passes with.
PARALLEL_READERS = max(1, min(16, os.cpu_count() or 1))

#: One packed pair of int_columns: (high column, low column, bits of the low one).
Pack = tuple[str, str, int]


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
    for high, low, bits in pack:
        values[high] = f"({values[high]}) * {1 << bits} + ({values.pop(low)})"
    if few:
        sql = (
            f"SELECT {', '.join(values.values())} FROM {table} AS t WHERE {where} ORDER BY t.rowid"
        )
        rows = trace.query(sql, params)[1]
        if any(type(v) is not int for row in rows for v in row):
            raise TraceError(f"{trace.path}: {table} holds values that are not integers")
        a = np.array(rows, dtype=np.int64).reshape(len(rows), len(values))
        return _unpack({name: a[:, i].copy() for i, name in enumerate(values)}, pack, columns)
    # two subqueries: SQLite answers a lone MIN or MAX from the b-tree's edge, but a query with
    # both aggregates scans the whole table
    _, rows = trace.query(
        f"SELECT (SELECT MIN(rowid) FROM {table}), (SELECT MAX(rowid) FROM {table})"
    )
    first, last = rows[0]
    if first is None:
        return empty
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
    # Chunk i holds at most chunk_rows rows, so it has a slot of its own in each output
    # array: the reader threads fill their slots in parallel, and where every chunk but the
    # last is full (no row filtered out) the output is the filled prefix, with no copy at all.
    out = {name: np.empty(len(tasks) * chunk_rows, np.int64) for name in values}
    counts = [0] * len(tasks)

    def run(a: int, conn: sqlite3.Connection | None) -> None:
        texts = trace.query(sql, {**(params or {}), "_a": a, "_b": a + chunk_rows}, conn=conn)
        n, *found = texts[1][0]
        arrays = _parse_ints(trace, table, list(values), found, n)
        i = (a - tasks[0]) // chunk_rows
        counts[i] = arrays[0].size
        for name, arr in zip(values, arrays, strict=True):
            out[name][i * chunk_rows : i * chunk_rows + arr.size] = arr

    _run_parallel(trace, run, tasks)
    return _unpack(_compact(out, counts, chunk_rows), pack, columns)


def _unpack(
    cols: dict[str, np.ndarray], pack: tuple[Pack, ...], order: Iterable[str]
) -> dict[str, np.ndarray]:
    """Split the pairs of :func:`int_columns`' ``pack`` (in place), columns in ``order``."""
    for high, low, bits in pack:
        v = cols[high]
        cols[low] = np.bitwise_and(v, (1 << bits) - 1)
        cols[high] = np.right_shift(v, bits, out=v if v.flags.writeable else None)
    return {name: cols[name] for name in order}


def _parse_ints(
    trace: Trace, table: str, names: list[str], texts: list[bytes | None], rows: int
) -> list[np.ndarray]:
    """The space-separated integers of each text, one array per column, ``rows`` in each: a
    value numpy cannot parse as one (a REAL, a text) raises, and an empty text value (which
    parses as nothing) leaves the array short."""
    arrays = []
    for name, text in zip(names, texts, strict=True):
        bad = TraceError(f"{trace.path}: {table}.{name} holds values that are not integers")
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


def _compact(
    out: dict[str, np.ndarray], counts: list[int], chunk_rows: int
) -> dict[str, np.ndarray]:
    """The filled part of each slotted array (chunk i's rows at i * chunk_rows onwards)."""
    total = sum(counts)
    if all(n == chunk_rows for n in counts[:-1]):
        return {name: arr[:total] for name, arr in out.items()}
    # one block copy per chunk: far cheaper than gathering through an index of every row
    return {
        name: np.concatenate(
            [arr[i * chunk_rows : i * chunk_rows + n] for i, n in enumerate(counts)]
        )
        for name, arr in out.items()
    }


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


def _col(trace: Trace, table: str, column: str, alias: str) -> str:
    """``alias.column`` if the export's table has that column, else ``NULL``."""
    return f"{alias}.{column}" if trace.has(table, column) else "NULL"


def _typed(df: pd.DataFrame, schema: Mapping[str, str], what: str, trace: Trace) -> pd.DataFrame:
    """Put ``df`` in the schema's column order and dtypes, the same for full and empty frames."""
    missing = [c for c in schema if c not in df.columns]
    if missing:
        raise RuntimeError(f"{what}: query lacks columns {missing}")  # a bug in analysis/sql
    df = df[list(schema)]
    try:
        return df.astype(dict(schema))
    except (TypeError, ValueError) as exc:
        raise TraceError(
            f"{trace.path}: {what} has values that do not fit its schema: {exc}"
        ) from exc


def _query(
    trace: Trace,
    name: str,
    schema: Mapping[str, str],
    *,
    table: str | None,
    subs: Mapping[str, str] | None = None,
    params: Mapping[str, object] | None = None,
) -> pd.DataFrame:
    """Run ``sql/<name>.sql`` into an object-dtype frame (zero rows when ``table`` is absent).

    Columns of ``schema`` that the SQL does not return (derived in Python) come back as empty
    object columns for the caller to fill; :func:`_typed` then applies the dtypes, so full and
    empty frames come out alike.
    """
    if table is not None and not trace.has(table):
        rows: list[tuple[object, ...]] = []
        cols = list(schema)
    else:
        cols, rows = trace.query(_sql(name).format_map(dict(subs or {})), params)
    # dtype=object keeps SQLite's integers exact until _typed casts them (no float round trip).
    df = pd.DataFrame(rows, columns=cols, dtype=object)
    for c in schema:
        if c not in df.columns:
            df[c] = pd.Series([None] * len(df), dtype=object)
    return df


# --- tables ------------------------------------------------------------------------------------


def tables(trace: Trace) -> set[str]:
    """Names of the tables in the export: which kinds of activity were recorded at all."""
    return set(trace.tables())


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


def nsys_version(trace: Trace) -> str | None:
    """The nsys version that wrote the export (e.g. '2022.4.2.1'), or None if not recorded.

    2022.4 keeps it in EXPORT_META_DATA, 2025.3 in META_DATA_EXPORT (row EXPORT_PRODUCT_VERSION).
    """
    for meta in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if trace.has(meta):
            _, rows = trace.query(_sql("nsys_version").format(meta_table=meta))
            if rows and rows[0][0]:
                return str(rows[0][0])
    return None


def kernels(trace: Trace) -> pd.DataFrame:
    """CUDA kernels on the GPU timeline, one row each (columns: :data:`KERNELS`).

    ``name`` is the demangled name; ``graph_node_id`` is set for kernels replayed from a CUDA graph.
    """
    t = "CUPTI_ACTIVITY_KIND_KERNEL"
    df = _query(
        trace,
        "kernels",
        KERNELS,
        table=t,
        subs={"graph_node_id": _col(trace, t, "graphNodeId", "k")},
    )
    return _typed(df, KERNELS, "kernels", trace)


def memcpy(trace: Trace) -> pd.DataFrame:
    """CUDA memory copies with direction, memory kinds and achieved rate (:data:`MEMCPY`).

    ``pageable`` marks copies whose host side is pageable memory (the staged, synchronous kind);
    kinds come from the export's ENUM_CUDA_MEMCPY_OPER / ENUM_CUDA_MEM_KIND tables.
    """
    t = "CUPTI_ACTIVITY_KIND_MEMCPY"
    subs = {
        "graph_node_id": _col(trace, t, "graphNodeId", "m"),
        "enum_copy_kind": enum_table(trace, "ENUM_CUDA_MEMCPY_OPER"),
        "enum_mem_kind": enum_table(trace, "ENUM_CUDA_MEM_KIND"),
    }
    df = _query(trace, "memcpy", MEMCPY, table=t, subs=subs)
    return _typed(df, MEMCPY, "memcpy", trace)


def memset(trace: Trace) -> pd.DataFrame:
    """CUDA memsets with their size, value and memory kind (:data:`MEMSET`)."""
    t = "CUPTI_ACTIVITY_KIND_MEMSET"
    subs = {
        "graph_node_id": _col(trace, t, "graphNodeId", "m"),
        "mem_kind": _col(trace, t, "memKind", "m"),
        "enum_mem_kind": enum_table(trace, "ENUM_CUDA_MEM_KIND"),
    }
    df = _query(trace, "memset", MEMSET, table=t, subs=subs)
    return _typed(df, MEMSET, "memset", trace)


_VERSION_SUFFIX = re.compile(r"(?:_v\d+)?$")
_PT_SUFFIX = re.compile(r"_pt(?:sz|ds)$")

_LAUNCH = (
    "cudaLaunchKernel",  # also cudaLaunchKernelExC
    "cudaLaunchCooperativeKernel",
    "cudaGraphLaunch",
    "cuLaunchKernel",  # also cuLaunchKernelEx
    "cuLaunchCooperativeKernel",
    "cuGraphLaunch",
    "cuLaunchGrid",
)
_SYNC = frozenset(
    {
        "cudaDeviceSynchronize",
        "cudaStreamSynchronize",
        "cudaEventSynchronize",
        "cudaThreadSynchronize",
        "cuCtxSynchronize",
        "cuStreamSynchronize",
        "cuEventSynchronize",
    }
)
_ALLOC = (
    "cudaMalloc",
    "cudaFree",  # also cudaFreeHost, cudaFreeAsync, cudaFreeArray
    "cudaHostAlloc",
    "cudaHostRegister",
    "cudaHostUnregister",
    "cuMemAlloc",
    "cuMemFree",
    "cuMemHostAlloc",
    "cuMemHostRegister",
    "cuMemHostUnregister",
)


def api_base_name(name: str) -> str:
    """Strip nsys' version and per-thread-stream suffixes: cudaLaunchKernel_v7000 -> cudaLaunchKernel.

    Lets one name match across CUDA versions (``cudaMemcpyAsync_ptsz_v7000`` -> ``cudaMemcpyAsync``).
    """
    return _PT_SUFFIX.sub("", _VERSION_SUFFIX.sub("", name, count=1))


def api_category(base_name: str) -> str:
    """Coarse role of a CUDA API call: launch, sync, memcpy, memset, alloc or other.

    ``sync`` is only the calls that block the host until the GPU is done (not cudaStreamWaitEvent
    or cudaStreamQuery, which return at once).
    """
    if base_name.startswith(_LAUNCH) or base_name == "cuLaunch":
        return "launch"
    if base_name in _SYNC:
        return "sync"
    if base_name.startswith(("cudaMemcpy", "cuMemcpy")):
        return "memcpy"
    if base_name.startswith(("cudaMemset", "cuMemset", "cuMemsetD")):
        return "memset"
    if base_name.startswith(_ALLOC):
        return "alloc"
    return "other"


def cuda_api(trace: Trace) -> pd.DataFrame:
    """CUDA runtime (and, in 2025.x exports, driver) API calls with a category (:data:`CUDA_API`).

    ``category`` (launch/sync/memcpy/memset/alloc/other) is what the bottleneck rules look at;
    it is computed once per distinct name, not per row.
    """
    t = "CUPTI_ACTIVITY_KIND_RUNTIME"
    subs = {"enum_event_class": enum_table(trace, "ENUM_NSYS_EVENT_CLASS")}
    df = _query(trace, "cuda_api", CUDA_API, table=t, subs=subs)
    names = pd.Series(df["name"].dropna().unique(), dtype=object)
    base = {n: api_base_name(n) for n in names}
    df["base_name"] = df["name"].map(base)
    df["category"] = df["base_name"].map({b: api_category(b) for b in set(base.values())})
    return _typed(df, CUDA_API, "cuda_api", trace)


def sync_events(trace: Trace) -> pd.DataFrame:
    """GPU-side synchronisation records: what the host waited on and for how long."""
    t = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
    subs = {"enum_sync_type": enum_table(trace, "ENUM_CUPTI_SYNC_TYPE")}
    df = _query(trace, "sync_events", SYNC_EVENTS, table=t, subs=subs)
    return _typed(df, SYNC_EVENTS, "sync_events", trace)


def _nvtx_query(
    trace: Trace,
    text: str | None,
    schema: Mapping[str, str],
    *,
    tid: int | None = None,
    spans: Iterable[tuple[int, int]] | None = None,
) -> pd.DataFrame:
    """NVTX ranges, all or those whose text equals ``text``, of thread ``tid`` and overlapping
    one of ``spans`` (all filtered in SQL)."""
    params: dict[str, object] = {"text": text}
    filters = ""
    if tid is not None:
        filters += " AND n.globalTid = :tid"
        params["tid"] = int(tid)
    if spans is not None:
        ors = []
        for i, (lo, hi) in enumerate(spans):
            ors.append(f'(n."end" > :lo{i} AND n.start < :hi{i})')
            params[f"lo{i}"], params[f"hi{i}"] = int(lo), int(hi)
        filters += f" AND ({' OR '.join(ors) or '0'})"
    subs = {
        "enum_event_type": enum_table(trace, "ENUM_NSYS_EVENT_TYPE"),
        "thread_names": "ThreadNames"
        if trace.has("ThreadNames")
        else _stand_in(("globalTid", "nameId")),
        "filters": filters,
    }
    return _query(trace, "nvtx_ranges", schema, table="NVTX_EVENTS", subs=subs, params=params)


def _nesting_depth(df: pd.DataFrame) -> list[object]:
    """Depth of each push/pop range among the push/pop ranges of its thread (0 = outermost).

    Push/pop ranges nest strictly per thread, so a sweep with a stack of open end times gives
    the depth in O(n log n); start/end ranges do not nest and get NA.
    """
    depth: list[object] = [pd.NA] * len(df)
    pp = df[(df["range_type"] == "push_pop") & df["end_ns"].notna()]
    if pp.empty:
        return depth
    order = pp.assign(_neg_end=-pp["end_ns"].astype("int64")).sort_values(
        ["global_tid", "start_ns", "_neg_end"], kind="stable"
    )
    pos = {label: i for i, label in enumerate(df.index)}
    stack: list[int] = []
    current = None
    for label, gtid, start, end in zip(
        order.index, order["global_tid"], order["start_ns"], order["end_ns"], strict=True
    ):
        if gtid != current:
            stack, current = [], gtid
        while stack and stack[-1] <= start:
            stack.pop()
        depth[pos[label]] = len(stack)
        stack.append(int(end))
    return depth


def nvtx_ranges(
    trace: Trace,
    *,
    tid: int | None = None,
    spans: Iterable[tuple[int, int]] | None = None,
) -> pd.DataFrame:
    """NVTX push/pop and start/end ranges with thread names and nesting depth (:data:`NVTX_RANGES`).

    These are the harness' phase markers (measure, step, data_load, forward, ...); marks are left
    out. ``depth`` counts enclosing push/pop ranges on the same thread. ``tid`` (a global tid)
    and ``spans`` ((start_ns, end_ns) pairs) read only that thread's ranges overlapping one of
    the spans, in SQL (a trace with per-operator ranges has millions); depths stay exact, since
    the ranges enclosing a range overlap whatever it overlaps. Ranges still open at the end of
    the capture overlap no span.
    """
    df = _nvtx_query(trace, None, NVTX_RANGES, tid=tid, spans=spans)
    df["depth"] = _nesting_depth(df)
    return _typed(df, NVTX_RANGES, "nvtx_ranges", trace)


def step_ranges(trace: Trace, name: str = "step") -> pd.DataFrame:
    """The NVTX ranges called ``name`` (default ``step``), numbered 0..n-1 by start within each pid.

    One row per training/inference iteration the harness bracketed (:data:`STEP_RANGES`).
    Read once per name (each read scans every NVTX event; the detectors ask several times):
    each caller gets a copy of its own.
    """
    if name not in trace._steps:
        df = _nvtx_query(trace, name, STEP_RANGES)
        if not df.empty:
            df = df.sort_values(["pid", "start_ns"], kind="stable").reset_index(drop=True)
            df["step_index"] = df.groupby("pid", sort=False).cumcount()
        trace._steps[name] = _typed(df, STEP_RANGES, "step_ranges", trace)
    return trace._steps[name].copy()


def window(trace: Trace, name: str = "measure") -> tuple[int, int]:
    """(start_ns, end_ns) of the measured window: the NVTX range ``measure``, else all activity.

    The harness brackets its measured steps with ``measure``; with several (one per process) the
    window spans them all. Without one, the span of every recorded activity table is used.
    Raises :class:`TraceError` when the export holds no timed activity at all.
    """
    ranges = _nvtx_query(trace, name, NVTX_RANGES)
    ranges = ranges[ranges["end_ns"].notna()]
    if not ranges.empty:
        return int(ranges["start_ns"].min()), int(ranges["end_ns"].max())
    starts: list[int] = []
    ends: list[int] = []
    for table in ACTIVITY_TABLES:
        if trace.has(table):
            _, rows = trace.query(_sql("activity_span").format(table=table))
            lo, hi = rows[0]
            if lo is not None:
                starts.append(int(lo))
            if hi is not None:
                ends.append(int(hi))
    if not starts:
        raise TraceError(f"{trace.path}: no recorded activity to take a window from")
    return min(starts), max(ends) if ends else max(starts)


def osrt(trace: Trace) -> pd.DataFrame:
    """OS runtime calls (file reads, waits, sleeps) per thread (:data:`OSRT`)."""
    df = _query(trace, "osrt", OSRT, table="OSRT_API")
    return _typed(df, OSRT, "osrt", trace)


def threads(trace: Trace) -> pd.DataFrame:
    """Every thread nsys saw, with its name and its process' name (:data:`THREADS`)."""
    subs = {
        "processes": "PROCESSES"
        if trace.has("PROCESSES")
        else _stand_in(("globalPid", "pid", "name"))
    }
    df = _query(trace, "threads", THREADS, table="ThreadNames", subs=subs)
    return _typed(df, THREADS, "threads", trace)


def gpu_info(trace: Trace) -> pd.DataFrame:
    """The GPUs of the profiled machine (:data:`GPU_INFO`); empty on CPU-only exports."""
    df = _query(trace, "gpu_info", GPU_INFO, table="TARGET_INFO_GPU")
    return _typed(df, GPU_INFO, "gpu_info", trace)
