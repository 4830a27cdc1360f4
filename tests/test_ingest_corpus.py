"""scripts/ingest_corpus.py on a real corpus export: the export is cut after the asked number
of steady iterations (start-up kept), the call's timing rows replace that script's old ones,
and the measured table is recomputed."""

from __future__ import annotations

import csv
import io
import lzma
import shutil
import sqlite3
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WILD = ROOT / "corpus" / "wild"
sys.path.insert(0, str(ROOT))

from scripts import ingest_corpus  # noqa: E402

NAME = "lb_batch1_infer"


def _kernels(path: Path) -> tuple[int, int]:
    db = sqlite3.connect(path)
    try:
        return db.execute("SELECT COUNT(*), MIN(start) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    finally:
        db.close()


def test_ingest_cuts_compresses_and_replaces_the_scripts_timing(tmp_path: Path) -> None:
    call = tmp_path / "call"
    call.mkdir()
    with tarfile.open(call / "corpus-exports.tar", "w") as tar:
        tar.add(WILD / "exports" / f"{NAME}.sqlite.xz", arcname=f"./{NAME}.sqlite.xz")
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

    raw = tmp_path / "raw.sqlite"
    raw.write_bytes(lzma.decompress((WILD / "exports" / f"{NAME}.sqlite.xz").read_bytes()))
    cut = tmp_path / "cut.sqlite"
    cut.write_bytes(lzma.decompress((dest / "exports" / f"{NAME}.sqlite.xz").read_bytes()))
    (n_raw, first_raw), (n_cut, first_cut) = _kernels(raw), _kernels(cut)
    assert 0 < n_cut < n_raw and first_cut == first_raw  # the tail went, start-up stayed
    timing = list(csv.DictReader((dest / "timing.csv").open()))
    mine = [r for r in timing if r["script"] == NAME]
    assert [(r["fix"], r["step_ms"]) for r in mine] == [("none", "2.0000"), ("graphs", "0.5000")]
    others = {r["script"] for r in csv.DictReader((WILD / "timing.csv").open())} - {NAME}
    assert others <= {r["script"] for r in timing}  # other scripts' rows kept
    measured = [r for r in csv.DictReader((dest / "measured.csv").open()) if r["script"] == NAME]
    assert [(r["fix"], r["speedup"]) for r in measured] == [("graphs", "4.0000")]
