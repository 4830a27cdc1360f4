"""The short table dev-new-classes.sh prints last: each variant's mean step and speedup over
its baseline (runs.csv), each scenario's verdict (verdicts.csv), each corpus switch's speedup
(corpus-measured.csv).

    python3 scripts/device/new_classes_table.py [--run RUN_DIR] [--corpus MEASURED_CSV ...]

Stdlib only: it runs on the bare GPU machine. A file that is missing is said, not an error.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path


def _rows(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        print(f"(no {path})")
        return []
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _num(value: str, fmt: str) -> str:
    try:
        return format(float(value), fmt)
    except (TypeError, ValueError):
        return "-"


def _print(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=False)]
    for row in [header, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=False)).rstrip())


def variants(run: Path) -> None:
    rows = [
        [
            r["scenario"], r["variant"], r["kind"], r["status"], _num(r["step_ms_mean"], ".2f"),
            f"{_num(r['speedup'], '.2f')} [{_num(r['speedup_ci_low'], '.2f')}-"
            f"{_num(r['speedup_ci_high'], '.2f')}]",
            _num(r.get("profile_step_ms_mean", ""), ".2f"),
        ]
        for r in _rows(run / "runs.csv")
    ]  # fmt: skip
    header = ["scenario", "variant", "kind", "status", "step_ms", "speedup [CI]", "profiled_ms"]
    _print(header, rows)
    print()
    verdicts = [
        [r["scenario"], r["verdict"], r["reason"][:110]] for r in _rows(run / "verdicts.csv")
    ]
    _print(["scenario", "verdict", "reason (cut)"], verdicts)


def corpus(paths: list[Path]) -> None:
    rows = [
        [
            r["script"], r["fix"], r["class"], r["removal"], _num(r["none_step_ms"], ".2f"),
            _num(r["fix_step_ms"], ".2f"),
            f"{_num(r['speedup'], '.2f')} [{_num(r['speedup_min'], '.2f')}-"
            f"{_num(r['speedup_max'], '.2f')}]",
            r["label_stands"],
        ]
        for p in paths
        for r in _rows(p)
    ]  # fmt: skip
    header = ["script", "fix", "class", "removal", "none_ms", "fix_ms", "speedup", "stands"]
    _print(header, rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", type=Path, help="the harness run folder")
    p.add_argument("--corpus", type=Path, action="append", default=[], help="corpus-measured.csv")
    args = p.parse_args()
    if args.run is not None:
        variants(args.run)
        print()
    if args.corpus:
        corpus(args.corpus)


if __name__ == "__main__":
    main()
