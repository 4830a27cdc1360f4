"""Opening an nsys SQLite export: the read-only connection, its schema look-ups and the checks
that turn a missing, truncated or corrupt file into :class:`TraceError`.

The layer every reader of :mod:`analysis.trace` stands on; it knows nothing of nsys' tables
beyond ``StringIds``, which every export has.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

import pandas as pd

__all__ = ["MMAP_BYTES", "ExportError", "Trace", "TraceError", "open_trace", "unxz"]

_SQLITE_MAGIC = b"SQLite format 3\x00"


class ExportError(Exception):
    """An export cannot be read: ``path`` names the file, ``problem`` says why in one line
    (``str()``: ``"<path>: <problem>"``)."""

    def __init__(self, path: str | Path | None, problem: str | None = None) -> None:
        if problem is None:  # one message that names the file itself
            path, problem = None, str(path)
        self.path = None if path is None else Path(path)
        self.problem = problem
        super().__init__(str(self))

    def __str__(self) -> str:
        return self.problem if self.path is None else f"{self.path}: {self.problem}"


class TraceError(ExportError):
    """The file is not a readable nsys SQLite export (missing, not SQLite, truncated, corrupt),
    found on opening it or by a later query."""


class Trace:
    """A read-only connection to one nsys SQLite export, with cached schema look-ups.

    Use :func:`open_trace` to make one; it closes with ``close()`` or as a context manager.
    """

    def __init__(self, path: Path, conn: sqlite3.Connection, source: Path | None = None) -> None:
        self.path = path
        """The SQLite file read."""
        self.source = path if source is None else source
        """The file the caller named (a compressed export or a report; errors name it)."""
        self.conn = conn
        self._tables: frozenset[str] | None = None
        self._columns: dict[str, frozenset[str]] = {}
        self._not_null: dict[str, frozenset[str]] = {}
        self._steps: dict[str, pd.DataFrame] = {}  # step_ranges by name: read once
        self._owner = threading.get_ident()  # the thread ``conn`` belongs to
        self._local = threading.local()  # another thread's own connection (:meth:`query`)
        self._others: list[sqlite3.Connection] = []

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
        for conn in self._others:
            conn.close()

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
            cur = (conn or self._connection()).execute(sql, params or {})
            rows = cur.fetchall()
        except sqlite3.DatabaseError as exc:
            if _is_bug(exc):
                raise
            raise TraceError(self.source, f"unreadable SQLite data ({exc})") from exc
        return [d[0] for d in cur.description or ()], rows

    def _connection(self) -> sqlite3.Connection:
        """``conn`` on the thread that opened the trace; on another (detectors judged side by
        side), a :meth:`reader` of that thread's own, closed with the trace."""
        if threading.get_ident() == self._owner:
            return self.conn
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self.reader()
            self._others.append(conn)
        return conn

    def reader(self) -> sqlite3.Connection:
        """Another read-only connection to the same file, usable from another thread (SQLite
        runs queries without Python's lock, so several readers scan a big table in parallel).
        The caller closes it."""
        uri = self.path.resolve().as_uri() + "?mode=ro"
        try:
            return _mapped(sqlite3.connect(uri, uri=True, check_same_thread=False))
        except sqlite3.Error as exc:
            raise TraceError(self.source, f"cannot open as SQLite ({exc})") from exc

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
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            header = fh.read(100)
    except OSError as exc:
        raise TraceError(path, f"cannot be read ({exc.strerror or exc})") from exc
    if size == 0:
        raise TraceError(path, "empty file, not an nsys SQLite export")
    if not header.startswith(_SQLITE_MAGIC):
        raise TraceError(path, "file is not a database (no SQLite header)")
    if len(header) < 100:
        raise TraceError(path, f"truncated SQLite file ({size} bytes, header incomplete)")
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    page_count = int.from_bytes(header[28:32], "big")
    count_valid = header[24:28] == header[92:96] and page_count > 0
    if count_valid and size < page_size * page_count:
        raise TraceError(
            path,
            f"truncated SQLite file: header says {page_count} pages of {page_size} bytes "
            f"({page_size * page_count} bytes) but the file has {size} bytes",
        )


def unxz(path: Path, into: Path) -> Path:
    """``path`` (an xz-compressed export, ``NAME.sqlite.xz``, or a packed one,
    ``NAME.sqlite.cols.xz``: :mod:`analysis.packed_export`) decompressed to
    ``into/NAME.sqlite``; raises ``lzma.LZMAError`` on a file that is not xz."""
    from analysis import packed_export

    return packed_export.decompress(path, into / sqlite_name(path))


def sqlite_name(path: Path) -> str:
    """The name of the SQLite file a compressed export holds: ``NAME.sqlite`` of
    ``NAME.sqlite.xz`` or ``NAME.sqlite.cols.xz``."""
    from analysis import packed_export

    name = path.name
    if name.endswith(packed_export.SUFFIX):
        name = name.removesuffix(packed_export.SUFFIX) + ".sqlite"
    return name.removesuffix(".xz")


def open_trace(path: str | Path, *, source: str | Path | None = None) -> Trace:
    """Open an nsys SQLite export read-only, or raise :class:`TraceError` saying why not
    (``source``: the file the caller named, where ``path`` was made from it; errors name it).

    Checks that the file exists, is SQLite, is not truncated, that its schema can be read and that
    it has the basic nsys table ``StringIds`` (every export has it; other tables are lazy).
    """
    p = Path(path)
    if not p.exists():
        raise TraceError(p, "no such file")
    if not p.is_file():
        raise TraceError(p, "not a regular file")
    _check_header(p)
    uri = p.resolve().as_uri() + "?mode=ro"
    try:
        conn = _mapped(sqlite3.connect(uri, uri=True))
    except sqlite3.Error as exc:
        raise TraceError(p, f"cannot open as SQLite ({exc})") from exc
    trace = Trace(p, conn, None if source is None else Path(source))
    try:
        names = trace.tables()
        if "StringIds" not in names:
            raise TraceError(
                p,
                "SQLite file lacks the nsys table StringIds: not an nsys export "
                f"(tables: {', '.join(sorted(names)[:10]) or 'none'})",
            )
        trace.query("SELECT id, value FROM StringIds LIMIT 1")
    except TraceError:
        conn.close()
        raise
    except sqlite3.Error as exc:
        conn.close()
        raise TraceError(p, f"unreadable SQLite data ({exc})") from exc
    return trace


#: Bytes of the file SQLite reads through a memory map instead of a read() per 4 KB page: on a
#: big export the page copies were a third of a scan's time, most of it in the kernel.
MMAP_BYTES = 1 << 36


def _mapped(conn: sqlite3.Connection) -> sqlite3.Connection:
    """``conn`` set to read the file through a memory map (read-only connections only)."""
    conn.execute(f"PRAGMA mmap_size = {MMAP_BYTES}")
    return conn
