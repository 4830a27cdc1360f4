"""``python -m harness score DIR|CORPUS [--tool NAME|TEMPLATE ...]``: the detectors scored on
labelled exports (``harness.judge.score``), and with ``--tool`` naming adapters of
``harness/tools`` (``hta``, ``nsys-ai``, ``nsys-rules``, ``ours``, ``keyword``, ``tb-plugin``) one more table:
per class and tool, precision/recall/F1 against the same truth, our detectors one row among
them. A ``--tool`` that names no adapter is a command template for the keyword adapter, as
before."""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from analysis.detect import load_thresholds
from harness.core.console import fit_table
from harness.core.errors import InputError, UsageError, check_out, say
from harness.core.tools_config import ToolsConfig, parse_tool_overrides, tools_config
from harness.judge import score as S
from harness.judge.score import Labelled
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
        cfg = tools_config(parse_tool_overrides(items)) if items else ToolsConfig()
    except ValueError as exc:
        raise UsageError(f"--tool-set: {exc}") from exc
    return Context(tools=cfg, diagnosis=thresholds)


def check_templates(templates: Sequence[str], known: Sequence[str]) -> None:
    """Each ``--tool`` that names no adapter must be a command that can run: a UsageError
    names one that cannot be parsed or whose program is not found."""
    for template in templates:
        try:
            words = shlex.split(template)
        except ValueError as exc:
            raise UsageError(f"--tool {template!r}: cannot be read as a command ({exc})") from None
        try:
            [w.format(sqlite="export.sqlite", out="out") for w in words]
        except (ValueError, KeyError, IndexError) as exc:
            raise UsageError(
                f"--tool {template!r}: only {{sqlite}} and {{out}} are filled in ({exc!r})"
            ) from None
        program = words[0] if words else ""
        runnable = bool(program) and (
            shutil.which(program) is not None
            or (Path(program).is_file() and os.access(program, os.X_OK))
        )
        if not runnable:
            raise UsageError(
                f"--tool {template!r}: neither a tool ({', '.join(sorted(known))}) nor a "
                f"command found on the PATH"
            )


def _check_out(out: Path | None) -> None:
    """``--out`` is a folder that can be made and written, before anything is scored."""
    check_out(out)


def main(argv: Sequence[str] | None = None) -> int:
    """Score the detectors (and ``--tool``s) on a labelled folder; exit 2 on a bad input (one
    line naming it), or when some report's export could not be read (its row says
    ``unreadable``; one line each after the tables)."""
    args = parser().parse_args(argv)
    known = adapters()
    named = [t for t in args.tool if t in known]
    templates = [t for t in args.tool if t not in known]
    try:
        check_templates(templates, list(known))
        _check_out(args.out)
        items = items_of(args.path)
        thresholds = S._thresholds(args.set)
        ctx = tools_ctx(args.tool_set, thresholds)
    except UsageError as exc:
        return say(exc, prefix="score")
    if not items:
        return say(InputError(args.path, "no labelled exports found"), prefix="score")
    reports = _detectors(args, items, thresholds, named, templates)
    calls = scores = None
    if named:
        tools = [OURS, *[t for t in named if t != OURS]]
        # a corpus's HTA numbers, where its Kineto traces are not kept (hta_numbers.json)
        calls = tool_calls(args.path, items, tools, ctx, {CACHED: cached_numbers(args.path)})
        scores = tool_scores(calls, truth_table(args.path, items))
        print_tools(calls, scores)
    if args.out:
        try:
            write_out(args.out, *reports, calls, scores)
        except OSError as exc:  # a disk that filled meanwhile
            return say(InputError(f"--out {args.out}", str(exc)), prefix="score")
    unreadable = [] if reports[0] is None else _unreadable(reports[0])
    for line in unreadable:
        say(line, prefix="score")
    return 2 if unreadable else 0


def _detectors(
    args: argparse.Namespace,
    items: Sequence[Labelled],
    thresholds: dict | None,
    named: Sequence[str],
    templates: Sequence[str],
) -> tuple[pd.DataFrame | None, pd.DataFrame | None, pd.DataFrame | None, float]:
    """The detectors scored and printed: (reports, classes, prediction checks, tolerance);
    None for the tables where no item has an nsys export."""
    rules = not args.no_expert_rules and "nsys-rules" not in named
    exported = [it for it in items if has_export(it)]
    tolerance = float(load_thresholds(thresholds).predict.tolerance_share)
    if not exported:
        print(f"{args.path}: no nsys export (a Kineto-only run): the detectors are not scored")
        return None, None, None, tolerance
    reports = S.score_reports(exported, thresholds=thresholds, expert_rules=rules,
                              tools=templates)  # fmt: skip
    classes = S.class_scores(reports)
    checks = S.prediction_table(exported, reports, tolerance)
    S.print_scores(reports, classes, checks, tolerance)
    return reports, classes, checks, tolerance


def _unreadable(reports: pd.DataFrame) -> list[str]:
    """One line per report whose export could not be read (``REPORT: WHY``)."""
    if "error" not in reports:
        return []
    bad = reports[reports["primary"] == S.UNREADABLE]
    return [f"cannot score {r}: {e}" for r, e in zip(bad["report"], bad["error"], strict=True)]


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
