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
the label, so it counts neither way.
"""

from __future__ import annotations

import argparse
import lzma
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from analysis.detect import diagnose, load_thresholds
from analysis.trace import TraceError, open_trace
from bottlenecks import CLASSES

NONE = "none"

#: Words in a third-party tool's output that name a class (the ``--tool`` adapter).
TOOL_WORDS: dict[str, tuple[str, ...]] = {
    "data_stall": ("data_stall", "data stall", "dataloader", "data loading", "starv", "input pipeline"),
    "pageable_copy": ("pageable",),
    "launch_bound": ("launch_bound", "launch overhead", "launch-bound", "cpu-bound", "host-bound", "low util"),
    "host_sync": ("host_sync", "synchroniz", "sync api", "blocking sync"),
    "exposed_comm": ("exposed_comm", "nccl", "communication"),
}  # fmt: skip


@dataclass(frozen=True)
class Labelled:
    """One labelled export."""

    name: str
    truth: str
    path: Path
    also: str = ""
    """Measured second causes (";"-separated classes): flagging them is not a false positive."""


def _find_export(root: Path, name: str) -> Path | None:
    for pattern in (f"{name}.sqlite", f"{name}.sqlite.xz"):
        hits = sorted(root.rglob(pattern))
        if hits:
            return hits[0]
    return None


def corpus_items(root: Path) -> list[Labelled]:
    """The labelled exports of a corpus folder: ``labels.csv`` (columns ``script``, ``label``)
    or ``labels.yaml`` (name -> {label: class}); exports named after the entries."""
    if (root / "labels.csv").is_file():
        table = pd.read_csv(root / "labels.csv", dtype=str).fillna("")
        entries = dict(zip(table["script"], table["label"], strict=True))
        also = dict(zip(table["script"], table.get("also", [""] * len(table)), strict=True))
    else:
        data = yaml.safe_load((root / "labels.yaml").read_text(encoding="utf-8")) or {}
        entries = {
            k: (v.get("label", NONE) if isinstance(v, dict) else str(v)) for k, v in data.items()
        }
        also = {}
    items = []
    for name, label in entries.items():
        path = _find_export(root, name)
        if path is not None:
            items.append(Labelled(name, str(label) or NONE, path, also.get(name, "")))
    return items


def run_items(root: Path) -> list[Labelled]:
    """The profiled variants of a run folder, labelled with their expected class."""
    diag = pd.read_csv(root / "diagnosis.csv")
    col = "expected" if "expected" in diag else "injected"
    items = []
    for r in diag.itertuples():
        path = _find_export(root / str(r.scenario) / str(r.variant), f"{r.scenario}__{r.variant}")
        if path is not None:
            items.append(Labelled(f"{r.scenario}/{r.variant}", str(getattr(r, col)), path))
    return items


def labelled(root: Path) -> list[Labelled]:
    """Corpus or run folder, whichever ``root`` is."""
    if (root / "labels.csv").is_file() or (root / "labels.yaml").is_file():
        return corpus_items(root)
    if (root / "diagnosis.csv").is_file():
        return run_items(root)
    raise FileNotFoundError(
        f"{root}: neither a corpus (labels.yaml) nor a run folder (diagnosis.csv)"
    )


@contextmanager
def sqlite_of(path: Path, tmp: Path) -> Iterator[Path]:
    """The export itself, or an ``.xz`` one decompressed into ``tmp``."""
    if path.suffix != ".xz":
        yield path
        return
    out = tmp / path.stem
    with lzma.open(path) as src, out.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    try:
        yield out
    finally:
        out.unlink(missing_ok=True)


def tool_classes(template: str, sqlite: Path, tmp: Path, timeout_s: float = 600) -> set[str]:
    """Classes another diagnosis command flags: run ``template`` ({sqlite}, {out} filled in)
    and look for each class's words in what it wrote (the file {out}, else its stdout)."""
    out = tmp / "tool-output"
    out.unlink(missing_ok=True)
    cmd = [a.format(sqlite=sqlite, out=out) for a in shlex.split(template)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    text = (out.read_text(errors="replace") if out.is_file() else proc.stdout).lower()
    return {k for k, words in TOOL_WORDS.items() if any(w in text for w in words)}


def expert_classes(sqlite: Path) -> set[str] | None:
    """Classes nsys's expert rules flag on the export, or None without a usable nsys."""
    from analysis import expert_rules as E
    from harness import nsys as nsys_mod

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
    """One row per report: name, truth, primary, fired, and each other tool's classes."""
    rows = []
    cfg = load_thresholds(thresholds)
    with tempfile.TemporaryDirectory(prefix="bottleneck-score-") as tmp_s:
        tmp = Path(tmp_s)
        for it in items:
            row: dict[str, Any] = {"report": it.name, "truth": it.truth, "also": it.also}
            with sqlite_of(it.path, tmp) as db:
                try:
                    with open_trace(db) as trace:
                        found = diagnose(trace, cfg)
                except TraceError as exc:
                    row.update(primary="unreadable", fired="", error=str(exc))
                    rows.append(row)
                    continue
                fired = [f.klass for f in found if f.fired]
                row["primary"] = fired[0] if fired else NONE
                row["fired"] = ";".join(fired)
                if expert_rules:
                    ex = expert_classes(db)
                    row["nsys_rules"] = ";".join(sorted(ex)) if ex is not None else "n/a"
                for i, template in enumerate(tools):
                    row[f"tool{i + 1}"] = ";".join(sorted(tool_classes(template, db, tmp)))
            rows.append(row)
    return pd.DataFrame(rows)


def _flags(cell: Any) -> set[str]:
    return {c for c in str(cell).split(";") if c and c not in ("n/a", "nan")}


def class_scores(reports: pd.DataFrame) -> pd.DataFrame:
    """Per tool and class: true/false positives, false negatives, precision, recall, F1."""
    tools = ["fired"] + [c for c in reports.columns if c == "nsys_rules" or c.startswith("tool")]
    rows = []
    for tool in tools:
        usable = reports[reports[tool].astype(str) != "n/a"] if tool in reports else reports
        for k in CLASSES:
            truth = usable["truth"] == k
            flag = usable[tool].map(lambda c, k=k: k in _flags(c))
            second = usable.get("also", pd.Series("", index=usable.index))
            second = second.map(lambda c, k=k: k in _flags(c))
            tp, fp, fn = (
                int((truth & flag).sum()),
                int((~truth & ~second & flag).sum()),
                int((truth & ~flag).sum()),
            )
            p = tp / (tp + fp) if tp + fp else float("nan")
            r = tp / (tp + fn) if tp + fn else float("nan")
            f1 = 2 * p * r / (p + r) if tp else (0.0 if (tp + fp + fn) else float("nan"))
            name = "detectors" if tool == "fired" else tool
            rows.append({"tool": name, "class": k, "tp": tp, "fp": fp, "fn": fn,
                         "precision": p, "recall": r, "f1": f1})  # fmt: skip
    return pd.DataFrame(rows)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness score", description=__doc__.split("\n")[0])
    ap.add_argument("path", type=Path, help="a corpus folder (labels.csv) or a run folder")
    ap.add_argument("--no-expert-rules", action="store_true", help="skip nsys's expert rules")
    ap.add_argument("--tool", action="append", default=[], metavar="TEMPLATE",
                    help="another diagnosis command, e.g. 'x diagnose {sqlite} -o {out}'")  # fmt: skip
    ap.add_argument("--out", type=Path, help="write score_reports.csv and score_classes.csv here")
    ap.add_argument("-d", "--diagnosis", action="append", default=[], metavar="KEY=VALUE",
                    help="override a detector threshold, e.g. host_sync.min_saving_share=0.2")  # fmt: skip
    args = ap.parse_args(argv)
    try:
        items = labelled(args.path)
    except (FileNotFoundError, OSError, yaml.YAMLError, KeyError) as exc:
        print(f"score: {exc}", file=sys.stderr)
        return 2
    if not items:
        print(f"score: {args.path}: no labelled exports found", file=sys.stderr)
        return 2
    thresholds = None
    if args.diagnosis:
        from harness.config import parse_overrides

        thresholds = parse_overrides(args.diagnosis)
    reports = score_reports(
        items, thresholds=thresholds, expert_rules=not args.no_expert_rules, tools=args.tool
    )
    classes = class_scores(reports)
    right = int((reports["primary"] == reports["truth"]).sum())
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(reports.to_string(index=False))
        print(f"\nprimary right on {right} of {len(reports)} reports\n")
        print(classes.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    if args.out:
        from harness.atomic import write_text

        args.out.mkdir(parents=True, exist_ok=True)
        write_text(args.out / "score_reports.csv", reports.to_csv(index=False))
        write_text(args.out / "score_classes.csv", classes.to_csv(index=False))
    return 0
