"""analysis.trace on files that are not a readable nsys export (missing, text, empty, a
directory, truncated, corrupt pages, SQLite without nsys tables): each raises TraceError naming
the file and what is wrong, never a bare sqlite3 error. Also: the SQL files ship with the
package."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from analysis import trace as T
from tests.test_tables import TABLE_FUNCS

# --- unreadable files --------------------------------------------------------------------------


def _plain_db(path: Path, rows: int = 2000) -> Path:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    db.execute("CREATE TABLE OSRT_API (start INTEGER, end INTEGER, eventClass INTEGER,"
               " globalTid INTEGER, nameId INTEGER, returnValue INTEGER, nestingLevel INTEGER,"
               " callchainId INTEGER)")  # fmt: skip
    db.execute("INSERT INTO StringIds VALUES (1, 'read')")
    db.executemany(
        "INSERT INTO OSRT_API VALUES (?, ?, 0, 1, 1, 0, 0, 0)", [(i, i + 1) for i in range(rows)]
    )
    db.commit()
    db.close()
    return path


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(T.TraceError, match="no such file"):
        T.open_trace(tmp_path / "nope.sqlite")


def test_text_file(tmp_path: Path) -> None:
    p = tmp_path / "notes.sqlite"
    p.write_text("this is not a database\n" * 20)
    with pytest.raises(T.TraceError, match="not a database"):
        T.open_trace(p)


def test_empty_file(tmp_path: Path) -> None:
    p = tmp_path / "empty.sqlite"
    p.touch()
    with pytest.raises(T.TraceError, match="empty file"):
        T.open_trace(p)


def test_directory(tmp_path: Path) -> None:
    with pytest.raises(T.TraceError, match="not a regular file"):
        T.open_trace(tmp_path)


def test_truncated_file(tmp_path: Path) -> None:
    full = _plain_db(tmp_path / "full.sqlite")
    assert full.stat().st_size > 4096 * 4
    cut = tmp_path / "cut.sqlite"
    cut.write_bytes(full.read_bytes()[:4096])
    with pytest.raises(T.TraceError, match="truncated"):
        T.open_trace(cut)


def test_corrupt_pages_raise_on_query(tmp_path: Path) -> None:
    p = _plain_db(tmp_path / "bad.sqlite", rows=20000)
    data = bytearray(p.read_bytes())
    data[4096 * 3 :] = b"\xab" * (len(data) - 4096 * 3)  # keep header, schema and StringIds
    p.write_bytes(bytes(data))
    with T.open_trace(p) as tr, pytest.raises(T.TraceError, match=r"malformed|not a database"):
        T.osrt(tr)


def test_sqlite_without_nsys_tables(tmp_path: Path) -> None:
    p = tmp_path / "other.sqlite"
    db = sqlite3.connect(p)
    db.execute("CREATE TABLE t (x INTEGER)")
    db.commit()
    db.close()
    with pytest.raises(T.TraceError, match="StringIds"):
        T.open_trace(p)


def test_sql_files_ship_as_package_data() -> None:
    from importlib import resources

    names = {p.name for p in resources.files("analysis").joinpath("sql").iterdir()}
    assert {f"{n}.sql" for n in TABLE_FUNCS if n != "step_ranges"} <= names
