"""``python -m harness score DIR|CORPUS [--tool NAME|TEMPLATE ...]``: the detectors scored on
labelled exports (``harness.judge.score``), and with ``--tool`` naming adapters of
``harness/tools`` (``hta``, ``nsys-ai``, ``nsys-rules``, ``ours``, ``keyword``) one more table:
per class and tool, precision/recall/F1 against the same truth, our detectors one row among
them. A ``--tool`` that names no adapter is a command template for the keyword adapter, as
before."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import yaml

from analysis.detect import load_thresholds
from harness.core.config import UsageError, parse_overrides
from harness.core.console import fit_table
from harness.core.tools_config import ToolsConfig, tools_config
from harness.judge import score as S
from harness.tools.base import Context, adapters
from harness.tools.hta import CACHED, cached_numbers
from harness.tools.table import f1_grid, table_view, tool_calls, tool_scores, verdict_view
from harness.tools.truth import has_export, items_of, truth_table

OURS = "ours"


def parser() -> argparse.ArgumentParser:
    """``harness score``'s command line: judge.score's, plus ``--tool-set``."""
    ap = S.parser()
    names = ", ".join(sorted(adapters()))
    ap.description = (ap.description or "") + (
        f" --tool NAME runs a tool adapter ({names}) and prints the tools table: per class and "
        "tool, precision/recall/F1 (n/a where the tool cannot judge)."
    )
    ap.add_argument("--tool-set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a tools setting, e.g. --tool-set hta.stall_min_idle_pct=25 "
                    "(harness run's tools.KEY=VALUE; repeatable)")  # fmt: skip
    return ap


def tools_ctx(items: Sequence[str], thresholds: dict | None) -> Context:
    """The adapters' settings from ``--tool-set`` (a UsageError names a bad key)."""
    try:
        cfg = tools_config(parse_overrides(items)) if items else ToolsConfig()
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    return Context(tools=cfg, diagnosis=thresholds)


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    known = adapters()
    named = [t for t in args.tool if t in known]
    templates = [t for t in args.tool if t not in known]
    try:
        items = items_of(args.path)
        thresholds = S._thresholds(args.set)
        ctx = tools_ctx(args.tool_set, thresholds)
    except (FileNotFoundError, OSError, yaml.YAMLError, KeyError, UsageError) as exc:
        print(f"score: {exc}", file=sys.stderr)
        return 2
    if not items:
        print(f"score: {args.path}: no labelled exports found", file=sys.stderr)
        return 2
    rules = not args.no_expert_rules and "nsys-rules" not in named
    exported = [it for it in items if has_export(it)]
    tolerance = float(load_thresholds(thresholds)["predict"]["tolerance_share"])
    reports = classes = checks = None
    if exported:
        reports = S.score_reports(exported, thresholds=thresholds, expert_rules=rules,
                                  tools=templates)  # fmt: skip
        classes = S.class_scores(reports)
        checks = S.prediction_table(exported, reports, tolerance)
        S.print_scores(reports, classes, checks, tolerance)
    else:
        print(f"{args.path}: no nsys export (a Kineto-only run): the detectors are not scored")
    calls = scores = None
    if named:
        tools = [OURS, *[t for t in named if t != OURS]]
        # a corpus's HTA numbers, where its Kineto traces are not kept (hta_numbers.json)
        calls = tool_calls(args.path, items, tools, ctx, {CACHED: cached_numbers(args.path)})
        scores = tool_scores(calls, truth_table(args.path, items))
        print_tools(calls, scores)
    if args.out:
        write_out(args.out, reports, classes, checks, tolerance, calls, scores)
    return 0


def print_tools(calls: pd.DataFrame, scores: pd.DataFrame) -> None:
    """What each tool flagged per report, then the table (precision/recall/F1 per class)."""
    print("\nper report, the classes each tool flagged (-: none; n/a: it could judge none):")
    print(fit_table(verdict_view(calls)))
    print("\ntools against the ground truth, precision/recall/F1 (n/a: the tool cannot judge):")
    print(fit_table(table_view(scores)))


def write_out(
    out: Path,
    reports: pd.DataFrame | None,
    classes: pd.DataFrame | None,
    checks: pd.DataFrame | None,
    tolerance: float,
    calls: pd.DataFrame | None,
    scores: pd.DataFrame | None,
) -> None:
    """score_*.csv (as judge.score writes them; none without exports), tools_calls.csv and
    tools_scores.csv."""
    from harness.core.atomic import write_text

    out.mkdir(parents=True, exist_ok=True)
    if reports is not None and classes is not None:
        write_text(out / "score_reports.csv", reports.to_csv(index=False))
        write_text(out / "score_classes.csv", classes.to_csv(index=False))
    if checks is not None:
        write_text(out / "score_predictions.csv", checks.to_csv(index=False))
        S._prediction_png(checks, tolerance, out / "score_predictions.png")
    if calls is not None and scores is not None:
        write_text(out / "tools_calls.csv", calls.to_csv(index=False))
        write_text(out / "tools_scores.csv", scores.to_csv(index=False))
        write_text(out / "tools_f1.csv", f1_grid(scores).to_csv())
