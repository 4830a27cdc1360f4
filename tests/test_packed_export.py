"""The packed export container (``analysis/packed_export.py``) gives back the export it was
made from, exactly: every table's rows with their rowids, values and types, and the schema's
SQL; on real nsys exports of both nsys versions the suite reads."""

from __future__ import annotations

import json
import lzma
import shutil
import sqlite3
from pathlib import Path

import pytest

from analysis import packed_export as P
from analysis.trace_db import unxz
from tests._fixtures import sqlite_fixture
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


def _header(packed: bytes) -> dict:
    raw = lzma.decompress(packed)
    n = int.from_bytes(raw[len(P.MAGIC) : len(P.MAGIC) + 8], "little")
    return json.loads(raw[len(P.MAGIC) + 8 : len(P.MAGIC) + 8 + n])


@pytest.mark.parametrize("name", RAW)
def test_a_real_export_comes_back_exactly(tmp_path: Path, name: str) -> None:
    raw = tmp_path / f"{name}.sqlite"
    shutil.copyfile(sqlite_fixture(name), raw)
    packed = P.pack_file(raw, tmp_path / f"{name}{P.SUFFIX}")
    (tmp_path / "out").mkdir()
    back = unxz(packed, tmp_path / "out")
    assert back.name == f"{name}.sqlite"
    want, got = _everything(raw), _everything(back)
    assert sum(len(v) for k, v in want.items() if k not in ("schema", "user_version")) > 1000
    assert got == want
    # every way of storing an integer column was taken and came back: against another
    # column (an end to its start), as gaps after the previous end, raw and as differences
    columns = [c for t in _header(packed.read_bytes())["tables"] for c in t["columns"]]
    assert {c.get("ref") is not None for c in columns if "ref" in c} == {True, False}
    assert any("gap" in c for c in columns) and {c.get("delta") for c in columns} >= {True, False}


def test_it_is_smaller_than_the_same_export_xz_compressed(tmp_path: Path) -> None:
    """Why it exists: integer columns stored as residuals compress far better (and better
    than in the first layout, as differences alone)."""
    raw = tmp_path / "x.sqlite"
    shutil.copyfile(sqlite_fixture(RAW[0]), raw)
    xz = lzma.compress(raw.read_bytes(), preset=9 | lzma.PRESET_EXTREME)
    assert len(P.pack(raw)) < 0.54 * len(xz)  # the first layout: 0.57, this one 0.51


def test_the_first_layout_still_reads(tmp_path: Path) -> None:
    """An export packed in the first layout (BNSCOLS1: int64 differences in .npy arrays, as
    exports packed before the current layout are) gives back the same export."""
    v1 = DATA / "packed_v1" / f"cpu_nsys2022_user_loop_memory{P.SUFFIX}"
    with lzma.open(v1) as fh:
        assert fh.read(len(P.MAGIC_V1)) == P.MAGIC_V1 != P.MAGIC
    back = unxz(v1, tmp_path)
    assert _everything(back) == _everything(sqlite_fixture("cpu_nsys2022_user_loop_memory"))


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
    plain = tmp_path / f"{RAW[1]}.sqlite.xz"
    plain.write_bytes(lzma.compress(sqlite_fixture(RAW[1]).read_bytes()))
    (tmp_path / "out").mkdir()
    out = unxz(plain, tmp_path / "out")
    assert out.name == f"{RAW[1]}.sqlite" and out.read_bytes()[:15] == b"SQLite format 3"
    assert _everything(out) == _everything(sqlite_fixture(RAW[1]))
