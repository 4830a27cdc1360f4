"""The detectors cross-checked against nsys's own expert rules (``nsys analyze``) on the same
exports and the same ground truth: ``expert_rules.csv`` (every mapped rule on every profiled
export) and ``crosscheck.csv`` (precision / recall / F1 per class and scorer).

Three scorers per class. ``detectors (primary)`` is detector_scores.csv (a report counts for the
class its highest-impact finding names). ``detectors (fired)`` and ``nsys analyze`` score each
class on its own: a report is predicted positive when the class's detector fired (resp. any nsys
rule mapped to the class returned rows) and is a true positive when it injects that class. A
report on which a scorer could not judge the class (our detector: ``not_judged``; nsys: every
rule of the class skipped for lack of CUDA data, or failed) is left out of that scorer's counts
and counted in ``not_applicable``: not applicable is never "did not fire".
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd

from analysis import expert_rules as E
from analysis.detect import load_thresholds
from analysis.findings import CLASSES
from harness.core import nsys as nsys_mod
from harness.core.atomic import write_frame
from harness.core.console import fit_table
from harness.core.errors import InputError
from harness.core.folder import RunFolder
from harness.core.metrics import prf
from harness.judge.evidence import profiled_exports
from harness.judge.scoring import confusion, decided, fired_counts

__all__ = [
    "NSYS",
    "OURS_FIRED",
    "OURS_PRIMARY",
    "crosscheck",
    "expert_rules_table",
    "nsys_label",
    "summary",
    "write_crosscheck",
]

#: crosscheck.csv scorers.
OURS_PRIMARY = "detectors (primary)"
OURS_FIRED = "detectors (fired)"
NSYS = "nsys analyze"

#: crosscheck.csv's columns.
CROSSCHECK_COLUMNS: tuple[str, ...] = (
    "class", "scorer", "rules", "reports", "not_applicable", "support", "tp", "fp", "fn",
    "precision", "recall", "f1", "note",
)  # fmt: skip

#: expert_rules.csv's columns.
RULES_COLUMNS: tuple[str, ...] = (
    "scenario", "variant", "kind", "expected", "rule", "rule_2024", "class", "status", "rows",
    "fired", "reason", "seconds", "nsys",
)  # fmt: skip

#: What a cell of the console summary shows where a score is undefined (nothing judged).
NA = "n/a"


def _nsys_for(run_dir: Path) -> tuple[str, str] | None:
    """(path, version) of the nsys that profiled the run (manifest.json), else the one found."""
    try:
        recorded = (RunFolder(run_dir).manifest() or {}).get("nsys")
        if recorded and Path(recorded["path"]).is_file():
            return str(recorded["path"]), str(recorded.get("version", ""))
    except (InputError, KeyError, TypeError):  # a manifest it cannot read: the nsys found
        pass
    found = nsys_mod.find(None)
    return (found.path, found.version) if found else None


def nsys_label(version: str) -> str:
    """'NVIDIA Nsight Systems version 2022.4.2.1-df9881f' -> '2022.4.2.1-df9881f'."""
    return version.replace("NVIDIA Nsight Systems version", "").strip()


def _runnable(run_dir: Path) -> tuple[tuple[str, str] | None, list[str], str | None]:
    """(nsys path and version, the rules it can run, why none can run)."""
    nsys = _nsys_for(run_dir)
    if nsys is None:
        return None, [], "no nsys found, so nsys's expert rules could not run"
    try:
        return nsys, E.runnable_rules(nsys[0]), None
    except E.ExpertRulesUnavailable as exc:
        return nsys, [], str(exc)


def expert_rules_table(
    run_dir: Path,
    diag: pd.DataFrame,
    runs: pd.DataFrame,
    *,
    timeout_s: float = 300,
    budget_s: float | None = None,
    jobs: int = 1,
) -> tuple[pd.DataFrame, str | None]:
    """Every mapped nsys rule on every profiled export: one row per report and rule.

    Columns (:data:`RULES_COLUMNS`): scenario, variant, kind, expected, rule (as this nsys names
    it), rule_2024 (the current name), class, status (fired / silent / not_applicable / error /
    skipped), rows, fired (empty unless the rule ran), reason, seconds, nsys. Returns the table
    and, when the rules could not run at all (no nsys, no ``analyze``), the reason (one
    ``skipped`` row per report then carries it). ``timeout_s`` bounds one rule on one report;
    once ``budget_s`` seconds are spent, the remaining reports get ``skipped`` rows saying so.
    ``jobs`` reports are read at once.
    """
    truth = {(r.scenario, r.variant): r for r in diag.itertuples()} if not diag.empty else {}
    reports = [
        (r, db) for r, db in profiled_exports(run_dir, runs) if (r.scenario, r.variant) in truth
    ]
    nsys, rules, skip = _runnable(run_dir)
    t0 = time.monotonic()

    def one(r: Any, db: Path) -> list[dict]:
        base = {"scenario": r.scenario, "variant": r.variant, "kind": r.kind,
                "expected": truth[(r.scenario, r.variant)].expected}  # fmt: skip
        if skip:
            return [{**base, "status": "skipped", "reason": skip}]
        if budget_s is not None and time.monotonic() - t0 > budget_s:
            why = f"expert_rules.budget_s={budget_s:g} s spent on earlier reports"
            return [{**base, "status": "skipped", "reason": why}]
        return [
            {**base, "rule": d["rule"], "rule_2024": d["canonical"], "class": d["class"],
             "status": d["status"], "rows": d["rows"], "fired": d["fired"],
             "reason": d["reason"], "seconds": d["seconds"],
             "nsys": nsys_label(nsys[1])}  # type: ignore[index]
            for d in (res.to_dict() for res in E.run_rules(
                nsys[0], db, rules, timeout_s=timeout_s))  # type: ignore[index]
        ]  # fmt: skip

    # each rule is an ``nsys analyze`` process: ``jobs`` reports at once, rows in report order
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        done = [pool.submit(one, r, db) for r, db in reports]
        out = [row for f in done for row in f.result()]
    table = pd.DataFrame(out).reindex(columns=list(RULES_COLUMNS))
    table["rows"] = table["rows"].astype("Int64")
    table["fired"] = table["fired"].astype("boolean")
    return table, skip


def _ours(diag: pd.DataFrame, matrix: pd.DataFrame, scores: pd.DataFrame, k: str) -> list[dict]:
    """The two detector scorers' rows of class ``k``."""
    tp = int(matrix.loc[k, k])
    fp, fn = int(matrix[k].sum()) - tp, int(matrix.loc[k].sum()) - tp
    left_out = int(scores.set_index("class").loc[k, "not_judged"])
    primary = {"class": k, "scorer": OURS_PRIMARY, "rules": "",
               "reports": int(matrix.to_numpy().sum()), "not_applicable": left_out,
               "support": tp + fn, "tp": tp, "fp": fp, "fn": fn, **prf(tp, fp, fn), "note": ""}  # fmt: skip
    c = fired_counts(diag, k)
    fired = {"class": k, "scorer": OURS_FIRED, "rules": "", "reports": c["reports"],
             "not_applicable": c["not_judged"], "support": c["tp"] + c["fn"], "tp": c["tp"],
             "fp": c["fp"], "fn": c["fn"], **prf(c["tp"], c["fp"], c["fn"]), "note": ""}  # fmt: skip
    return [primary, fired]


def _nsys_row(k: str, ran: pd.DataFrame, keys: set[tuple[str, str]], skip_note: str) -> dict:
    """nsys's rules scored on class ``k`` over the reports ``keys`` (those with a truth)."""
    names = sorted({s.canonical for s in E.RULES if s.klass == k})
    row: dict[str, Any] = {"class": k, "scorer": NSYS, "rules": " ".join(names)}
    mine = ran[ran["class"] == k] if not ran.empty else ran
    if not names:
        return {**row, "note": "no nsys rule maps to this class"}
    if mine.empty:
        return {**row, "note": skip_note or "no rule results"}
    tp = fp = fn = n = na = 0
    for key, g in mine.groupby(["scenario", "variant"], sort=False):
        if key not in keys:
            continue  # undecided expectation or unreadable export: not scored
        judged_rows = g[g["fired"].notna()]
        if judged_rows.empty:
            na += 1
            continue
        n += 1
        hit = bool(judged_rows["fired"].astype(bool).any())
        pos = g["expected"].iloc[0] == k
        tp, fp, fn = tp + (pos and hit), fp + (hit and not pos), fn + (pos and not hit)
    return {**row, "reports": n, "not_applicable": na, "support": tp + fn, "tp": tp, "fp": fp,
            "fn": fn, **prf(tp, fp, fn),
            "note": "" if n else "no report had the data these rules need"}  # fmt: skip


def crosscheck(diag: pd.DataFrame, rules: pd.DataFrame) -> pd.DataFrame:
    """Precision / recall / F1 per class and scorer (see the module's docstring), with
    ``reports`` (scored) and ``not_applicable`` (left out) per scorer."""
    readable = decided(diag)
    keys = (
        set(zip(readable["scenario"], readable["variant"], strict=True))
        if not readable.empty
        else set()
    )
    matrix, scores = confusion(diag)
    ran = rules[rules["status"].isin(["fired", "silent", "not_applicable", "error"])]
    skip_note = ""
    if ran.empty and not rules.empty and "reason" in rules and rules["reason"].notna().any():
        skip_note = str(rules["reason"].dropna().iloc[0])
    out: list[dict[str, Any]] = []
    for k in CLASSES:
        out += _ours(diag, matrix, scores, k)
        out.append(_nsys_row(k, ran, keys, skip_note))
    table = pd.DataFrame(out).reindex(columns=list(CROSSCHECK_COLUMNS))
    for c in ("reports", "not_applicable", "support", "tp", "fp", "fn"):
        table[c] = table[c].astype("Int64")
    table["rules"] = table["rules"].fillna("")
    table["note"] = table["note"].fillna("")
    return table


def write_crosscheck(
    run_dir: Path, diag: pd.DataFrame, runs: pd.DataFrame, *, quiet: bool = False, jobs: int = 1
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``expert_rules.csv`` and ``crosscheck.csv`` in ``run_dir``; prints a short summary.

    Never raises for nsys's sake: a missing nsys or ``analyze`` is recorded as ``skipped`` with
    the reason in both files; a failing rule is an ``error`` row.
    """
    cfg = load_thresholds().expert_rules
    budget = cfg.budget_s
    rules, skip = expert_rules_table(
        run_dir,
        diag,
        runs,
        timeout_s=float(cfg.timeout_s),
        budget_s=None if budget is None else float(budget),
        jobs=jobs,
    )
    scores = crosscheck(diag, rules)
    write_frame(run_dir / "expert_rules.csv", rules)
    write_frame(run_dir / "crosscheck.csv", scores)
    if not quiet:
        if skip:
            print(f"\nnsys analyze cross-check skipped: {skip}")
        else:
            print("\ncross-check with nsys analyze (crosscheck.csv, expert_rules.csv):")
            print(fit_table(summary(scores)))
    return rules, scores


def _count(row: pd.Series | None, col: str) -> int | str:
    return "" if row is None or pd.isna(row[col]) else int(row[col])


def summary(scores: pd.DataFrame) -> pd.DataFrame:
    """One line per class: F1 of each scorer (n/a where the scorer judged no report of it) and
    on how many reports our detector and nsys's rules could judge the class."""
    out = []
    for k in CLASSES:
        g = scores[scores["class"] == k].set_index("scorer")

        def f1(scorer: str, g: pd.DataFrame = g) -> str:
            v = g.loc[scorer, "f1"] if scorer in g.index else float("nan")
            return NA if pd.isna(v) else f"{v:.2f}"

        ours = g.loc[OURS_FIRED] if OURS_FIRED in g.index else None
        nsys = g.loc[NSYS] if NSYS in g.index else None
        out.append(
            {
                "class": k,
                "F1 ours (primary)": f1(OURS_PRIMARY),
                "F1 ours (fired)": f1(OURS_FIRED),
                "ours judged": _count(ours, "reports"),
                "ours n/a": _count(ours, "not_applicable"),
                "F1 nsys": f1(NSYS),
                "nsys rules": "" if nsys is None else nsys["rules"],
                "nsys judged": _count(nsys, "reports"),
                "nsys n/a": _count(nsys, "not_applicable"),
            }
        )
    return pd.DataFrame(out)
