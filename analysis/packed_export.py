"""A compact, lossless container for nsys SQLite exports: ``NAME.sqlite.cols.xz``.

Why: an export is mostly integer columns (timestamps, ids, correlation ids) stored row by row;
xz on the SQLite file finds little to share between neighbouring timestamps. Stored column by
column, each integer column as the smallest residual of a prediction (the previous row, another
column of the same row: a call's end from its start), the same export compresses 2-3x smaller,
which keeps the corpus and the test fixtures inside the project's size budget.

Lossless: every table, row (with its rowid), value and type, and the schema's own SQL (tables,
indexes, views, triggers) come back as they were (``tests/test_packed_export.py`` compares
every table of real exports). Readers never see the container: :func:`analysis.trace_db.unxz`
turns a ``.sqlite.cols.xz`` into ``NAME.sqlite`` as it does a ``.sqlite.xz``.

Layout (inside xz): ``MAGIC``, an 8-byte little-endian header length, a JSON header (tables:
name, SQL, whether it has rowids, row count, columns with their kinds and encodings; the other
schema SQL; the ``user_version``), then each column's chunks in header order, their byte
lengths in the header. Kinds: ``int`` (no NULLs), ``nint`` (NULLs: first a bit mask,
``numpy.packbits``), ``json`` (anything else: floats, text, mixed; a JSON list, exact for
floats) and ``blob`` (base64 strings in a JSON list). An integer column is stored as its
residual ``value - prediction`` (the prediction: 0, or the values of the earlier column
``ref`` of the same row; a NULL's residual is 0), then, with ``delta``, as the differences of
consecutive residuals, in the fewest bytes that hold them (``width``), byte-planes apart (all
rows' lowest bytes first): xz then sees runs of alike bytes. The packer tries the predictions
and keeps the one that compresses smallest. The first container (``BNSCOLS1``: every integer
column as int64 differences in ``.npy`` arrays) still reads.
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

MAGIC = b"BNSCOLS2"
#: The first layout, still read (:func:`_unpack_v1`).
MAGIC_V1 = b"BNSCOLS1"
SUFFIX = ".sqlite.cols.xz"
_INT64 = (-(2**63), 2**63 - 1)
_XZ = 9 | lzma.PRESET_EXTREME
#: Columns shorter than this are stored as differences without trying other predictions.
_TRY_ROWS = 256


def _kind(values: list[Any]) -> str:
    if any(isinstance(v, bytes) for v in values):
        return "blob"
    ints = [v for v in values if v is not None]
    if all(type(v) is int and _INT64[0] <= v <= _INT64[1] for v in ints):
        return "int" if len(ints) == len(values) else "nint"
    return "json"


def _planes(a: np.ndarray) -> tuple[bytes, int]:
    """``a`` (int64) in the fewest bytes that hold it, byte-planes apart, and that width."""
    width = 8
    if a.size == 0:
        width = 1
    else:
        lo, hi = int(a.min()), int(a.max())
        width = next(w for w in (1, 2, 4, 8) if -(2 ** (8 * w - 1)) <= lo and hi < 2 ** (8 * w - 1))
    b = a.astype(f"<i{width}")
    return b.view(np.uint8).reshape(-1, width).T.tobytes(), width


def _unplanes(data: bytes, width: int, rows: int) -> np.ndarray:
    b = np.frombuffer(data, dtype=np.uint8).reshape(width, rows).T.copy()
    return b.view(f"<i{width}").ravel().astype(np.int64)


def _residual(filled: np.ndarray, pred: np.ndarray | None, delta: bool) -> np.ndarray:
    with np.errstate(over="ignore"):  # wraps modulo 2**64, as _restore wraps back
        r = filled if pred is None else filled - pred
        return np.diff(r, prepend=np.int64(0)) if delta else r


def _restore(r: np.ndarray, pred: np.ndarray | None, delta: bool) -> np.ndarray:
    with np.errstate(over="ignore"):
        r = np.cumsum(r, dtype=np.int64) if delta else r
        return r if pred is None else r + pred


def _choices(filled: np.ndarray, earlier: list[np.ndarray | None]) -> list[int | None]:
    """The predictions worth trying for a column: none, and each earlier integer column of the
    row that the values lie closer to than to 0 (an end to its start, an id to its rowid)."""
    refs: list[int | None] = [None]
    if len(filled) < _TRY_ROWS:
        return refs
    with np.errstate(over="ignore"):
        size = np.median(np.abs(filled.astype(np.float64)))
        for i, other in enumerate(earlier):
            if other is not None and np.median(np.abs((filled - other).astype(np.float64))) < size:
                refs.append(i)
    return refs


def _encode_int(
    values: list[Any], kind: str, earlier: list[np.ndarray | None]
) -> tuple[dict, list[bytes], np.ndarray]:
    """An integer column's encoding (the header's fields), chunks and filled values (NULLs as
    their prediction: what later columns predict from)."""
    mask = np.array([v is None for v in values], dtype=bool)
    raw = np.array([0 if v is None else v for v in values], dtype=np.int64)
    best: tuple[int, dict, list[bytes], np.ndarray] | None = None
    for ref in _choices(raw, earlier):
        pred = None if ref is None else earlier[ref]
        filled = raw if pred is None or not mask.any() else np.where(mask, pred, raw)
        for delta in (True, False) if len(values) >= _TRY_ROWS else (True,):
            data, width = _planes(_residual(filled, pred, delta))
            cost = len(lzma.compress(data, preset=1)) if len(values) >= _TRY_ROWS else 0
            if best is None or cost < best[0]:
                enc = {"ref": ref, "delta": delta, "width": width}
                best = (cost, enc, [data], filled)
    assert best is not None
    _, enc, chunks, filled = best
    if kind == "nint":
        chunks = [np.packbits(mask).tobytes(), *chunks]
    return enc, chunks, filled


def _encode_other(values: list[Any], kind: str) -> list[bytes]:
    if kind == "blob":
        values = [None if v is None else base64.b64encode(v).decode() for v in values]
    return [json.dumps(values, separators=(",", ":")).encode()]


def _has_rowid(db: sqlite3.Connection, table: str) -> bool:
    try:
        db.execute(f'SELECT rowid FROM "{table}" LIMIT 1')
    except sqlite3.OperationalError:  # WITHOUT ROWID
        return False
    return True


def _pack_table(db: sqlite3.Connection, name: str, sql: str, blobs: list[bytes]) -> dict:
    """The header entry of one table; its columns' chunks appended to ``blobs``."""
    rowid = _has_rowid(db, name)
    cur = db.execute(f'SELECT {"rowid, " if rowid else ""}* FROM "{name}"')
    cols = [d[0] for d in cur.description]
    rows = cur.fetchall()
    entry = {"name": name, "sql": sql, "rowid": rowid, "rows": len(rows), "columns": []}
    earlier: list[np.ndarray | None] = []
    chunks: list[list[bytes]] = []
    for i, col in enumerate(cols):
        values = [r[i] for r in rows]
        kind = _kind(values)
        column: dict[str, Any] = {"name": col, "kind": kind}
        if kind in ("int", "nint"):
            enc, parts, filled = _encode_int(values, kind, earlier)
            column.update(enc)
            earlier.append(filled)
        else:
            parts = _encode_other(values, kind)
            earlier.append(None)
        entry["columns"].append(column)
        chunks.append(parts)
    _gap(entry["columns"], chunks, earlier)
    for column, parts in zip(entry["columns"], chunks, strict=True):
        column["sizes"] = [len(c) for c in parts]
        blobs += parts
    return entry


def _gap(columns: list[dict], chunks: list[list[bytes]], filled: list) -> None:
    """Store ``start`` as the gap after the previous row's ``end`` where that is smaller (one
    thread's NVTX ranges, back-to-back kernels), when ``end`` is stored against ``start``."""
    names = [c["name"] for c in columns]
    if "start" not in names or "end" not in names:
        return
    i, j = names.index("start"), names.index("end")
    if columns[i]["kind"] != "int" or columns[j].get("ref") != i or len(filled[i]) < _TRY_ROWS:
        return
    with np.errstate(over="ignore"):
        gaps = filled[i] - np.concatenate([[np.int64(0)], filled[j][:-1]])
    data, width = _planes(gaps)
    if len(lzma.compress(data, preset=1)) < len(lzma.compress(chunks[i][-1], preset=1)):
        columns[i].update({"ref": None, "delta": False, "width": width, "gap": j})
        chunks[i] = [data]


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
        header["tables"] = [_pack_table(db, name, sql, blobs) for name, sql in tables]
        header["schema"] = [sql for (sql,) in db.execute(
            "SELECT sql FROM sqlite_master WHERE type IN ('index', 'view', 'trigger') "
            "AND sql IS NOT NULL ORDER BY rowid")]  # fmt: skip
    finally:
        db.close()
    head = json.dumps(header, separators=(",", ":")).encode()
    raw = MAGIC + len(head).to_bytes(8, "little") + head + b"".join(blobs)
    return lzma.compress(raw, preset=_XZ)


def is_packed(raw: bytes) -> bool:
    """Whether decompressed bytes are a column container (else: a SQLite file)."""
    return raw[: len(MAGIC)] in (MAGIC, MAGIC_V1)


def _decode_column(
    column: dict, rows: int, chunks: list[bytes], earlier: list, durations: np.ndarray | None
) -> tuple:
    """(values, filled integers or None) of one column from its chunks; ``durations``: the
    ``end - start`` of the rows, for a ``start`` stored as gaps after the previous end."""
    kind = column["kind"]
    if kind in ("json", "blob"):
        values = json.loads(chunks[0])
        if kind == "blob":
            values = [None if v is None else base64.b64decode(v) for v in values]
        return values, None
    ref = column["ref"]
    pred = None if ref is None else earlier[ref]
    r = _unplanes(chunks[-1], column["width"], rows)
    if durations is None:
        filled = _restore(r, pred, column["delta"])
    else:  # start[i] = start[i-1] + (end - start)[i-1] + gap[i]
        with np.errstate(over="ignore"):
            filled = np.cumsum(r + np.concatenate([[np.int64(0)], durations[:-1]]))
    values = filled.tolist()
    if kind == "nint":
        mask = np.unpackbits(np.frombuffer(chunks[0], dtype=np.uint8), count=rows).tolist()
        values = [None if m else v for m, v in zip(mask, values, strict=True)]
    return values, filled


def _decode_v1(parts: list[np.ndarray], kind: str) -> list[Any]:
    if kind == "int":
        return np.cumsum(parts[0]).tolist()
    if kind == "nint":
        vals = np.cumsum(parts[1]).tolist()
        return [None if m else v for m, v in zip(parts[0].tolist(), vals, strict=True)]
    values = json.loads(parts[0].tobytes())
    if kind == "blob":
        return [None if v is None else base64.b64decode(v) for v in values]
    return values


def _table_columns(t: dict, stream: io.BytesIO, v1: bool) -> list[list[Any]]:
    """Every column of header entry ``t`` read from ``stream``."""
    if v1:
        return [_decode_v1([np.load(stream, allow_pickle=False) for _ in range(c["parts"])],
                           c["kind"]) for c in t["columns"]]  # fmt: skip
    chunks = [[stream.read(n) for n in c["sizes"]] for c in t["columns"]]
    columns: list[list[Any]] = []
    earlier: list[np.ndarray | None] = []
    for c, parts in zip(t["columns"], chunks, strict=True):
        gap = c.get("gap")
        after = None if gap is None else _durations(t["columns"][gap], chunks[gap], t["rows"])
        values, filled = _decode_column(c, t["rows"], parts, earlier, after)
        columns.append(values)
        earlier.append(filled)
    return columns


def _durations(end: dict, parts: list[bytes], rows: int) -> np.ndarray:
    """``end - start`` of each row, from the ``end`` column stored against ``start``."""
    return _restore(_unplanes(parts[-1], end["width"], rows), None, end["delta"])


def unpack(raw: bytes, out: Path) -> Path:
    """Write the SQLite export held by ``raw`` (decompressed container bytes) to ``out``."""
    v1 = raw[: len(MAGIC_V1)] == MAGIC_V1
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
            columns = _table_columns(t, stream, v1)
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
