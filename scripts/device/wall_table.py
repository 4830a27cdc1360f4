"""Where a suite run's wall time went, as a Markdown table; two or more runs side by side.

    python -m scripts.device.wall_table RUN_DIR [RUN_DIR ...] [--names before,after]

Reads each run folder's ``timings.csv`` and ``wall_time.json`` (a run resumed in a second call
has the last call's phases in wall_time.json, every call's wall time in ``all_calls_s``, and
every worker in timings.csv). Rows: the
run's phases, each worker part summed over the timing and the profiled processes apart, the
worker time that ran beside another worker (``harness.overlap``), the slowest set-ups (a cold
torch.compile shows here), and the settings the run applied. A part a run did not record (an
older harness) reads as a dash.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from harness.execution.collect import TIMING_PARTS

PARTS = (
    TIMING_PARTS  # one owner: harness/execution/collect.py writes these columns into timings.csv
)
PHASES = ("all_calls_s", "total_s", "workers_s", "exports_s", "diagnosis_s", "report_s")


def _load(run: Path) -> tuple[pd.DataFrame, dict[str, Any]]:
    timings = pd.read_csv(run / "timings.csv")
    timings = timings[timings["status"] != "skipped"]
    wall = (
        json.loads((run / "wall_time.json").read_text())
        if (run / "wall_time.json").is_file()
        else {}
    )
    return timings, wall


def _kind(phase: str) -> str:
    return "profile" if phase == "profile" else "timing"


def column(run: Path) -> dict[str, str]:
    """One run's cells, by row name."""
    timings, wall = _load(run)
    cells: dict[str, str] = {}
    for key in PHASES:
        cells[key] = _s(wall.get(key))
    kinds = timings["phase"].map(_kind)
    for kind in ("timing", "profile"):
        part = timings[kinds == kind]
        cells[f"{kind}: processes"] = str(len(part))
        cells[f"{kind}: wall_s"] = _s(part["wall_s"].sum())
        for p in PARTS:
            cells[f"{kind}: {p}"] = (
                _s(part[p].sum()) if p in part and part[p].notna().any() else "–"
            )
    cells["measuring: warm-ups and windows (s)"] = _s(wall.get("measuring_s"))
    cells["between measurements (s)"] = _s(wall.get("between_measurements_s"))
    cells["worker time beside another worker (s)"] = _s(wall.get("workers_overlap_s"))
    cells["time a worker ran (s)"] = _s(wall.get("workers_busy_s"))
    warm = wall.get("warm_compile") or []
    cells["compiler-cache warm-ups (s, paused s)"] = (
        ", ".join(f"{w['variant']} {w['wall_s']:.0f} ({w['paused_s']:.0f})" for w in warm) or "–"
    )
    slow = timings.assign(s=timings["setup_s"]).nlargest(3, "s")
    cells["slowest set-ups (s)"] = ", ".join(
        f"{r.variant} [{r.phase}] {r.setup_s:.0f}" for r in slow.itertuples()
    )
    settings = wall.get("settings") or {}
    cells["settings"] = ", ".join(f"{k}={v}" for k, v in settings.items()) or "–"
    return cells


def _s(value: Any) -> str:
    try:
        return f"{float(value):.0f}"
    except (TypeError, ValueError):
        return "–"


def table(runs: list[Path], names: list[str]) -> str:
    cols = [column(r) for r in runs]
    rows = list(cols[0])
    out = ["| | " + " | ".join(names) + " |", "| --- |" + " --- |" * len(names)]
    for row in rows:
        out.append(f"| {row} | " + " | ".join(c.get(row, "–") for c in cols) + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run folders")
    parser.add_argument("--names", help="column names, comma separated (default: folder names)")
    args = parser.parse_args(argv)
    for run in args.runs:
        if not (run / "timings.csv").is_file():
            print(f"error: {run}: no timings.csv", file=sys.stderr)
            return 2
    names = args.names.split(",") if args.names else [r.name for r in args.runs]
    if len(names) != len(args.runs):
        print("error: --names needs one name per run folder", file=sys.stderr)
        return 2
    print(table(args.runs, names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
