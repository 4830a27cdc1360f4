"""scripts/ingest_corpus.py on a real corpus export: the tables, columns and strings no reader
uses are dropped, the export is cut after the asked number of steady iterations (start-up kept)
but never before as many of the script's timed steps, the call's timing rows replace that
script's old ones, the measured table is recomputed, --recut cuts the committed exports again
and --prune drops the same from another export."""

from __future__ import annotations

import csv
import io
import lzma
import shutil
import sqlite3
import sys
import tarfile
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
WILD = ROOT / "corpus" / "wild"
sys.path.insert(0, str(ROOT))

from analysis.packed_export import SUFFIX  # noqa: E402
from analysis.trace_db import unxz  # noqa: E402
from scripts import ingest_corpus  # noqa: E402
from tests._fixtures import sqlite_fixture, xz_fixture  # noqa: E402

NAME = "lb_batch1_infer"


def _unpacked(path: Path, into: Path) -> Path:
    """A committed (packed) export as SQLite, in its own folder ``into``."""
    into.mkdir(parents=True, exist_ok=True)
    return unxz(path, into)


def _tables(path: Path) -> set[str]:
    db = sqlite3.connect(path)
    try:
        return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        db.close()


def _kernels(path: Path) -> tuple[int, int]:
    db = sqlite3.connect(path)
    try:
        return db.execute("SELECT COUNT(*), MIN(start) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    finally:
        db.close()


def test_ingest_cuts_compresses_and_replaces_the_scripts_timing(tmp_path: Path) -> None:
    call = tmp_path / "call"
    call.mkdir()
    # a device call's tar holds xz-compressed SQLite, as capture-corpus.sh writes it
    sent = call / f"{NAME}.sqlite.xz"
    sent.write_bytes(
        lzma.compress(_unpacked(WILD / "exports" / f"{NAME}{SUFFIX}", tmp_path / "s").read_bytes())
    )
    with tarfile.open(call / "corpus-exports.tar", "w") as tar:
        tar.add(sent, arcname=f"./{NAME}.sqlite.xz")
    rows = [
        [NAME, "none", "1", "2.0000", "100", "0", ""],
        [NAME, "graphs", "1", "0.5000", "400", "0", ""],
    ]
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([ingest_corpus.measure.TIMING_FIELDS, *rows])
    (call / "corpus-timing.csv").write_text(buf.getvalue())
    dest = tmp_path / "wild"
    dest.mkdir()
    shutil.copyfile(WILD / "labels.csv", dest / "labels.csv")
    shutil.copyfile(WILD / "timing.csv", dest / "timing.csv")

    assert ingest_corpus.main([str(call), "--iterations", "3", "--dest", str(dest)]) == 0

    raw = _unpacked(WILD / "exports" / f"{NAME}{SUFFIX}", tmp_path / "raw")
    cut = _unpacked(dest / "exports" / f"{NAME}{SUFFIX}", tmp_path / "cut")
    (n_raw, first_raw), (n_cut, first_cut) = _kernels(raw), _kernels(cut)
    assert 0 < n_cut < n_raw and first_cut == first_raw  # the tail went, start-up stayed
    assert _tables(cut) == _tables(raw) - set(ingest_corpus.UNREAD)  # every other table kept
    timing = list(csv.DictReader((dest / "timing.csv").open()))
    mine = [r for r in timing if r["script"] == NAME]
    assert [(r["fix"], r["step_ms"]) for r in mine] == [("none", "2.0000"), ("graphs", "0.5000")]
    others = {r["script"] for r in csv.DictReader((WILD / "timing.csv").open())} - {NAME}
    assert others <= {r["script"] for r in timing}  # other scripts' rows kept
    measured = [r for r in csv.DictReader((dest / "measured.csv").open()) if r["script"] == NAME]
    assert [(r["fix"], r["speedup"]) for r in measured] == [("graphs", "4.0000")]


def test_the_cut_keeps_at_least_as_many_timed_steps(tmp_path: Path) -> None:
    """A step longer than the repeat the search found moves the cut later (by the step count),
    and one that reaches past the last kernel keeps everything."""
    raw = _unpacked(WILD / "exports" / f"{NAME}{SUFFIX}", tmp_path / "raw")
    by_count, found = ingest_corpus.cut_ns(raw, 3)
    assert by_count is not None and found > 6
    with ingest_corpus.T.open_trace(raw) as tr:
        starts = ingest_corpus.S.gpu_iterations(tr, ingest_corpus.load_thresholds().window).starts
    assert by_count == int(starts[3])
    later, _ = ingest_corpus.cut_ns(raw, 3, step_ns=(starts[3] - starts[0]) / 3 * 1.5)
    assert abs(later - (starts[0] + (starts[3] - starts[0]) * 1.5)) <= 1  # 4.5 repeats in
    assert ingest_corpus.cut_ns(raw, 3, step_ns=1e12) == (None, found)


def test_recut_cuts_the_committed_exports_again(tmp_path: Path) -> None:
    dest = tmp_path / "wild"
    (dest / "exports").mkdir(parents=True)
    src = WILD / "exports" / f"{NAME}{SUFFIX}"
    shutil.copyfile(src, dest / "exports" / src.name)
    shutil.copyfile(WILD / "timing.csv", dest / "timing.csv")
    assert ingest_corpus.main(["--recut", "--iterations", "3", "--dest", str(dest)]) == 0
    cut = _unpacked(dest / "exports" / src.name, tmp_path / "cut")
    raw = _unpacked(src, tmp_path / "raw")
    assert 0 < _kernels(cut)[0] < _kernels(raw)[0]
    assert (dest / "timing.csv").read_text() == (WILD / "timing.csv").read_text()


def test_drop_unread_drops_those_tables_columns_and_strings_alone(tmp_path: Path) -> None:
    """On a real H100 export (nsys 2025.3, tests/data, the one fixture kept as nsys wrote it):
    the UNREAD tables and the ENUM_* tables not read go, and the UNREAD_COLUMNS, and the CUDA
    event records no sync waits for; every other table keeps all its rows and columns (declarations too), StringIds every string a row still
    refers to and its largest id; the readers see the same; the file shrinks (VACUUM)."""
    path = tmp_path / "x.sqlite"
    shutil.copyfile(sqlite_fixture("gpu_nsys2025_sync_loading"), path)
    orig = tmp_path / "orig.sqlite"
    shutil.copyfile(path, orig)
    before, size, cols = _rows(path), path.stat().st_size, _schema(path)
    assert len(set(ingest_corpus.UNREAD) & set(before)) >= 3
    assert "mangledName" in cols["CUPTI_ACTIVITY_KIND_KERNEL"]
    gone = {
        t
        for t in before
        if t in ingest_corpus.UNREAD
        or (t.startswith("ENUM_") and t not in ingest_corpus.READ_ENUMS)
    }
    assert (
        set(ingest_corpus.READ_ENUMS)
        <= set(before) - gone
        < set(before) - set(ingest_corpus.UNREAD)
    )
    events = "CUPTI_ACTIVITY_KIND_CUDA_EVENT"
    awaited = (
        sqlite3.connect(orig)
        .execute(
            f"""SELECT COUNT(*) FROM {events} AS e WHERE EXISTS (SELECT 1 FROM
            CUPTI_ACTIVITY_KIND_SYNCHRONIZATION AS y WHERE y.eventSyncId = e.eventSyncId
            AND y.eventId = e.eventId)"""
        )
        .fetchone()[0]
    )
    assert awaited < before[events]  # none: its syncs wait on streams, not on events
    ingest_corpus.drop_unread(path)
    after = _rows(path)
    assert 0 < after.pop("StringIds") < before["StringIds"]
    assert after.pop(events) == awaited  # the records some sync waits for (analysis/detect/_events)
    assert after == {
        t: n for t, n in before.items() if t not in gone and t not in ("StringIds", events)
    }
    unread = ingest_corpus.UNREAD_COLUMNS
    assert _schema(path) == {
        t: {c: d for c, d in cs.items() if c not in unread.get(t, ())}
        for t, cs in cols.items()
        if t not in gone
    }
    db = sqlite3.connect(path)
    try:
        for t, c in [("CUPTI_ACTIVITY_KIND_KERNEL", "demangledName"),
                     ("CUPTI_ACTIVITY_KIND_KERNEL", "shortName"),
                     ("CUPTI_ACTIVITY_KIND_RUNTIME", "nameId"), ("OSRT_API", "nameId"),
                     ("NVTX_EVENTS", "textId"), ("ThreadNames", "nameId")]:  # fmt: skip
            lost = f"SELECT COUNT(*) FROM {t} WHERE {c} NOT IN (SELECT id FROM StringIds)"
            assert db.execute(lost).fetchone()[0] == 0, (t, c)
        top = "SELECT MAX(id) FROM StringIds"
        assert db.execute(top).fetchone() == sqlite3.connect(orig).execute(top).fetchone()
    finally:
        db.close()
    T = ingest_corpus.T
    with T.open_trace(orig) as a, T.open_trace(path) as b:
        for read in (T.kernels, T.memcpy, T.memset, T.cuda_api, T.sync_events, T.osrt):
            pd.testing.assert_frame_equal(read(a), read(b))
        for read in (T.nvtx_ranges, T.threads, T.gpu_info):
            pd.testing.assert_frame_equal(read(a), read(b))
    assert path.stat().st_size < size
    pruned = _rows(path), _schema(path)
    ingest_corpus.drop_unread(path)  # nothing more to drop
    assert (_rows(path), _schema(path)) == pruned


def test_prune_rewrites_an_xz_export_in_place(tmp_path: Path) -> None:
    """``--prune FILE``: the same drop on a committed-style export, compressed again."""
    path = tmp_path / "x.sqlite.xz"
    shutil.copyfile(xz_fixture("gpu_nsys2025_sync_loading"), path)
    size = path.stat().st_size
    assert ingest_corpus.main(["--prune", str(path)]) == 0
    assert path.stat().st_size < size
    raw = tmp_path / "x.sqlite"
    raw.write_bytes(lzma.decompress(path.read_bytes()))
    assert not set(ingest_corpus.UNREAD) & _tables(raw)


def _schema(path: Path) -> dict[str, dict[str, tuple]]:
    """Table -> column -> (type, not null, default, primary key), in the table's order."""
    db = sqlite3.connect(path)
    try:
        names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {t: {r[1]: r[2:] for r in db.execute(f'PRAGMA table_info("{t}")')} for t in names}
    finally:
        db.close()


def _rows(path: Path) -> dict[str, int]:
    db = sqlite3.connect(path)
    try:
        names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {t: db.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0] for t in names}
    finally:
        db.close()


def test_add_keeps_earlier_rounds_and_each_switch_meets_its_own_none(tmp_path: Path) -> None:
    """``--add TAG``: a later call that timed one more switch beside its own ``none`` keeps the
    committed rounds; the old switch is compared with the old ``none``, the new with the new."""
    import measure  # corpus/measure.py, on the path ingest_corpus sets

    fields = measure.TIMING_FIELDS
    old = tmp_path / "timing.csv"
    rows = [("s", "none", "1", "100"), ("s", "none", "2", "100"), ("s", "fast", "1", "50"),
            ("s", "fast", "2", "50")]  # fmt: skip
    old.write_text(
        ",".join(fields) + "\n" + "".join(f"{a},{b},{c},{d},9,0,\n" for a, b, c, d in rows)
    )
    call = tmp_path / "call"
    call.mkdir()
    new = [("s", "none", "1", "80"), ("s", "gone", "1", "10"), ("s", "none", "2", "80"),
           ("s", "gone", "2", "10")]  # fmt: skip
    (call / "corpus-timing.csv").write_text(
        ",".join(fields) + "\n" + "".join(f"{a},{b},{c},{d},9,0,\n" for a, b, c, d in new)
    )
    merged = ingest_corpus.merge_timing([call], old, add="x2")
    assert len(merged) == 8 and {r["repeat"] for r in merged} == {"1", "2", "x2-1", "x2-2"}
    assert ingest_corpus.merge_timing([call], old, add=None)[0]["repeat"] == "1"  # replaced
    out = tmp_path / "merged.csv"
    with out.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        w.writerows(merged)
    labels = tmp_path / "labels.csv"
    labels.write_text("script,label,label_fix,other_fixes,also,removes\n"
                      "s,data_stall,fast,gone,,data_stall=gone\n")  # fmt: skip
    got = {r["fix"]: float(r["speedup"]) for r in measure.summarize(str(out), str(labels))}
    assert got == {"fast": 2.0, "gone": 8.0}  # not 90/50 and 90/10 (both calls' none pooled)
