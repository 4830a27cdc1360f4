"""The packed export container (``analysis/packed_export.py``) gives back the export it was
made from, exactly: every table's rows with their rowids, values and types, and the schema's
SQL; on real nsys exports of both nsys versions the suite reads."""

from __future__ import annotations

import lzma
import sqlite3
from pathlib import Path

import pytest

from analysis import packed_export as P
from analysis.trace_db import unxz
from tests.conftest import REPO

DATA = REPO / "tests" / "data"
#: nsys 2025.3 as it wrote it (unpruned, H100) and nsys 2022.4 on the CPU box (OS runtime).
RAW = ["gpu_nsys2025_sync_loading", "cpu_nsys2022_sync_loading"]


def _everything(path: Path) -> dict:
    """Schema SQL, and per table every row with its rowid and each value's type."""
    db = sqlite3.connect(path)
    try:
        out: dict = {"schema": sorted(db.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
        ).fetchall(), key=repr)}  # fmt: skip
        out["user_version"] = db.execute("PRAGMA user_version").fetchone()
        tables = [t for (t,) in db.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'")]  # fmt: skip
        for t in tables:
            rows = db.execute(f'SELECT rowid, * FROM "{t}" ORDER BY rowid').fetchall()
            out[t] = [tuple((type(v).__name__, v) for v in r) for r in rows]
        return out
    finally:
        db.close()


@pytest.mark.parametrize("name", RAW)
def test_a_real_export_comes_back_exactly(tmp_path: Path, name: str) -> None:
    raw = tmp_path / f"{name}.sqlite"
    raw.write_bytes(lzma.decompress((DATA / f"{name}.sqlite.xz").read_bytes()))
    packed = P.pack_file(raw, tmp_path / f"{name}{P.SUFFIX}")
    (tmp_path / "out").mkdir()
    back = unxz(packed, tmp_path / "out")
    assert back.name == f"{name}.sqlite"
    want, got = _everything(raw), _everything(back)
    assert sum(len(v) for k, v in want.items() if k not in ("schema", "user_version")) > 1000
    assert got == want


def test_it_is_smaller_than_the_same_export_xz_compressed(tmp_path: Path) -> None:
    """Why it exists: integer columns stored as differences compress far better."""
    raw = tmp_path / "x.sqlite"
    raw.write_bytes(lzma.decompress((DATA / f"{RAW[0]}.sqlite.xz").read_bytes()))
    xz = lzma.compress(raw.read_bytes(), preset=9 | lzma.PRESET_EXTREME)
    assert len(P.pack(raw)) < 0.8 * len(xz)


def test_every_committed_corpus_export_is_packed_and_opens(tmp_path: Path) -> None:
    exports = sorted((REPO / "corpus" / "wild" / "exports").iterdir())
    assert exports and all(p.name.endswith(P.SUFFIX) for p in exports)
    with lzma.open(exports[0]) as fh:
        assert P.is_packed(fh.read(len(P.MAGIC)))
    db = sqlite3.connect(unxz(exports[0], tmp_path))
    try:
        assert db.execute("SELECT COUNT(*) FROM StringIds").fetchone()[0] > 0
    finally:
        db.close()


def test_a_plain_xz_export_still_reads(tmp_path: Path) -> None:
    out = unxz(DATA / f"{RAW[1]}.sqlite.xz", tmp_path)
    assert out.name == f"{RAW[1]}.sqlite" and out.read_bytes()[:15] == b"SQLite format 3"
