"""Judge an existing run folder again with the current detectors and thresholds.

    python scripts/rediagnose.py RUN_DIR [--expert-rules] [--tools]

Rewrites diagnosis.csv, findings.csv, verdicts.csv, confusion.csv, detector_scores.csv and
gpu_work.csv from the run's own result files, SQLite exports and runs.csv (what ``harness run``
writes at its end, :mod:`harness.judge.pipeline`), e.g. after a detector change, or for a run cut off before its diagnosis. Timings are not
touched. With ``--tools``, the tools step too (``tools_calls.csv``, ``tools_scores.csv``,
``tools_f1.csv``) with this checkout's ``tools`` defaults (e.g. HTA's rules once fitted, or on a
machine where HTA and nsys-ai are installed), and the report is written again.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from analysis.detect import load_thresholds
from harness.core import runfolder as rf
from harness.core.config import discover_scenarios
from harness.judge.pipeline import diagnose_run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--expert-rules", action="store_true", help="also run nsys's expert rules")
    ap.add_argument("--tools", action="store_true",
                    help="also the tools step (current tools defaults) and the report")  # fmt: skip
    args = ap.parse_args()
    run = args.run_dir
    table = pd.read_csv(rf.table_path(run, "runs"))
    judged = diagnose_run(
        run, discover_scenarios(), table, thresholds=load_thresholds(), crosscheck=args.expert_rules
    )
    verdict = judged.verdicts
    with pd.option_context("display.width", 200, "display.max_colwidth", 120):
        print(verdict[["scenario", "verdict", "reason"]].to_string(index=False))
    if args.tools:
        from harness.core.tools_config import ToolsConfig
        from harness.report import main as report_main
        from harness.tools.step import run_tools
        from harness.tools.table import table_view

        scores = run_tools(run, ToolsConfig(), load_thresholds(), print)
        if scores is not None:
            print(table_view(scores).to_string(index=False))
        report_main([str(run)])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
