"""corpus/ingest_pending.py on a real corpus export standing in for a pending entry's capture: an
entry whose label stands moves with its export, labels, timing and README row; one whose label
falls stays pending with its timing rows kept; --dry-run writes nothing; --only leaves the
other scripts of a call out."""

from __future__ import annotations

import csv
import io
import lzma
import shutil
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WILD = ROOT / "corpus" / "wild"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "corpus"))

import ingest_pending  # noqa: E402  corpus/ingest_pending.py

from analysis.packed_export import SUFFIX  # noqa: E402
from analysis.trace_db import unxz  # noqa: E402

# made pending here; the export is lb_batch1_infer's
STANDS, FALLS = "fm_mlp_fp32", "lt_resnet_nchw"


def _call(tmp: Path) -> Path:
    call = tmp / "call"
    call.mkdir()
    raw = unxz(WILD / "exports" / f"lb_batch1_infer{SUFFIX}", tmp)
    sent = call / f"{STANDS}.sqlite.xz"
    sent.write_bytes(lzma.compress(raw.read_bytes()))
    with tarfile.open(call / "corpus-exports.tar", "w") as tar:
        tar.add(sent, arcname=f"./{STANDS}.sqlite.xz")
    rows = [
        [STANDS, "none", "1", "35.0000", "60", "0", ""],
        [STANDS, "amp", "1", "3.5000", "400", "0", ""],
        [STANDS, "tf32", "1", "7.0000", "200", "0", ""],
        [FALLS, "none", "1", "12.0000", "100", "0", ""],
        [FALLS, "channels_last", "1", "11.5000", "100", "0", ""],
    ]
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([ingest_pending.measure.TIMING_FIELDS, *rows])
    (call / "corpus-timing.csv").write_text(buf.getvalue())
    return call


def _dest(tmp: Path) -> Path:
    dest = tmp / "wild"
    (dest / "pending").mkdir(parents=True)
    (dest / "exports").mkdir()
    shutil.copyfile(WILD / "measured.csv", dest / "measured.csv")
    readme = (WILD / "README.md").read_text()  # without the section an ingest writes
    head, sep, rest = readme.partition(ingest_pending.SECTION + "\n")
    (dest / "README.md").write_text(head + rest[rest.index("\n## ") + 1 :] if sep else readme)
    for name in ("README.md", "timing.csv.rows"):
        shutil.copyfile(WILD / "pending" / name, dest / "pending" / name)
    # the two entries pending, wherever the repository's corpus has them today
    ours = (STANDS, FALLS)
    scored, fields = _rows(WILD / "labels.csv")
    pending, _ = _rows(WILD / "pending" / "labels.csv")
    mine = [r for r in scored + pending if r["script"] in ours]
    _write(dest / "labels.csv", fields, [r for r in scored if r["script"] not in ours])
    _write(dest / "pending" / "labels.csv", fields,
           [r for r in pending if r["script"] not in ours] + mine)  # fmt: skip
    timing, tfields = _rows(WILD / "timing.csv")
    _write(dest / "timing.csv", tfields, [r for r in timing if r["script"] not in ours])
    return dest


def _rows(path: Path) -> tuple[list[dict], list[str]]:
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        return list(reader), list(reader.fieldnames or [])


def _write(path: Path, fields: list[str], rows: list[dict]) -> None:
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def _scripts(path: Path) -> list[str]:
    with path.open(newline="") as fh:
        return [r["script"] for r in csv.DictReader(fh)]


def test_a_standing_entry_moves_and_a_falling_one_stays(tmp_path: Path) -> None:
    call, dest = _call(tmp_path), _dest(tmp_path)
    before = (dest / "labels.csv").read_text()
    assert ingest_pending.main([str(call), "--dest", str(dest), "--dry-run"]) == 0
    assert (dest / "labels.csv").read_text() == before  # nothing written
    assert not list((dest / "exports").iterdir())

    kept_before = (dest / "pending" / "timing.csv.rows").read_text().splitlines()
    assert ingest_pending.main([str(call), "--dest", str(dest)]) == 0
    assert _scripts(dest / "labels.csv")[-1] == STANDS
    assert STANDS not in _scripts(dest / "pending" / "labels.csv")
    assert FALLS in _scripts(dest / "pending" / "labels.csv")
    assert (dest / "exports" / f"{STANDS}{SUFFIX}").stat().st_size > 1000
    assert _scripts(dest / "timing.csv").count(STANDS) == 3
    assert FALLS not in _scripts(dest / "timing.csv")
    measured = list(csv.DictReader((dest / "measured.csv").open(newline="")))
    amp = next(r for r in measured if r["script"] == STANDS and r["fix"] == "amp")
    assert float(amp["speedup"]) == 10.0 and amp["label_stands"] == "True"
    readme = (dest / "README.md").read_text()
    assert ingest_pending.SECTION in readme and f"| {STANDS} | fp32_math | 35.0 |" in readme
    assert readme.index(ingest_pending.SECTION) < readme.index("## The committed exports")
    pending_readme = (dest / "pending" / "README.md").read_text()
    assert f"| {STANDS} |" not in pending_readme and f"| {FALLS} |" in pending_readme
    kept = (dest / "pending" / "timing.csv.rows").read_text().splitlines()
    assert kept[: len(kept_before)] == kept_before
    assert sum(ln.startswith(f"{FALLS},") for ln in kept[len(kept_before) :]) == 2


def test_only_leaves_the_other_scripts_of_a_call_out(tmp_path: Path) -> None:
    call, dest = _call(tmp_path), _dest(tmp_path)
    assert ingest_pending.main([str(call), "--dest", str(dest), "--only", FALLS]) == 0
    assert STANDS in _scripts(dest / "pending" / "labels.csv")
    assert not (dest / "exports" / f"{STANDS}{SUFFIX}").exists()
    assert ingest_pending.SECTION not in (dest / "README.md").read_text()  # none moved
    kept = (dest / "pending" / "timing.csv.rows").read_text().splitlines()
    assert not any(ln.startswith(f"{STANDS},") for ln in kept)


def test_a_later_call_keeps_the_earlier_entries_rows() -> None:
    """README.md's section written again: the rows of entries the new call does not name stay,
    a row it names is replaced."""
    new = ingest_pending.section([], ["b"], {})
    old = new.replace("| b | ? |", "| a | old |") + "| b | stale |\n"
    rows = [ln for ln in ingest_pending.merged_section(old, new).splitlines() if ln[:4] in
            ("| a ", "| b ")]  # fmt: skip
    assert [r.split("|")[1:3] for r in rows] == [[" a ", " old "], [" b ", " ? "]]
