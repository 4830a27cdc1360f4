"""scripts/ingest_corpus.py drops the OS-runtime calls no detector reads by default from the
corpus exports (a compiling thread's mmap64/munmap rows were most of a whole-process capture),
only in reports with kernels, and the findings stay the same."""

from __future__ import annotations

import lzma
import shutil
import sqlite3
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts import ingest_corpus  # noqa: E402
from tests._fixtures import sqlite_fixture, xz_fixture  # noqa: E402

DATA = ROOT / "tests" / "data"


def _unxz(src: Path, dest: Path) -> Path:
    dest.write_bytes(lzma.decompress(src.read_bytes()))
    return dest


def _copy(name: str, dest: Path) -> Path:
    """A writable copy of the fixture ``name``'s SQLite file."""
    shutil.copyfile(sqlite_fixture(name), dest)
    return dest


def _calls(path: Path) -> dict[str, int]:
    db = sqlite3.connect(path)
    try:
        sql = """SELECT s.value, COUNT(*) FROM OSRT_API AS o JOIN StringIds AS s
                 ON s.id = o.nameId GROUP BY s.value"""
        return dict(db.execute(sql).fetchall())
    finally:
        db.close()


def _findings(path: Path) -> list[tuple]:
    T = ingest_corpus.T
    from analysis.detect import diagnose

    with T.open_trace(path) as tr:
        found = diagnose(tr, {"predict": {"untraced": False}})
    return [(f.klass, f.state, f.impact, f.metrics, f.reason) for f in found]


def test_the_calls_read_are_every_calls_threshold_and_the_host_waits() -> None:
    names = set(ingest_corpus.read_calls())
    assert {"read", "open64", "poll", "sem_wait", "pthread_cond_timedwait"} <= names
    assert "pthread_cond_wait" in names  # stage_imbalance's wait_calls
    assert not {"mmap64", "munmap", "stat64", "close", "fstat64"} & names


def test_a_gpu_export_loses_the_unread_calls_and_no_finding_changes(tmp_path: Path) -> None:
    """The H100 sync_loading export (nsys 2025.3): close, fstat64 and an unnamed call go,
    every read, open64, poll and condition wait stays, the findings are the same."""
    orig = _copy("gpu_nsys2025_sync_loading", tmp_path / "orig.sqlite")
    path = _copy("gpu_nsys2025_sync_loading", tmp_path / "x.sqlite")
    ingest_corpus.drop_unread(path, calls=True)
    before, after = _calls(orig), _calls(path)
    read = set(ingest_corpus.read_calls())
    assert after == {k: n for k, n in before.items() if k in read}
    assert set(before) - set(after) >= {"close", "fstat64"}
    assert _findings(path) == _findings(orig)


@pytest.mark.parametrize(
    "name", ["cpu_nsys2022_stage_pp_balanced", "cpu_nsys2022_gil_decoy_baseline"]
)
def test_a_cpu_export_keeps_every_call(tmp_path: Path, name: str) -> None:
    """Without kernels every OS-runtime call of a main thread is a rank's idle, and the span of
    all activity the window: nothing is dropped."""
    path = _copy(name, tmp_path / "x.sqlite")
    before = _calls(path)
    ingest_corpus.drop_unread(path, calls=True)
    assert _calls(path) == before


def test_prune_osrt_on_an_xz_export(tmp_path: Path) -> None:
    """``--prune FILE --osrt``: the committed corpus exports, without a cut."""
    path = tmp_path / "x.sqlite.xz"
    path.write_bytes(xz_fixture("gpu_nsys2025_sync_loading").read_bytes())
    assert ingest_corpus.main(["--prune", str(path), "--osrt"]) == 0
    raw = _unxz(path, tmp_path / "x.sqlite")
    assert set(_calls(raw)) <= set(ingest_corpus.read_calls())
