"""``python -m harness score DIR|CORPUS``: the detectors scored on labelled nsys exports.

A labelled folder is either a corpus (a ``labels.csv`` beside exports named after its entries,
e.g. ``corpus/wild/`` with ``exports/<name>.sqlite.xz``) or a run folder of ``harness run``
(labels: each variant's expected class in ``diagnosis.csv``). Every export is diagnosed from
scratch; per report the truth, our primary, every class that fired, and the classes nsys's
expert rules (and any ``--tool`` command) flag; per class precision, recall and F1 of each.
A class counts as flagged by a tool when it fires (ours: any fired finding, not only the
primary), so a secondary finding on a report labelled otherwise is a false positive, unless
the corpus measured that class as a real second cause of the report (``labels.csv``'s ``also``:
classes whose own fix gave >= 1.2x, smaller than the label's): such a finding is right but not
the label, so it counts neither way. A class the detectors could not judge on a report (a CPU
capture has no CUDA tables) leaves that report out of the class's counts (``not_judged``), as a
report nsys's rules could not read leaves it out of theirs: a class no report could judge scores
n/a, never 0. The primary is counted right or wrong only where the labelled class could be
judged (a clean label: where any class could).
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from analysis.detect import diagnose, load_thresholds, trace_only
from analysis.expert_rules import RULES
from analysis.findings import Finding
from bottlenecks import CLASSES, SPECS
from harness.core import runfolder as rf
from harness.core.config import diagnosis_thresholds, parse_overrides
from harness.core.console import fit_table
from harness.core.errors import InputError
from harness.core.folder import RunFolder, read_table
from harness.core.metrics import prf
from harness.judge import predictions as P
from harness.judge.export import ExportError, open_report
from harness.judge.labels import FILE as LABELS_FILE
from harness.judge.labels import LabelsError, parse_removes, read_labels

NONE = "none"
#: A report's primary where its export could not be read (its row's ``error`` says why).
UNREADABLE = "unreadable"

#: A cell where a tool could not judge the report (nsys's rules without CUDA data), and the truth
#: of a run-folder report whose expectation was undecided.
NA = "n/a"

#: Words in a third-party tool's output that name a class (the ``--tool`` adapter), per class
#: from its spec (``ClassSpec.tool_words``, bottlenecks/classes.py).
TOOL_WORDS: dict[str, tuple[str, ...]] = {s.name: s.tool_words for s in SPECS}


@dataclass(frozen=True)
class Labelled:
    """One labelled export."""

    name: str
    truth: str
    path: Path
    also: str = ""
    """Measured second causes (";"-separated classes): flagging them is not a false positive."""
    removes: str = ""
    """labels.csv's ``removes``: per labelled cause, the switch that removes it entirely (what the
    findings' predicted speedups are checked against, ``harness.judge.predictions``)."""
    step_ms: float | None = None
    """The program's mean step measured without nsys (a corpus's timing.csv, a run's runs.csv):
    the predictions are calibrated to it (``diagnosis.predict.calibrate``)."""


def _find_export(root: Path, name: str) -> Path | None:
    for pattern in (f"{name}.sqlite", f"{name}.sqlite.xz", f"{name}.sqlite.cols.xz"):
        hits = sorted(root.rglob(pattern))
        if hits:
            return hits[0]
    return None


def corpus_items(root: Path) -> list[Labelled]:
    """The labelled exports of a corpus folder: ``labels.csv`` (columns ``script``, ``label``)
    or ``labels.yaml`` (name -> {label: class}); exports named after the entries. A file that
    cannot be read raises :class:`~harness.core.errors.InputError` naming it."""
    if (root / LABELS_FILE).is_file():
        try:
            table = read_labels(root / LABELS_FILE)
        except LabelsError as exc:
            raise InputError(root / LABELS_FILE, str(exc).partition(": ")[2]) from None
        entries = {r["script"]: r["label"] for r in table}
        also = {r["script"]: r.get("also", "") for r in table}
        removes = {r["script"]: r.get("removes", "") for r in table}
    else:
        entries, also, removes = _yaml_labels(root / "labels.yaml"), {}, {}
    steps = untraced_steps(root / "timing.csv")
    items = []
    for name, label in entries.items():
        path = _find_export(root, name)
        if path is not None:
            items.append(
                Labelled(
                    name, str(label) or NONE, path, also.get(name, ""), removes.get(name, ""),
                    steps.get(name),
                )
            )  # fmt: skip
    return items


def _yaml_labels(path: Path) -> dict[str, str]:
    """labels.yaml's entries: name -> its class (``{label: class}`` or the class itself)."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise InputError(path, f"cannot be read as YAML ({exc})") from None
    if not isinstance(data, dict):
        raise InputError(path, f"not a mapping of entry -> label (a {type(data).__name__})")
    return {k: (v.get("label", NONE) if isinstance(v, dict) else str(v)) for k, v in data.items()}


def untraced_steps(timing_csv: Path) -> dict[str, float]:
    """Per corpus script, its mean ``none`` step (ms) from the rounds timed with its capture:
    rounds named by a number (``ingest_corpus.py --add`` prefixes the rounds it adds, which
    came from another session, often another machine). Empty without a timing.csv."""
    columns = ("script", "fix", "repeat", "rc", "step_ms")
    t = read_table(timing_csv, columns=columns, dtype={"repeat": str})
    if t is None:
        return {}
    own = t[(t["fix"] == "none") & t["repeat"].str.isdigit() & (t["rc"] == 0)]
    own = own[pd.to_numeric(own["step_ms"], errors="coerce") > 0]
    return own.groupby("script")["step_ms"].mean().astype(float).to_dict()


def run_items(root: Path) -> list[Labelled]:
    """The profiled variants of a run folder, labelled with their expected class."""
    from harness.judge.scoring import is_decided

    run = RunFolder(root)
    diag = run.table("diagnosis", columns=("scenario", "variant"))
    if diag is None:
        return []
    decided = is_decided(diag) if not diag.empty else pd.Series(dtype=bool)
    steps = {(r.scenario, r.variant): r.step_ms_mean for r in run.runs()}
    items = []
    for i, r in zip(diag.index, run.diagnosis(), strict=True):
        path = _find_export(root / r.scenario / r.variant, f"{r.scenario}__{r.variant}")
        if path is not None:
            truth = r.expected if bool(decided.loc[i]) else NA
            step = steps.get((r.scenario, r.variant))
            step = step if step is not None and step > 0 else None
            items.append(Labelled(r.name, truth, path, step_ms=step))
    return items


def labelled(root: Path) -> list[Labelled]:
    """Corpus or run folder, whichever ``root`` is (an InputError says neither)."""
    if (root / LABELS_FILE).is_file() or (root / "labels.yaml").is_file():
        return corpus_items(root)
    if rf.table_path(root, "diagnosis").is_file():
        return run_items(root)
    what = (
        "no such folder"
        if not root.exists()
        else "not a folder"
        if not root.is_dir()
        else ("neither a corpus (labels.csv or labels.yaml) nor a run folder (diagnosis.csv)")
    )
    raise InputError(root, what)


def command_output(template: str, sqlite: Path, timeout_s: float = 600) -> str:
    """What another diagnosis command says of an export: run ``template`` ({sqlite}, {out}
    filled in) and read the file {out} if it wrote one, else its stdout."""
    with tempfile.TemporaryDirectory(prefix="bottleneck-tool-") as tmp:
        out = Path(tmp) / "tool-output"
        cmd = [a.format(sqlite=sqlite, out=out) for a in shlex.split(template)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
        return out.read_text(errors="replace") if out.is_file() else proc.stdout


def words_found(text: str) -> dict[str, list[str]]:
    """Per class, the words of :data:`TOOL_WORDS` that ``text`` uses (case-insensitive)."""
    low = text.lower()
    return {k: [w for w in words if w in low] for k, words in TOOL_WORDS.items()}


def tool_classes(template: str, sqlite: Path, tmp: Path, timeout_s: float = 600) -> set[str]:
    """Classes another diagnosis command flags: those whose words its output uses."""
    del tmp  # the command's output goes to a folder of its own
    found = words_found(command_output(template, sqlite, timeout_s))
    return {k for k, words in found.items() if words}


def expert_classes(sqlite: Path) -> set[str] | None:
    """Classes nsys's expert rules flag on the export, or None without a usable nsys."""
    from analysis import expert_rules as E
    from harness.core import nsys as nsys_mod

    found = nsys_mod.find(None)
    if found is None:
        return None
    try:
        votes = E.class_votes(E.run_rules(found.path, sqlite))
    except E.ExpertRulesUnavailable:
        return None
    return {k for k, v in votes.items() if v}


def score_reports(
    items: Sequence[Labelled],
    *,
    thresholds: dict[str, Any] | None = None,
    expert_rules: bool = True,
    tools: Sequence[str] = (),
) -> pd.DataFrame:
    """One row per report: name, truth, primary, fired, not_judged (classes the detectors
    could not judge there), and each other tool's classes (``n/a``: it could not judge). A
    report that cannot be read is a row with primary ``unreadable`` and its ``error``."""
    cfg = load_thresholds(thresholds)
    with tempfile.TemporaryDirectory(prefix="bottleneck-score-") as tmp:
        return pd.DataFrame([_score_one(it, cfg, Path(tmp), expert_rules, tools) for it in items])


def _score_one(
    it: Labelled, cfg: dict[str, Any], tmp: Path, expert_rules: bool, tools: Sequence[str]
) -> dict[str, Any]:
    """One report's row of :func:`score_reports`."""
    row: dict[str, Any] = {"report": it.name, "truth": it.truth, "also": it.also}
    try:
        with open_report(it.path, tmp) as (db, trace):
            found = diagnose(trace, cfg, step_ms=it.step_ms)
            row |= predicted_columns(found)
            row |= {f"trace_only_speedup:{f.klass}": trace_only(trace, cfg, f) for f in found}
            fired = [f.klass for f in found if f.fired]
            row["primary"] = fired[0] if fired else NONE
            row["fired"] = ";".join(fired)
            row["not_judged"] = ";".join(f.klass for f in found if not f.judged)
            if expert_rules:
                ex = expert_classes(db)
                row["nsys_rules"] = ";".join(sorted(ex)) if ex is not None else "n/a"
            for i, template in enumerate(tools):
                row[f"tool{i + 1}"] = ";".join(sorted(tool_classes(template, db, tmp)))
    except ExportError as exc:
        for key in [k for k in row if ":" in k]:
            del row[key]
        row.update(primary=UNREADABLE, fired="", not_judged=";".join(CLASSES), error=str(exc))
    return row


def predicted_columns(found: Sequence[Finding]) -> dict[str, float | None]:
    """``predicted_speedup:<class>`` and its interval per class, for the prediction checks."""
    out: dict[str, float | None] = {}
    for f in found:
        for k in P.SPEEDUP_FIELDS:
            out[f"{k}:{f.klass}"] = getattr(f, k)
    return out


def prediction_table(items: Sequence[Labelled], reports: pd.DataFrame, tolerance: float):
    """Per report and labelled cause: predicted against the corpus's measured full removal
    (``measured.csv`` beside ``labels.csv``), or None without one (a run folder)."""
    roots = {it.path.parent.parent for it in items if it.removes}
    measured_csv = [r / "measured.csv" for r in roots if (r / "measured.csv").is_file()]
    if not measured_csv:
        return None
    measured = read_table(measured_csv[0])
    removes = {it.name: parse_removes(it.removes) for it in items if it.removes}
    return P.corpus_checks(removes, reports, measured, tolerance)


def _flags(cell: Any) -> set[str]:
    return {c for c in str(cell).split(";") if c and c not in (NA, "nan")}


def _column(reports: pd.DataFrame, name: str) -> pd.Series:
    return reports[name] if name in reports else pd.Series("", index=reports.index)


def _usable(reports: pd.DataFrame, tool: str, klass: str) -> pd.Series:
    """Which reports score ``tool`` on ``klass``: a known truth, and the tool could judge the
    class there (the detectors: not in ``not_judged``; another tool: its cell is not n/a)."""
    known = reports["truth"].astype(str) != NA
    if tool != "fired":
        return known & (_column(reports, tool).astype(str) != NA)
    return known & ~_column(reports, "not_judged").map(lambda c: klass in _flags(c))


def primary_judged(reports: pd.DataFrame) -> pd.Series:
    """Reports whose primary can be counted right or wrong: the labelled class could be judged
    (a clean label: some class could)."""
    unjudged = _column(reports, "not_judged").map(_flags)
    return pd.Series(
        [
            t != NA and (t not in nj if t != NONE else len(nj) < len(CLASSES))
            for t, nj in zip(reports["truth"].astype(str), unjudged, strict=True)
        ],
        index=reports.index,
        dtype=bool,
    )


def class_scores(reports: pd.DataFrame) -> pd.DataFrame:
    """Per tool and class: true/false positives, false negatives, precision, recall, F1, and
    ``not_judged`` (reports left out: the tool could not judge the class there)."""
    tools = ["fired"] + [c for c in reports.columns if c == "nsys_rules" or c.startswith("tool")]
    ruled = {spec.klass for spec in RULES}
    rows = []
    for tool in tools:
        for k in CLASSES:
            if tool == "nsys_rules" and k not in ruled:  # no rule for it: n/a, not a miss
                rows.append({"tool": tool, "class": k, "tp": 0, "fp": 0, "fn": 0,
                             "not_judged": len(reports), "precision": float("nan"),
                             "recall": float("nan"), "f1": float("nan")})  # fmt: skip
                continue
            use = _usable(reports, tool, k)
            usable = reports[use]
            truth = usable["truth"] == k
            flag = usable[tool].map(lambda c, k=k: k in _flags(c)).astype(bool)
            second = usable.get("also", pd.Series("", index=usable.index))
            second = second.map(lambda c, k=k: k in _flags(c)).astype(bool)
            tp, fp, fn = (
                int((truth & flag).sum()),
                int((~truth & ~second & flag).sum()),
                int((truth & ~flag).sum()),
            )
            name = "detectors" if tool == "fired" else tool
            rows.append({"tool": name, "class": k, "tp": tp, "fp": fp, "fn": fn,
                         "not_judged": int((~use).sum()), **prf(tp, fp, fn)})  # fmt: skip
    return pd.DataFrame(rows)


def primary_line(reports: pd.DataFrame) -> str:
    """'primary right on 11 of 11 reports (5 not judged: a, b, ...)': reports whose labelled
    class could not be judged (or whose label was undecided) are named, not counted."""
    ok = primary_judged(reports)
    right = int((reports.loc[ok, "primary"] == reports.loc[ok, "truth"]).sum())
    left = reports.loc[~ok, "report"].astype(str).tolist()
    text = f"primary right on {right} of {int(ok.sum())} reports"
    if left:
        text += f" ({len(left)} not judged: {', '.join(left)})"
    return text


def parser() -> argparse.ArgumentParser:
    """``harness score``'s command line."""
    ap = argparse.ArgumentParser(
        prog="python -m harness score",
        description="The detectors scored on labelled nsys exports: a corpus folder (labels.csv "
        "or labels.yaml beside its exports, e.g. corpus/wild) or a run folder of harness run "
        "(each variant labelled with the class it should show). Per report the label, the "
        "primary finding and every class that fired; per class the precision, recall and F1 of "
        "the detectors, nsys's expert rules and any --tool. A class a tool could not judge on a "
        "report leaves that report out of its counts (n/a, never a miss).",
    )
    ap.add_argument("path", type=Path, help="a corpus folder (labels.csv) or a run folder")
    ap.add_argument(
        "--no-expert-rules", action="store_true", help="skip nsys's expert rules (nsys analyze)"
    )
    ap.add_argument("--tool", action="append", default=[], metavar="TEMPLATE",
                    help="another diagnosis command, run on each export: {sqlite} and {out} are "
                    "filled in, e.g. 'x diagnose {sqlite} -o {out}' (repeatable)")  # fmt: skip
    ap.add_argument(
        "--out", type=Path, help="also write score_reports.csv and score_classes.csv here"
    )
    ap.add_argument("--set", "-d", "--diagnosis", dest="set", action="append", default=[],
                    metavar="KEY=VALUE", help="override a threshold of the diagnosis config "
                    "group, as harness diagnose --set and harness run's diagnosis.KEY=VALUE do, "
                    "e.g. --set host_sync.min_saving_share=0.2 (repeatable; -d/--diagnosis: "
                    "its former name, still read)")  # fmt: skip
    return ap


def _thresholds(items: Sequence[str]) -> dict[str, Any] | None:
    """The --set overrides, validated as ``harness diagnose --set`` validates them (a
    UsageError naming the key), or None without any."""
    if not items:
        return None
    overrides = parse_overrides(items)
    diagnosis_thresholds(overrides)
    return overrides


def print_scores(
    reports: pd.DataFrame, classes: pd.DataFrame, checks: pd.DataFrame | None, tolerance: float
) -> None:
    """The tables within 100 columns (harness.core.console): a column too wide for a row
    moves under it; --out writes every column (score_*.csv)."""
    print(fit_table(reports[[c for c in reports.columns if ":" not in c]]))
    print(f"\n{primary_line(reports)}\n")
    print(fit_table(classes, na_rep=NA, float_format=lambda v: f"{v:.2f}"))
    if checks is None:
        return
    print(
        f"\npredicted [95% CI] against measured [min-max] (the cause removed entirely; within: "
        f"|error| <= {tolerance:.0%}):"
    )
    print(fit_table(checks_view(checks), keep=2))
    summary = prediction_summary(checks, reports, tolerance)
    print("\n" + fit_table(summary, na_rep=NA, float_format=lambda v: f"{v:.3g}"))


def checks_view(checks: pd.DataFrame) -> pd.DataFrame:
    """score_predictions.csv in fewer columns, those read first leftmost: each speedup with
    its interval in one cell, the error in percent; the reason only where a pair was not
    checked (otherwise it restates the prediction against the measured speedup)."""
    rows = []
    for r in checks.to_dict("records"):
        checked = str(r["prediction"]) in (str(P.Check.WITHIN), str(P.Check.OUTSIDE))
        alone = _speedup(r.get("trace_only_speedup"))
        rows.append({
            "report": r["report"], "class": r["class"],
            "predicted": _speedup(*(r[k] for k in P.SPEEDUP_FIELDS)),
            "measured": _speedup(r["measured_speedup"], r["measured_speedup_min"],
                                 r["measured_speedup_max"]),
            "error": _percent(r["prediction_error"]), "prediction": str(r["prediction"]),
            "switch": r["switch"],
            "trace alone": f"{alone} ({_percent(r.get('trace_only_error'))})" if alone else "",
            "why": "" if checked else r["prediction_why"],
        })  # fmt: skip
    return pd.DataFrame(rows)


def _speedup(x: Any, lo: Any = None, hi: Any = None) -> str:
    """'1.44x [1.38-1.5]', or '' without a number."""
    if x is None or pd.isna(x):
        return ""
    span = f" [{lo:.3g}-{hi:.3g}]" if pd.notna(lo) and pd.notna(hi) else ""
    return f"{x:.3g}x{span}"


def _percent(x: Any) -> str:
    return "" if x is None or pd.isna(x) else f"{x:+.0%}"


def prediction_summary(
    checks: pd.DataFrame, reports: pd.DataFrame, tolerance: float = 0.2
) -> pd.DataFrame:
    """Per tool: pairs checked, within tolerance, median and largest |error|; the detectors
    twice where the untraced step calibrated them (and as the trace alone predicts); tools that
    give no number (nsys's expert rules, --tool commands) are n/a."""
    s = P.error_summary(checks["prediction_error"])
    inside = int((checks["prediction"].astype(str) == str(P.Check.WITHIN)).sum())
    rows = [{"tool": "detectors", **s, "within": inside}]
    if "trace_only_error" in checks and checks["trace_only_error"].notna().any():
        t = P.error_summary(checks["trace_only_error"])
        ok = int(
            (pd.to_numeric(checks["trace_only_error"], errors="coerce").abs() <= tolerance).sum()
        )
        rows.append({"tool": "detectors, trace only", **t, "within": ok})
    others = [c for c in reports.columns if c == "nsys_rules" or c.startswith("tool")]
    rows += [{"tool": c, "checked": 0} for c in others]
    return pd.DataFrame(rows, columns=["tool", "checked", "within", "median_abs_error",
                                       "max_abs_error"])  # fmt: skip


def _prediction_png(checks: pd.DataFrame, tolerance: float, path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from analysis.plots.prediction import prediction_figure

    rows = checks.rename(columns={P.SPEEDUP: "predicted", "measured_speedup": "measured",
                                  P.SPEEDUP_CI_LOW: "predicted_ci_low",
                                  P.SPEEDUP_CI_HIGH: "predicted_ci_high",
                                  "measured_speedup_min": "measured_ci_low",
                                  "measured_speedup_max": "measured_ci_high"})  # fmt: skip
    rows = rows.assign(label=rows["report"] + " " + rows["class"], group=rows["class"])
    FigureCanvasAgg(prediction_figure(rows, tolerance)).print_png(path)
