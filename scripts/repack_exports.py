"""Pack nsys exports (``.sqlite.xz`` or ``.sqlite.cols.xz`` of an older layout) into the
current packed container, in place, each checked to give back every table exactly first.

    python scripts/repack_exports.py PATH... [--dry-run]

``NAME.sqlite.xz`` becomes ``NAME.sqlite.cols.xz`` (the old file is removed; ``git add -A``
sees the rename); a packed export is written anew under its own name. Why: the container's
layout got smaller (:mod:`analysis.packed_export`), and the committed exports and fixtures
are the repository's largest files. ``--dry-run`` prints the sizes and writes nothing.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from analysis.packed_export import SUFFIX, pack, unpack  # noqa: E402
from analysis.trace_db import sqlite_name, unxz  # noqa: E402


def everything(path: Path) -> dict:
    """Schema SQL, user_version, and per table every row with its rowid and value types."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        out: dict = {"schema": sorted(db.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
        ).fetchall(), key=repr)}  # fmt: skip
        out["user_version"] = db.execute("PRAGMA user_version").fetchone()
        tables = [t for (t,) in db.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'")]  # fmt: skip
        for t in tables:
            sql = f'SELECT rowid, * FROM "{t}" ORDER BY rowid' if _has_rowid(db, t) else (
                f'SELECT * FROM "{t}"')  # fmt: skip
            rows = db.execute(sql).fetchall()
            out[t] = [tuple((type(v).__name__, v) for v in r) for r in rows]
        return out
    finally:
        db.close()


def _has_rowid(db: sqlite3.Connection, table: str) -> bool:
    try:
        db.execute(f'SELECT rowid FROM "{table}" LIMIT 1')
    except sqlite3.OperationalError:
        return False
    return True


def repack(path: Path, dry_run: bool = False) -> str:
    """``path`` packed anew beside itself (checked first); a line saying the sizes."""
    import lzma

    dest = path.with_name(sqlite_name(path).removesuffix(".sqlite") + SUFFIX)
    with tempfile.TemporaryDirectory() as tmp:
        raw = unxz(path, Path(tmp))
        data = pack(raw)
        back = unpack(lzma.decompress(data), Path(tmp) / "back.sqlite")
        if everything(back) != everything(raw):
            raise SystemExit(f"{path}: the packed export does not give it back; left as it was")
    line = f"{path}: {path.stat().st_size} -> {len(data)} bytes ({dest.name})"
    if dry_run:
        return line
    tmp_dest = dest.with_name(f".{dest.name}.tmp")
    tmp_dest.write_bytes(data)
    tmp_dest.replace(dest)
    if dest != path:
        path.unlink()
    return line


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("paths", nargs="+", type=Path)
    p.add_argument("--dry-run", action="store_true", help="print the sizes, write nothing")
    a = p.parse_args(argv)
    for path in a.paths:
        print(repack(path, a.dry_run), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
