"""A compact, lossless container for nsys SQLite exports: ``NAME.sqlite.cols.xz``.

Why: an export is mostly integer columns (timestamps, ids, correlation ids) stored row by row;
xz on the SQLite file finds little to share between neighbouring timestamps. Stored column by
column, each integer column as the differences between consecutive rows, the same export
compresses 2-3x smaller (the wild corpus: ~10 MB as ``.sqlite.xz``, ~4 MB packed), which keeps
the corpus inside the project's size budget.

Lossless: every table, row (with its rowid), value and type, and the schema's own SQL (tables,
indexes, views, triggers) come back as they were (``tests/test_packed_export.py`` compares
every table of real exports). Readers never see the container: :func:`analysis.trace_db.unxz`
turns a ``.sqlite.cols.xz`` into ``NAME.sqlite`` as it does a ``.sqlite.xz``.

Layout (inside xz): ``MAGIC``, an 8-byte little-endian header length, a JSON header (tables:
name, SQL, whether it has rowids, columns with their kinds; the other schema SQL; the
``user_version``), then each column's data in header order, each an ``.npy`` array:
``int`` (no NULLs: int64 differences), ``nint`` (NULLs: a uint8 mask, then the differences of
the values with NULLs as 0), ``json`` (anything else: floats, text, mixed; a JSON list, exact
for floats) and ``blob`` (base64 strings in a JSON list).
"""

from __future__ import annotations

import base64
import io
import json
import lzma
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np

MAGIC = b"BNSCOLS1"
SUFFIX = ".sqlite.cols.xz"
_INT64 = (-(2**63), 2**63 - 1)


def _kind(values: list[Any]) -> str:
    if any(isinstance(v, bytes) for v in values):
        return "blob"
    ints = [v for v in values if v is not None]
    if all(type(v) is int and _INT64[0] <= v <= _INT64[1] for v in ints):
        return "int" if len(ints) == len(values) else "nint"
    return "json"


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return buf.getvalue()


def _encode(values: list[Any], kind: str) -> list[bytes]:
    if kind == "int":
        return [_npy(np.diff(np.asarray(values, dtype=np.int64), prepend=0))]
    if kind == "nint":
        mask = np.array([v is None for v in values], dtype=np.uint8)
        filled = np.array([0 if v is None else v for v in values], dtype=np.int64)
        return [_npy(mask), _npy(np.diff(filled, prepend=0))]
    if kind == "blob":
        values = [None if v is None else base64.b64encode(v).decode() for v in values]
    text = json.dumps(values, separators=(",", ":")).encode()
    return [_npy(np.frombuffer(text, dtype=np.uint8))]


def _decode(parts: list[np.ndarray], kind: str) -> list[Any]:
    if kind == "int":
        return np.cumsum(parts[0]).tolist()
    if kind == "nint":
        vals = np.cumsum(parts[1]).tolist()
        return [None if m else v for m, v in zip(parts[0].tolist(), vals, strict=True)]
    values = json.loads(parts[0].tobytes())
    if kind == "blob":
        return [None if v is None else base64.b64decode(v) for v in values]
    return values


def _has_rowid(db: sqlite3.Connection, table: str) -> bool:
    try:
        db.execute(f'SELECT rowid FROM "{table}" LIMIT 1')
    except sqlite3.OperationalError:  # WITHOUT ROWID
        return False
    return True


def pack(sqlite: Path) -> bytes:
    """The export at ``sqlite`` as an xz-compressed column container."""
    db = sqlite3.connect(f"file:{sqlite}?mode=ro", uri=True)
    try:
        header: dict[str, Any] = {"tables": [], "schema": [], "user_version": 0}
        header["user_version"] = db.execute("PRAGMA user_version").fetchone()[0]
        blobs: list[bytes] = []
        tables = db.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'table' "
            "AND name NOT LIKE 'sqlite_%' ORDER BY rowid"
        ).fetchall()
        for name, sql in tables:
            rowid = _has_rowid(db, name)
            cur = db.execute(f'SELECT {"rowid, " if rowid else ""}* FROM "{name}"')
            cols = [d[0] for d in cur.description]
            rows = cur.fetchall()
            entry = {"name": name, "sql": sql, "rowid": rowid, "rows": len(rows), "columns": []}
            for i, col in enumerate(cols):
                values = [r[i] for r in rows]
                kind = _kind(values)
                parts = _encode(values, kind)
                entry["columns"].append({"name": col, "kind": kind, "parts": len(parts)})
                blobs += parts
            header["tables"].append(entry)
        header["schema"] = [sql for (sql,) in db.execute(
            "SELECT sql FROM sqlite_master WHERE type IN ('index', 'view', 'trigger') "
            "AND sql IS NOT NULL ORDER BY rowid")]  # fmt: skip
    finally:
        db.close()
    head = json.dumps(header).encode()
    raw = MAGIC + len(head).to_bytes(8, "little") + head + b"".join(blobs)
    return lzma.compress(raw, preset=9 | lzma.PRESET_EXTREME)


def is_packed(raw: bytes) -> bool:
    """Whether decompressed bytes are a column container (else: a SQLite file)."""
    return raw[: len(MAGIC)] == MAGIC


def unpack(raw: bytes, out: Path) -> Path:
    """Write the SQLite export held by ``raw`` (decompressed container bytes) to ``out``."""
    n = int.from_bytes(raw[len(MAGIC) : len(MAGIC) + 8], "little")
    start = len(MAGIC) + 8
    header = json.loads(raw[start : start + n])
    stream = io.BytesIO(raw[start + n :])
    out.unlink(missing_ok=True)
    db = sqlite3.connect(out)
    try:
        db.execute(f"PRAGMA user_version = {int(header['user_version'])}")
        for t in header["tables"]:
            db.execute(t["sql"])
            columns = []
            for c in t["columns"]:
                parts = [np.load(stream, allow_pickle=False) for _ in range(c["parts"])]
                columns.append(_decode(parts, c["kind"]))
            names = [c["name"] for c in t["columns"]]
            if t["rowid"]:
                names[0] = "rowid"
            quoted = ", ".join(f'"{c}"' if c != "rowid" else "rowid" for c in names)
            marks = ", ".join("?" * len(names))
            db.executemany(f'INSERT INTO "{t["name"]}" ({quoted}) VALUES ({marks})',
                           zip(*columns, strict=True))  # fmt: skip
        for sql in header["schema"]:
            db.execute(sql)
        db.commit()
    finally:
        db.close()
    return out


def decompress(path: Path, out: Path) -> Path:
    """The xz stream at ``path`` written to ``out`` as a SQLite file: unpacked where it holds a
    column container, copied where it holds a SQLite file; raises what lzma, json, numpy or
    sqlite3 raise on a damaged one (``analysis.export.open_export`` says which in one line)."""
    with lzma.open(path) as src:
        head = src.read(len(MAGIC))
        if is_packed(head):
            return unpack(head + src.read(), out)
        with out.open("wb") as dst:
            dst.write(head)
            shutil.copyfileobj(src, dst)
    return out


def pack_file(sqlite: Path, dest: Path) -> Path:
    """``sqlite`` packed into ``dest`` (a ``.sqlite.cols.xz`` path), written atomically."""
    tmp = dest.with_name(f".{dest.name}.tmp")
    tmp.write_bytes(pack(sqlite))
    tmp.replace(dest)
    return dest
