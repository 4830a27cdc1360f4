"""Time the diagnosis detectors on nsys SQLite exports: open, each detector, total (best of N).

    python -m scripts.bench_detectors REPORT.sqlite ... [--repeat 3] [--csv bench.csv]

Each repeat opens the export afresh (the detectors cache what they read on the Trace, so the
first detector to need a table pays for reading it: read the columns as "time spent by the
time that detector finished", and ``total`` as the figure to compare). ``predict_s`` is the
predicted speedups that ``diagnose`` attaches to the findings (``analysis.detect.decide``),
part of ``total_s``. Prints one row per export and writes the same table as CSV, with the
1-minute load average before the fastest run (``load_1min``: on a shared machine, a figure
taken under load is no figure of the code).

``--tile SRC COPIES OUT`` makes a large export from a real one for a local benchmark where no
GPU export of that size is at hand: OUT is SRC with every activity table (kernels, copies,
memsets, CUDA API, sync, NVTX, OS runtime) repeated at least COPIES times (by doubling), each copy
shifted past the previous in time and in correlation id. Strings, enums and threads are SRC's.

Run it from the checkout's root as a module (``python -m`` puts the checkout first on
``sys.path``, so it times this checkout's detectors, not an installed copy's).
"""

from __future__ import annotations

import argparse
import csv
import gc
import os
import shutil
import sqlite3
import sys
import time
from pathlib import Path

from analysis import trace as T
from analysis.detect import REGISTRY, TraceView, load_thresholds
from analysis.detect.config import DiagnosisConfig
from analysis.detect.decide import decide
from bottlenecks import CLASSES, SPECS

ROW_TABLES = {
    "kernels": "CUPTI_ACTIVITY_KIND_KERNEL",
    "cuda_api": "CUPTI_ACTIVITY_KIND_RUNTIME",
    "memcpy": "CUPTI_ACTIVITY_KIND_MEMCPY",
    "nvtx": "NVTX_EVENTS",
    "osrt": "OSRT_API",
}

#: Activity tables --tile repeats, with the columns shifted by the copy's offsets.
TILED = T.ACTIVITY_TABLES


def row_counts(path: Path) -> dict[str, int]:
    with T.open_trace(path) as tr:
        out = {}
        for key, table in ROW_TABLES.items():
            out[key] = (
                int(tr.query(f"SELECT COUNT(*) FROM {table}")[1][0][0]) if tr.has(table) else 0
            )
        return out


def bench_once(path: Path, cfg: DiagnosisConfig) -> dict[str, float]:
    """Seconds for open_trace, each detector in CLASSES order (cumulative cache), and total;
    ``cpu_s`` is the CPU time of all threads, steadier than wall time on a shared machine."""
    gc.collect()
    load = os.getloadavg()[0]
    t0, c0 = time.perf_counter(), time.process_time()
    out: dict[str, float] = {}
    with T.open_trace(path) as tr:
        out["open_s"] = time.perf_counter() - t0
        view, found = TraceView(tr, cfg), []
        for spec in SPECS:
            t = time.perf_counter()
            found.append(REGISTRY[spec.name](view, getattr(cfg, spec.thresholds)))
            out[f"{spec.name}_s"] = time.perf_counter() - t
        t = time.perf_counter()
        for spec, f in zip(SPECS, found, strict=True):
            decide(view, f, getattr(cfg, spec.thresholds))
        out["predict_s"] = time.perf_counter() - t
    out["total_s"] = time.perf_counter() - t0
    out["cpu_s"] = time.process_time() - c0
    out["load_1min"] = load
    return out


def bench(path: Path, repeat: int) -> dict[str, object]:
    cfg = load_thresholds()
    runs = [bench_once(path, cfg) for _ in range(repeat)]
    best = {k: min(r[k] for r in runs) for k in runs[0]}
    best["load_1min"] = min(runs, key=lambda r: r["total_s"])["load_1min"]
    return {
        "file": str(path),
        "size_mb": round(path.stat().st_size / 1e6, 1),
        **{f"{k}_rows": v for k, v in row_counts(path).items()},
        **{k: round(v, 3) for k, v in best.items()},
        "repeats": repeat,
    }


def tile(src: Path, copies: int, out: Path) -> Path:
    """Copy ``src`` to ``out`` and repeat its activity tables until there are >= ``copies``."""
    shutil.copyfile(src, out)
    db = sqlite3.connect(out)
    try:
        present = [
            t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            if t in TILED
        ]  # fmt: skip
        lo, hi, corr = None, None, 0
        for t in present:
            a, b = db.execute(f'SELECT MIN(start), MAX(COALESCE("end", start)) FROM {t}').fetchone()
            if a is not None:
                lo = a if lo is None else min(lo, a)
                hi = b if hi is None else max(hi, b)
            cols = {r[1] for r in db.execute(f"PRAGMA table_info({t})")}
            if "correlationId" in cols:
                corr = max(
                    corr, db.execute(f"SELECT MAX(correlationId) FROM {t}").fetchone()[0] or 0
                )
        if lo is None:
            raise SystemExit(f"{src}: no activity to tile")
        period, corr_step, n = hi - lo + 1_000_000, corr + 1, 1
        while n < copies:
            for t in present:
                cols = [r[1] for r in db.execute(f"PRAGMA table_info({t})")]
                expr = []
                for c in cols:
                    if c in ("start", "end"):
                        expr.append(f'"{c}" + :shift')
                    elif c == "correlationId":
                        expr.append("correlationId + :corr")
                    else:
                        expr.append(f'"{c}"')
                names = ", ".join(f'"{c}"' for c in cols)
                db.execute(
                    f"INSERT INTO {t} ({names}) SELECT {', '.join(expr)} FROM {t}",
                    {"shift": n * period, "corr": n * corr_step},
                )
            db.commit()
            n *= 2
            print(f"  {n} copies, {out.stat().st_size / 1e6:.0f} MB", file=sys.stderr)
    finally:
        db.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("paths", nargs="*", type=Path, help="nsys .sqlite exports")
    p.add_argument("--repeat", type=int, default=3, help="runs per export; the best is kept")
    p.add_argument("--csv", type=Path, default=Path("bench_detectors.csv"), help="output CSV")
    p.add_argument("--tile", nargs=3, metavar=("SRC", "COPIES", "OUT"), help="make OUT first")
    args = p.parse_args(argv)
    paths = list(args.paths)
    if args.tile:
        src, copies, out = args.tile
        paths.append(tile(Path(src), int(copies), Path(out)))
    if not paths:
        p.error("no exports given")
    rows = []
    for path in paths:
        row = bench(path, max(1, args.repeat))
        rows.append(row)
        print(
            f"{path.name}: {row['size_mb']} MB, {row['kernels_rows']} kernels, "
            f"{row['cuda_api_rows']} API calls: total {row['total_s']:.2f} s",
            file=sys.stderr,
        )
    cols = list(rows[0])
    for r in rows:
        cols += [c for c in r if c not in cols]
    with args.csv.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)
    shown = ["size_mb", "kernels_rows", "cuda_api_rows", "open_s"]
    shown += [f"{k}_s" for k in CLASSES] + ["predict_s", "total_s", "cpu_s", "load_1min"]
    width = max(len(Path(str(r["file"])).name) for r in rows)
    print(f"{'export':{width}s} " + " ".join(f"{c:>14s}" for c in shown))
    for r in rows:
        print(
            f"{Path(str(r['file'])).name:{width}s} "
            + " ".join(f"{r.get(c, ''):>14}" for c in shown)
        )
    print(f"(best of {args.repeat}; CSV: {args.csv})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
