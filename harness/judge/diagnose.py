"""``python -m harness diagnose PATH... [--format text|json] [--expert-rules]``: findings for
any nsys report.

Takes ``.sqlite`` exports (also xz-compressed, ``.sqlite.xz``), or ``.nsys-rep`` reports (exported with the nsys the harness finds,
into a temporary folder). Findings are ranked by impact; the primary class is the fired finding
with the largest impact, or ``none``. ``--expert-rules`` also runs nsys's own rules
(``nsys analyze``, analysis/expert_rules.py) on the same export and shows which fired, next to
the class each stands for. ``--set KEY=VALUE`` overrides a threshold of the ``diagnosis``
config group. Exit 0 with or without findings (a report with nothing to judge, e.g. a CPU-only
program, says so), 2 on a file that cannot be read or an invalid override.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from pathlib import Path
from typing import Any

from analysis import expert_rules as E
from analysis import heap
from analysis.detect import diagnose
from analysis.findings import PREDICTION_FIELDS
from harness.core import nsys as nsys_mod
from harness.core.console import WIDTH, wrap
from harness.judge.export import ExportError, open_report
from harness.judge.predictions import SPEEDUP_FIELDS


def _clean(value: Any) -> Any:
    """JSON-safe numbers (NaN/inf become null)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if hasattr(value, "item"):  # numpy scalars
        return _clean(value.item())
    return value


def expert_rules_for(db: Path) -> dict[str, Any]:
    """nsys's expert rules on one export: {"nsys", "rules": [...]} or {"skipped": reason}."""
    found = nsys_mod.find(None)
    if found is None:
        return {"skipped": "no nsys found, so nsys's expert rules could not run"}
    try:
        results = E.run_rules(found.path, db)
    except E.ExpertRulesUnavailable as exc:
        return {"skipped": str(exc)}
    label = found.version.replace("NVIDIA Nsight Systems version", "").strip()
    return {"nsys": label, "rules": [r.to_dict() for r in results]}


def diagnose_report(
    path: Path,
    *,
    expert_rules: bool = False,
    thresholds: dict[str, Any] | None = None,
    step_ms: float | None = None,
    host_speed: float | None = None,
) -> dict[str, Any]:
    """The JSON-shaped diagnosis of one report (raises :class:`ExportError`, naming it, when it cannot be read); with
    ``expert_rules``, an ``expert_rules`` key with nsys's rules on the same export.
    ``thresholds``: the detectors' settings (default: conf/diagnosis/default.yaml);
    ``step_ms``: the program's mean step measured without nsys (calibrates the predictions);
    ``host_speed``: the timed run's host speed relative to the profiled one's (the profiled
    host's time is scaled to it)."""
    rules = None
    if thresholds is None:
        from harness.core.config import diagnosis_thresholds

        thresholds = diagnosis_thresholds()
    with (
        tempfile.TemporaryDirectory(prefix="bottleneck-diagnose-") as tmp,
        open_report(path, Path(tmp)) as (db, trace),
    ):
        findings = diagnose(trace, thresholds, step_ms=step_ms, host_speed=host_speed)
        if expert_rules:
            rules = expert_rules_for(db)
    fired = [f for f in findings if f.fired]
    extra = {} if rules is None else {"expert_rules": rules}
    return _clean(
        {
            "report": str(path),
            "primary": fired[0].klass if fired else "none",
            "judged": any(f.judged for f in findings),
            "findings": [
                {
                    "class": f.klass,
                    "state": str(f.state),
                    "fired": f.fired,
                    "impact": f.impact,
                    "metrics": f.metrics,
                    "evidence": f.evidence,
                    "reason": f.reason,
                    **{name: getattr(f, name) for name in PREDICTION_FIELDS},
                }
                for f in findings
            ],
            **extra,
        }
    )


def format_text(result: dict[str, Any]) -> str:
    """One report's diagnosis for people: the primary, then each detector with its reason (a
    reason every detector shares, such as a report with no GPU activity, is said once)."""
    lines = [f"{result['report']}", f"  primary: {result['primary']}"]
    reasons = {f.get("reason", "") for f in result["findings"]}
    shared = next(iter(reasons)) if len(reasons) == 1 else ""
    if not result.get("judged", True):
        why = shared or (
            "the report has no GPU activity and none of the suite's NVTX steps (a CPU-only "
            "program, or a capture without --trace=cuda)"
        )
        lines += ["  " + line for line in wrap(f"nothing could be judged: {why}", WIDTH - 2)]
    for f in result["findings"]:
        if shared and not result.get("judged", True):  # said once above
            f = {**f, "reason": ""}
        lines += _finding_lines(f)
    rules = result.get("expert_rules")
    if rules is not None and "skipped" in rules:
        lines.append(f"  nsys analyze: skipped ({rules['skipped']})")
    elif rules is not None:
        lines.append(
            f"  nsys analyze (nsys {rules['nsys']}), each rule -> the class it stands for:"
        )
        for r in rules["rules"]:
            mark = "FIRED" if r["fired"] else "     "
            what = f"{r['rows']} rows" if r["fired"] else r["status"].replace("_", " ")
            lines.append(f"  {mark} {r['rule']:18s} -> {r['class']:15s} {what}")
    return "\n".join(lines)


def _finding_lines(f: dict[str, Any]) -> list[str]:
    """One finding within 100 columns: its mark, class, impact and first metrics, then its
    reason and prediction wrapped under it."""
    marks = {"fired": "FIRED", "clear": "     ", "not_judged": "  n/a"}
    mark = marks.get(f.get("state", ""), "FIRED" if f["fired"] else "     ")
    shown = ", ".join(
        f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
        for k, v in list(f["metrics"].items())[:4]
    )
    head = f"  {mark} {f['class']:15s} impact {f['impact']:.3f}  "
    metrics = wrap(shown, WIDTH - len(head))
    lines = [(head + metrics[0]).rstrip(), *(" " * len(head) + m for m in metrics[1:])]
    said = [f.get("reason") or ""]
    if f.get(SPEEDUP_FIELDS[0]) is not None and f["state"] != "not_judged":
        said.append(_predicted(f))
    for text in filter(None, said):
        lines += ["        " + line for line in wrap(text, WIDTH - 8)]
    return lines


def _predicted(f: dict[str, Any]) -> str:
    """The finding's prediction in words: the speedup with its 95% interval (or why there is
    none), the step it leaves as the program runs without nsys, and what it rests on, e.g.
    'predicted, the cause removed entirely: 1.40x [1.38-1.43] (95% interval over the steady
    iterations), leaving a step of 29.4 ms untraced (nsys's own cost per call taken off);
    basis: replay of 12 steady iterations, ...'."""
    sp, lo, hi = (f.get(k) for k in SPEEDUP_FIELDS)
    text = f"predicted, the cause removed entirely: {sp:.2f}x"
    if lo is not None and hi is not None:
        text += f" [{lo:.2f}-{hi:.2f}] (95% interval over the steady iterations)"
    else:
        text += " (no interval: too few measured iterations to resample)"
    if f.get("predicted_step_ms") is not None:
        text += (
            f", leaving a step of {f['predicted_step_ms']:.3g} ms untraced (as the program runs "
            "without nsys: nsys's own cost per call taken off)"
        )
    clamp = f.get("prediction_clamp")
    if clamp and clamp != "none":
        text += f"; raised to the {clamp} floor (prediction_clamp)"
    if f.get("prediction_note"):
        text += f"; basis: {f['prediction_note']}"
    return text


def parser() -> argparse.ArgumentParser:
    """``harness diagnose``'s command line."""
    ap = argparse.ArgumentParser(
        prog="python -m harness diagnose",
        description="Findings for any nsys report: every detector's state (fired, clear or not "
        "judged), the share of step time its bottleneck explains (impact), its metrics and why, "
        "and the speedup that removing its cause entirely would bring (predicted_speedup, with "
        "a 95% interval, and the predicted_step_ms left; empty with a prediction_note where "
        "the report cannot say). "
        "The primary class is the fired finding with the largest impact, or none. Exit 0 with "
        "or without findings, 2 on a report that cannot be read or an invalid --set.",
    )
    ap.add_argument(
        "paths",
        nargs="+",
        type=Path,
        help=".sqlite exports (.sqlite.xz too) or .nsys-rep reports (exported with the nsys found "
        "on the PATH)",
    )
    ap.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="text (the default): one block per report; json: one object per report (a list "
        "for several), with every metric and the evidence",
    )
    ap.add_argument(
        "--heap",
        choices=("tuned", "default"),
        default="tuned",
        help="tuned (the default): temporaries under 32 MB reused from glibc's heap rather "
        "than mapped afresh (analysis.heap; a 1 GB export reads faster); default: the "
        "allocator as it is",
    )
    ap.add_argument(
        "--expert-rules",
        action="store_true",
        help="also run nsys's own expert rules (nsys analyze) on each report",
    )
    ap.add_argument(
        "--step-ms",
        type=_positive,
        metavar="MS",
        help="the program's mean step (ms) measured without nsys, as your own timer reads it: "
        "the predictions are then over that step, with nsys's cost per CUDA call fitted to it "
        "(it differs from loop to loop); without it they take a fixed cost off each call",
    )
    ap.add_argument(
        "--host-speed",
        type=_ratio,
        metavar="RATIO",
        help="how much faster the host ran where the step was timed than where it was profiled "
        "(the profiled run's probe time over the timed run's, e.g. a fixed Python loop's ms): "
        "the profiled host's time is divided by it before nsys's cost is taken off",
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a threshold, e.g. --set host_sync.min_saving_share=0.2 (repeatable)",
    )
    return ap


def _positive_number(what: str):
    """An argparse type: a finite number above 0, the error naming ``what`` it must be."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not math.isfinite(value) or value <= 0:
            raise argparse.ArgumentTypeError(f"must be a positive {what}, got {text}")
        return value

    return parse


_positive = _positive_number("number of ms")
_ratio = _positive_number("ratio")


def main(argv: list[str]) -> int:
    """Each report's diagnosis as it is made (text: one block each; json: at the end), then
    one line per report that could not be read: exit 2 if any could not, else 0."""
    args = parser().parse_args(argv)
    if args.heap == "tuned":
        heap.tune()
    from harness.core.config import UsageError, diagnosis_thresholds, parse_overrides
    from harness.core.errors import say

    try:
        thresholds = diagnosis_thresholds(parse_overrides(args.set))
    except UsageError as exc:
        return say(exc)
    results, failed = [], 0
    for path in args.paths:
        try:
            result = diagnose_report(
                path,
                expert_rules=args.expert_rules,
                thresholds=thresholds,
                step_ms=args.step_ms,
                host_speed=args.host_speed,
            )
        except ExportError as exc:
            failed += 1
            say(f"cannot diagnose {exc.input}: {exc.problem}")
            continue
        if args.format == "text":  # as it comes: a long list shows progress, a failure its place
            print(("\n" if results else "") + format_text(result), flush=True)
        results.append(result)
    if args.format == "json" and results:
        print(json.dumps(results[0] if len(args.paths) == 1 else results, indent=2))
    return 2 if failed else 0
