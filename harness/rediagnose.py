"""``harness rediagnose RUN_DIR [--expert-rules] [--tools]``: judge an existing run folder again
with the current detectors and thresholds.

Rewrites diagnosis.csv, findings.csv, verdicts.csv, confusion.csv, detector_scores.csv and
gpu_work.csv from the run's own result files, SQLite exports and runs.csv (what ``harness run``
writes at its end, :mod:`harness.judge.pipeline`), e.g. after a detector change, or for a run
cut off before its diagnosis. Timings are not touched. With ``--tools``, the tools step too
(``tools_calls.csv``, ``tools_scores.csv``, ``tools_f1.csv``) with this checkout's ``tools``
defaults, and the report is written again. ``scripts/rediagnose.py`` is the same command.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from harness.core.errors import EXIT_BAD_INPUT, InputError, OneLineParser, say
from harness.core.folder import RunFolder


def parser() -> argparse.ArgumentParser:
    """``harness rediagnose``'s command line."""
    ap = OneLineParser(
        prog="python -m harness rediagnose",
        description="Judges a run folder again with the current detectors and thresholds: "
        "rewrites diagnosis.csv, findings.csv, verdicts.csv, confusion.csv, "
        "detector_scores.csv and gpu_work.csv from its result files, exports and runs.csv "
        "(timings are not touched), and prints each scenario's verdict.",
    )
    ap.add_argument("run_dir", type=Path, help="a run folder of harness run (with its runs.csv)")
    ap.add_argument(
        "--expert-rules", action="store_true", help="also run nsys's expert rules (cross-check)"
    )
    ap.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="exports read at once, each in its own process (default: half the cores, at most 8)",
    )
    ap.add_argument(
        "--tools",
        action="store_true",
        help="also the tools step (this checkout's tools defaults), then the report again",
    )
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """Judge the run again; exit 2 on a folder that is not a run, or on exports in it that
    cannot be read (one line naming each; the others are judged as ever)."""
    args = parser().parse_args(argv)
    from analysis.detect import load_thresholds
    from harness.core.config import HarnessConfig, discover_scenarios
    from harness.judge.pipeline import diagnose_run

    run = RunFolder(args.run_dir)
    try:
        table = run.table("runs", columns=("scenario", "variant"))
        if table is None:
            raise InputError(args.run_dir, "not a run folder (no runs.csv)")
    except InputError as exc:
        return say(exc)
    judged = diagnose_run(
        run.path, discover_scenarios(), table, thresholds=load_thresholds(),
        crosscheck=args.expert_rules, jobs=HarnessConfig(diagnose_jobs=args.jobs).diagnosis_processes(),
    )  # fmt: skip
    with pd.option_context("display.width", 200, "display.max_colwidth", 120):
        print(judged.verdicts[["scenario", "verdict", "reason"]].to_string(index=False))
    if args.tools:
        _tools(run.path)
    # an export that is there but cannot be read: judged as unreadable above, named here
    broken = [j.evidence.error for j in judged.judged if not j.evidence.readable]
    for why in broken:
        say(f"cannot read the export {why}")
    return EXIT_BAD_INPUT if broken else 0


def _tools(run_dir: Path) -> None:
    """The tools step with this checkout's defaults, then the report again."""
    from analysis.detect import load_thresholds
    from harness.core.tools_config import ToolsConfig
    from harness.report import main as report_main
    from harness.tools.step import run_tools
    from harness.tools.table import table_view

    scores = run_tools(run_dir, ToolsConfig(), load_thresholds(), print)
    if scores is not None:
        print(table_view(scores).to_string(index=False))
    report_main([str(run_dir)])
