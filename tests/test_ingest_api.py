"""scripts/ingest_corpus.py drops the CUDA API calls no detector reads by default: calls of no
role shorter than ``window.min_call_ns`` that no GPU activity or sync record refers to (PyTorch
2.11's cuKernelGetName before every launch), only in reports with kernels, never the table's
first start or last end. The detectors read the same calls and find the same."""

from __future__ import annotations

import lzma
import sqlite3
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts import ingest_corpus  # noqa: E402
from tests._fixtures import xz_fixture  # noqa: E402

T, C = ingest_corpus.T, ingest_corpus.C
#: The H100 sync_loading export as nsys 2025.3 wrote it (the one fixture left unpruned).
SRC = xz_fixture("gpu_nsys2025_sync_loading")
API = "CUPTI_ACTIVITY_KIND_RUNTIME"


def _unxz(dest: Path) -> Path:
    dest.write_bytes(lzma.decompress(SRC.read_bytes()))
    return dest


def _api(path: Path) -> list[tuple]:
    """(start, end, name, correlation id, thread) of every API row, in table order."""
    db = sqlite3.connect(path)
    try:
        sql = f"""SELECT r.start, r."end", s.value, r.correlationId, r.globalTid
                  FROM {API} AS r LEFT JOIN StringIds AS s ON s.id = r.nameId ORDER BY r.rowid"""
        return db.execute(sql).fetchall()
    finally:
        db.close()


def _referred(path: Path) -> set[int]:
    """Correlation ids that the export's GPU activity and sync records hold."""
    db = sqlite3.connect(path)
    try:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        out: set[int] = set()
        for t in tables:
            cols = {r[1] for r in db.execute(f'PRAGMA table_info("{t}")')}
            if t != API and "correlationId" in cols:
                out |= {r[0] for r in db.execute(f'SELECT correlationId FROM "{t}"')}
        return out
    finally:
        db.close()


def _read(path: Path, cfg: dict | None = None) -> tuple:
    """What the detectors read of the API table, the window, and what they find."""
    from analysis.detect import diagnose, load_thresholds

    with T.open_trace(path) as tr:
        st = C.steady(tr, load_thresholds(cfg).window)
        calls = C.window_calls(tr, st)
        found = diagnose(tr, {**(cfg or {}), "predict": {"untraced": False}})
        return (
            T.window(tr),
            {k: v.tolist() for k, v in calls.items()},
            [(f.klass, f.state, f.impact, f.metrics, f.reason) for f in found],
        )


def test_the_short_calls_of_no_role_that_nothing_refers_to_go_alone(tmp_path: Path) -> None:
    orig = _unxz(tmp_path / "orig.sqlite")
    path = _unxz(tmp_path / "x.sqlite")
    ingest_corpus.drop_unread(path, api=True)
    before, after = _api(orig), _api(path)
    with T.open_trace(orig) as tr:
        roles = {C.api_names(tr)[i][0] for i in C.category_ids(tr, *C.CATEGORIES[1:])}
    tiny = ingest_corpus.load_thresholds().window.min_call_ns
    referred = _referred(orig)
    first, last = min(r[0] for r in before), max(r[1] for r in before)

    def unread(r: tuple) -> bool:
        role = r[2] is not None and T.api_base_name(r[2]) in roles
        edge = r[0] == first or r[1] == last
        return r[1] - r[0] < tiny and not role and r[3] not in referred and not edge

    assert after == [r for r in before if not unread(r)]
    gone = [r for r in before if unread(r)]
    assert len(gone) > 0.3 * len(before)  # 857 of 2,102 rows
    assert {T.api_base_name(r[2]) for r in gone} >= {"cuKernelGetName"}
    # every kernel, copy, memset and sync keeps the call that made it (where it was recorded)
    assert referred & {r[3] for r in before} <= {r[3] for r in after}
    assert _read(path) == _read(orig)


def test_a_smaller_min_call_ns_would_have_read_some_of_them(tmp_path: Path) -> None:
    """The limit the docs state: the calls are unread at the default ``window.min_call_ns``
    only; ``--set window.min_call_ns=1`` reads calls the pruned export no longer has."""
    orig = _unxz(tmp_path / "orig.sqlite")
    path = _unxz(tmp_path / "x.sqlite")
    ingest_corpus.drop_unread(path, api=True)
    every = {"window": {"min_call_ns": 1}}
    assert len(_read(path, every)[1]["start"]) < len(_read(orig, every)[1]["start"])


def test_a_report_without_kernels_keeps_every_call(tmp_path: Path) -> None:
    """Without GPU activity, whether the API table has any row at all is read (a capture whose
    GPU activity was lost): nothing goes."""
    path = _unxz(tmp_path / "x.sqlite")
    db = sqlite3.connect(path)
    db.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL")
    db.commit()
    db.close()
    before = _api(path)
    ingest_corpus.drop_unread(path, api=True)
    assert _api(path) == before and len(before) > 0


def test_prune_api_on_an_xz_export(tmp_path: Path) -> None:
    """``--prune FILE --api``: a committed-style export, compressed again and smaller."""
    path = tmp_path / "x.sqlite.xz"
    path.write_bytes(SRC.read_bytes())
    raw = _unxz(tmp_path / "raw.sqlite")
    ingest_corpus.drop_unread(raw)  # the same prune without the calls
    assert ingest_corpus.main(["--prune", str(path), "--api"]) == 0
    out = tmp_path / "out.sqlite"
    out.write_bytes(lzma.decompress(path.read_bytes()))
    assert 0 < len(_api(out)) < len(_api(raw))
    assert len(path.read_bytes()) < len(ingest_corpus._xz(raw.read_bytes()))
