"""Bring a wild-corpus capture (scripts/device/capture-corpus.sh) into corpus/wild/.

    python scripts/ingest_corpus.py CALL_OUT [CALL_OUT ...] [--iterations 12] [--dest corpus/wild]

Each CALL_OUT is one device call's $OUT (corpus-exports.tar, corpus-timing.csv). For every
export: the call-chain tables are dropped and every timed row after the ``--iterations``-th
steady iteration (found by the detectors' own iteration search, no NVTX needed) is removed with
scripts/trim_export.py, so start-up, compilation and autotuning stay whole; then xz -9e into
``DEST/exports/NAME.sqlite.xz``. The timing CSVs are joined into ``DEST/timing.csv`` (rows of
the scripts captured replace that script's old rows; others are kept) and ``DEST/measured.csv``
is recomputed. Prints one line per export: raw and committed size, iterations kept.
"""

from __future__ import annotations

import argparse
import csv
import io
import lzma
import shutil
import sqlite3
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "corpus"))

import measure  # noqa: E402  corpus/measure.py

from analysis import trace as T  # noqa: E402
from analysis.detect import _steady as S  # noqa: E402
from analysis.detect import load_thresholds  # noqa: E402
from scripts.trim_export import first_activity, trim  # noqa: E402

CALLCHAINS = ("OSRT_CALLCHAINS", "CUDA_CALLCHAINS")


def cut_ns(path: Path, iterations: int) -> tuple[int | None, int]:
    """(end of the ``iterations``-th steady iteration, iterations found); None: keep it all."""
    wcfg = load_thresholds()["window"]
    with T.open_trace(path) as tr:
        it = S.gpu_iterations(tr, wcfg) or S.nvtx_iterations(tr, wcfg)
    if it is None:
        return None, 0
    return (int(it.starts[iterations]) if it.n > iterations else None), it.n


def ingest_export(raw: Path, dest: Path, iterations: int) -> str:
    """Trim one decompressed export into ``dest`` (xz); a line for the log."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / raw.name
        shutil.copyfile(raw, work)
        db = sqlite3.connect(work)
        for t in CALLCHAINS:
            db.execute(f"DROP TABLE IF EXISTS {t}")
        db.commit()
        db.close()
        cut, found = cut_ns(work, iterations)
        if cut is not None:
            db = sqlite3.connect(work)
            keep_ms = (cut - first_activity(db)) / 1e6
            db.close()
            trim(work, work.with_suffix(".trim"), 0.0, keep_ms)
            work = work.with_suffix(".trim")
        data = work.read_bytes()
    dest.write_bytes(lzma.compress(data, preset=9 | lzma.PRESET_EXTREME))
    kept = f"{iterations} of {found}" if cut is not None else f"all {found}"
    return f"{raw.stem}: {raw.stat().st_size / 1e6:.1f} MB -> {dest.stat().st_size / 1e3:.0f} KB xz, iterations kept: {kept}"


def merge_timing(calls: list[Path], old: Path) -> list[dict]:
    """Rows of the calls' corpus-timing.csv, plus ``old``'s rows of scripts they lack."""
    new: list[dict] = []
    for call in calls:
        with (call / "corpus-timing.csv").open(newline="") as fh:
            new += list(csv.DictReader(fh))
    captured = {r["script"] for r in new}
    kept = []
    if old.exists():
        with old.open(newline="") as fh:
            kept = [r for r in csv.DictReader(fh) if r["script"] not in captured]
    return kept + new


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("calls", nargs="+", type=Path, help="device calls' $OUT folders")
    p.add_argument("--iterations", type=int, default=12)
    p.add_argument("--dest", type=Path, default=ROOT / "corpus" / "wild")
    args = p.parse_args(argv)
    (args.dest / "exports").mkdir(parents=True, exist_ok=True)
    for call in args.calls:
        tar_path = call / "corpus-exports.tar"
        if not tar_path.exists():
            continue
        with tarfile.open(tar_path) as tar, tempfile.TemporaryDirectory() as tmp:
            for member in tar.getmembers():
                name = Path(member.name).name.removesuffix(".sqlite.xz")
                raw = Path(tmp) / f"{name}.sqlite"
                with tar.extractfile(member) as fh:  # type: ignore[union-attr]
                    raw.write_bytes(lzma.decompress(fh.read()))
                dest = args.dest / "exports" / f"{name}.sqlite.xz"
                print(ingest_export(raw, dest, args.iterations), flush=True)
                raw.unlink()
    rows = merge_timing(args.calls, args.dest / "timing.csv")
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=measure.TIMING_FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    (args.dest / "timing.csv").write_text(buf.getvalue())
    measured = measure.summarize(str(args.dest / "timing.csv"), str(args.dest / "labels.csv"))
    measure.write_csv(measured, str(args.dest / "measured.csv"))
    print(f"timing.csv: {len(rows)} runs; measured.csv: {len(measured)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
