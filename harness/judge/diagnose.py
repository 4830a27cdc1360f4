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
import lzma
import math
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from analysis import expert_rules as E
from analysis.detect import diagnose
from analysis.findings import PREDICTION_FIELDS
from analysis.trace import TraceError, open_trace, unxz
from harness.core import nsys as nsys_mod
from harness.core.console import WIDTH, wrap


class DiagnoseError(RuntimeError):
    """A report could not be read or exported; the message says which and why."""


def _sqlite_for(path: Path, tmp: Path) -> Path:
    if not path.exists():
        raise DiagnoseError(f"{path}: no such file")
    if path.suffix == ".xz":  # an xz-compressed export, as the corpus and the fixtures keep them
        try:
            return unxz(path, tmp)
        except lzma.LZMAError as exc:
            raise DiagnoseError(f"{path}: not a readable .xz file ({exc})") from exc
    if path.suffix != ".nsys-rep":
        return path
    found = nsys_mod.find(None)
    if found is None:
        raise DiagnoseError(f"{path}: exporting a .nsys-rep needs nsys, and none was found")
    out = tmp / (path.stem + ".sqlite")
    proc = subprocess.run(
        nsys_mod.export_command(found, path, out),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if proc.returncode != 0 or not out.is_file():
        said = (proc.stdout + proc.stderr).strip()[-400:]
        raise DiagnoseError(f"{path}: nsys export failed (exit {proc.returncode}): {said}")
    return out


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
    """The JSON-shaped diagnosis of one report (raises DiagnoseError when unreadable); with
    ``expert_rules``, an ``expert_rules`` key with nsys's rules on the same export.
    ``thresholds``: the detectors' settings (default: conf/diagnosis/default.yaml);
    ``step_ms``: the program's mean step measured without nsys (calibrates the predictions);
    ``host_speed``: the timed run's host speed relative to the profiled one's (the profiled
    host's time is scaled to it)."""
    rules = None
    if thresholds is None:
        from harness.core.config import diagnosis_thresholds

        thresholds = diagnosis_thresholds()
    with tempfile.TemporaryDirectory(prefix="bottleneck-diagnose-") as tmp:
        db = _sqlite_for(path, Path(tmp))
        try:
            with open_trace(db) as trace:
                findings = diagnose(trace, thresholds, step_ms=step_ms, host_speed=host_speed)
        except TraceError as exc:
            raise DiagnoseError(str(exc)) from exc
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
    if f.get("predicted_speedup") is not None and f["state"] != "not_judged":
        said.append(_predicted(f))
    for text in filter(None, said):
        lines += ["        " + line for line in wrap(text, WIDTH - 8)]
    return lines


def _predicted(f: dict[str, Any]) -> str:
    """'removed entirely: 1.40x [1.38-1.43], 29.4 ms a step': the finding's prediction."""
    text = f"removed entirely: {f['predicted_speedup']:.2f}x"
    lo, hi = f.get("predicted_speedup_ci_low"), f.get("predicted_speedup_ci_high")
    if lo is not None and hi is not None:
        text += f" [{lo:.2f}-{hi:.2f}]"
    if f.get("predicted_step_ms") is not None:
        text += f", {f['predicted_step_ms']:.3g} ms a step (untraced)"
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
    args = parser().parse_args(argv)
    from harness.core.config import UsageError, diagnosis_thresholds, parse_overrides

    try:
        thresholds = diagnosis_thresholds(parse_overrides(args.set))
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    results = []
    for path in args.paths:
        try:
            results.append(
                diagnose_report(
                    path,
                    expert_rules=args.expert_rules,
                    thresholds=thresholds,
                    step_ms=args.step_ms,
                    host_speed=args.host_speed,
                )
            )
        except (DiagnoseError, subprocess.TimeoutExpired) as exc:
            print(f"error: cannot diagnose {path}: {exc}", file=sys.stderr)
            return 2
    if args.format == "json":
        print(json.dumps(results[0] if len(results) == 1 else results, indent=2))
    else:
        print("\n\n".join(format_text(r) for r in results))
    return 0
