"""Ground truth: every variant's export diagnosed, a verdict per scenario, a confusion matrix.

The suite knows what each variant injects (the baseline its scenario's class, fixes and
``ideal`` nothing), so the detectors can be scored. Written at the end of ``harness run`` as
``diagnosis.csv``, ``verdicts.csv`` and ``confusion.csv`` in the run folder; ``diagnose_run``
also cross-checks against nsys's own expert rules (``nsys analyze``) on the same exports and
writes ``expert_rules.csv`` and ``crosscheck.csv`` (see :func:`write_crosscheck`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pandas as pd

from analysis import expert_rules as E
from analysis.detect import diagnose, load_thresholds
from analysis.findings import CLASSES
from analysis.gpu_work import gpu_work
from analysis.trace import TraceError, open_trace
from harness import nsys as nsys_mod
from harness.atomic import write_frame
from scenarios import Scenario

MIN_CI_LOW = 1.1


def _exports(run_dir: Path, runs: pd.DataFrame) -> list[tuple[Any, Path]]:
    """(runs row, .sqlite) of every profiled variant that has an export."""
    out = []
    for r in runs.itertuples():
        if not r.profiled:
            continue
        db = next((run_dir / r.scenario / r.variant / "profile").glob("*.sqlite"), None)
        if db is not None:
            out.append((r, db))
    return out


def diagnose_run(
    run_dir: Path, found: dict[str, Scenario], runs: pd.DataFrame, *, crosscheck: bool = True
) -> pd.DataFrame:
    """One row per profiled scenario x variant: injected class, primary, every detector.

    With ``crosscheck`` (the default, and unless ``expert_rules.enabled`` is false in
    conf/diagnosis), the same exports also go through nsys's expert rules:
    :func:`write_crosscheck` writes ``expert_rules.csv`` and ``crosscheck.csv`` into
    ``run_dir`` (or records why it could not).
    """
    rows: list[dict[str, Any]] = []
    for r, db in _exports(run_dir, runs):
        scen = found[r.scenario]
        row: dict[str, Any] = {
            "scenario": r.scenario,
            "variant": r.variant,
            "kind": r.kind,
            "injected": scen.bottleneck if r.kind == "baseline" else "none",
        }
        try:
            with open_trace(db) as trace:
                findings = {f.klass: f for f in diagnose(trace)}
        except TraceError as exc:
            row.update(primary="unreadable", error=str(exc))
            rows.append(row)
            continue
        fired = sorted((f for f in findings.values() if f.fired), key=lambda f: -f.impact)
        row["primary"] = fired[0].klass if fired else "none"
        for k in CLASSES:
            row[f"{k}_fired"] = findings[k].fired
            row[f"{k}_impact"] = findings[k].impact
            row[f"{k}_reason"] = findings[k].reason
        rows.append(row)
    diag = pd.DataFrame(rows)
    if crosscheck and bool(load_thresholds().get("expert_rules", {}).get("enabled", True)):
        write_crosscheck(run_dir, diag, runs)
    return diag


def gpu_work_table(run_dir: Path, found: dict[str, Scenario], runs: pd.DataFrame) -> pd.DataFrame:
    """``gpu_work.csv``: GPU work per step of every profiled variant (kernels, their summed
    duration, GPU busy time; :func:`analysis.gpu_work.gpu_work`). For a scenario without an
    ``ideal`` variant the limit is analytic: ``limit_ms_per_step`` is the baseline's kernel-sum
    per step from its own trace, and ``share_of_limit`` = limit / the variant's unprofiled mean
    step time. An export without kernels (a CPU capture) gets its reason in ``error``."""
    rows: list[dict[str, Any]] = []
    for r, db in _exports(run_dir, runs):
        row: dict[str, Any] = {
            "scenario": r.scenario,
            "variant": r.variant,
            "kind": r.kind,
            "step_ms_mean": r.step_ms_mean,
        }
        try:
            with open_trace(db) as trace:
                row.update(gpu_work(trace).iloc[0].to_dict())
        except TraceError as exc:
            row["error"] = str(exc)
        rows.append(row)
    table = pd.DataFrame(rows)
    if table.empty or "kernel_ms_per_step" not in table:
        return table
    table["limit_ms_per_step"] = float("nan")
    for name, group in table.groupby("scenario", sort=False):
        if "ideal" in found[name].variant_names:
            continue
        base = group[group["kind"] == "baseline"]["kernel_ms_per_step"].dropna()
        if not base.empty and group["steps"].notna().all():
            table.loc[group.index, "limit_ms_per_step"] = float(base.iloc[0])
    table["share_of_limit"] = table["limit_ms_per_step"] / table["step_ms_mean"]
    return table


def verdicts(diag: pd.DataFrame, runs: pd.DataFrame, found: dict[str, Scenario]) -> pd.DataFrame:
    """Per scenario: confirmed, refuted or inconclusive, with the reason and off-target findings."""
    out = []
    for name in runs["scenario"].unique():
        scen = found[name]
        cls = scen.bottleneck
        d = diag[diag["scenario"] == name] if not diag.empty else diag
        r = runs[runs["scenario"] == name]
        fixes = r[r["kind"] == "fix"]
        best_low = fixes["speedup_ci_low"].max() if not fixes.empty else float("nan")
        base = d[d["kind"] == "baseline"] if not d.empty else d
        others = d[d["kind"] != "baseline"] if not d.empty else d
        off = []
        if not d.empty:
            for row in d.itertuples():
                for k in CLASSES:
                    if getattr(row, f"{k}_fired", False) and k != row.injected:
                        off.append(f"{row.variant}:{k}")
        if base.empty:
            verdict, why = "inconclusive", "the baseline has no readable export"
        elif not bool(base.iloc[0].get(f"{cls}_fired", False)):
            reason = str(base.iloc[0].get(f"{cls}_reason", ""))
            if "missing" in reason or "no CUDA" in reason:
                verdict, why = "inconclusive", f"the baseline's export lacks the evidence: {reason}"
            else:
                verdict, why = "refuted", f"{cls} did not fire on the baseline: {reason}"
        elif not others.empty and others[f"{cls}_fired"].astype(bool).any():
            bad = ", ".join(others[others[f"{cls}_fired"].astype(bool)]["variant"])
            verdict, why = "refuted", f"{cls} also fires on {bad}"
        elif not (best_low >= MIN_CI_LOW):
            verdict, why = (
                "inconclusive",
                f"best fix's speedup CI lower bound {best_low:.3g} < {MIN_CI_LOW}",
            )
        else:
            verdict, why = (
                "confirmed",
                f"{cls} fires on the baseline only; best fix CI low {best_low:.3g}x",
            )
        out.append(
            {
                "scenario": name,
                "bottleneck": cls,
                "verdict": verdict,
                "reason": why,
                "off_target": "; ".join(off),
            }
        )
    return pd.DataFrame(out)


def _scores(tp: int, fp: int, fn: int) -> dict[str, float]:
    """Precision, recall and F1 from counts (NaN where undefined; F1 0 when a class was missed
    or only falsely found)."""
    support = tp + fn
    precision = tp / (tp + fp) if tp + fp else float("nan")
    recall = tp / (tp + fn) if tp + fn else float("nan")
    f1 = (
        2 * precision * recall / (precision + recall)
        if tp and (precision + recall)
        else (0.0 if support or fp else float("nan"))
    )
    return {"precision": precision, "recall": recall, "f1": f1}


def confusion(diag: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Confusion matrix (injected x primary) and precision / recall / F1 per class."""
    labels = [*CLASSES, "none"]
    if diag.empty:
        matrix = pd.DataFrame(0, index=labels, columns=labels)
    else:
        matrix = pd.crosstab(diag["injected"], diag["primary"]).reindex(
            index=labels, columns=labels, fill_value=0
        )
    scores = []
    for k in CLASSES:
        tp = int(matrix.loc[k, k])
        fp = int(matrix[k].sum()) - tp
        fn = int(matrix.loc[k].sum()) - tp
        support = int(matrix.loc[k].sum())
        scores.append({"class": k, "support": support, **_scores(tp, fp, fn)})
    return matrix, pd.DataFrame(scores)


# --- cross-check against nsys analyze ------------------------------------------------------------

#: crosscheck.csv scorers.
OURS_PRIMARY = "detectors (primary)"
OURS_FIRED = "detectors (fired)"
NSYS = "nsys analyze"


def _nsys_for(run_dir: Path) -> tuple[str, str] | None:
    """(path, version) of the nsys that profiled the run (manifest.json), else the one found."""
    try:
        recorded = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))["nsys"]
        if recorded and Path(recorded["path"]).is_file():
            return str(recorded["path"]), str(recorded.get("version", ""))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    found = nsys_mod.find(None)
    return (found.path, found.version) if found else None


def nsys_label(version: str) -> str:
    """'NVIDIA Nsight Systems version 2022.4.2.1-df9881f' -> '2022.4.2.1-df9881f'."""
    return version.replace("NVIDIA Nsight Systems version", "").strip()


def expert_rules_table(
    run_dir: Path,
    diag: pd.DataFrame,
    runs: pd.DataFrame,
    *,
    timeout_s: float = 300,
    budget_s: float | None = None,
) -> tuple[pd.DataFrame, str | None]:
    """Every mapped nsys rule on every profiled export: one row per report and rule.

    Columns: scenario, variant, kind, injected, rule (as this nsys names it), rule_2024 (the
    current name), class, status (fired / silent / not_applicable / error / skipped), rows,
    fired (empty unless the rule ran), reason, seconds, nsys. Returns the table and, when the
    rules could not run at all (no nsys, no ``analyze``), the reason (one ``skipped`` row per
    report then carries it). ``timeout_s`` bounds one rule on one report; once ``budget_s``
    seconds are spent, the remaining reports get ``skipped`` rows saying so.
    """
    truth = {(r.scenario, r.variant): r for r in diag.itertuples()} if not diag.empty else {}
    reports = [(r, db) for r, db in _exports(run_dir, runs) if (r.scenario, r.variant) in truth]
    nsys = _nsys_for(run_dir)
    skip = None
    rules: list[str] = []
    if nsys is None:
        skip = "no nsys found, so nsys's expert rules could not run"
    else:
        try:
            rules = E.runnable_rules(nsys[0])
        except E.ExpertRulesUnavailable as exc:
            skip = str(exc)
    out = []
    t0 = time.monotonic()
    for r, db in reports:
        base = {
            "scenario": r.scenario,
            "variant": r.variant,
            "kind": r.kind,
            "injected": truth[(r.scenario, r.variant)].injected,
        }
        if skip:
            out.append({**base, "status": "skipped", "reason": skip})
            continue
        if budget_s is not None and time.monotonic() - t0 > budget_s:
            why = f"expert_rules.budget_s={budget_s:g} s spent on earlier reports"
            out.append({**base, "status": "skipped", "reason": why})
            continue
        for res in E.run_rules(nsys[0], db, rules, timeout_s=timeout_s):  # type: ignore[index]
            d = res.to_dict()
            out.append(
                {
                    **base,
                    "rule": d["rule"],
                    "rule_2024": d["canonical"],
                    "class": d["class"],
                    "status": d["status"],
                    "rows": d["rows"],
                    "fired": d["fired"],
                    "reason": d["reason"],
                    "seconds": d["seconds"],
                    "nsys": nsys_label(nsys[1]),  # type: ignore[index]
                }
            )
    cols = ["scenario", "variant", "kind", "injected", "rule", "rule_2024", "class", "status"]
    cols += ["rows", "fired", "reason", "seconds", "nsys"]
    table = pd.DataFrame(out).reindex(columns=cols)
    table["rows"] = table["rows"].astype("Int64")
    table["fired"] = table["fired"].astype("boolean")
    return table, skip


def crosscheck(diag: pd.DataFrame, rules: pd.DataFrame) -> pd.DataFrame:
    """Precision / recall / F1 per class: the detectors next to nsys's rules, same ground truth.

    Three scorers per class. ``detectors (primary)`` is detector_scores.csv (a report counts
    for the class its highest-impact finding names). ``detectors (fired)`` and ``nsys analyze``
    score each class on its own: a report is predicted positive when the class's detector fired
    (resp. any nsys rule mapped to the class returned rows) and is a true positive when it
    injects that class. A report on which none of a class's rules could judge (skipped: no
    CUDA data; or an error) is left out of that class's nsys score and counted in
    ``not_applicable``: not applicable is never "did not fire". ``reports`` is the number of
    reports scored.
    """
    cols = ["class", "scorer", "rules", "reports", "not_applicable", "support", "tp", "fp"]
    cols += ["fn", "precision", "recall", "f1", "note"]
    out: list[dict[str, Any]] = []
    readable = diag[diag["primary"] != "unreadable"] if not diag.empty else diag
    matrix, _ = confusion(diag)
    ran = rules[rules["status"].isin(["fired", "silent", "not_applicable", "error"])]
    skip_note = ""
    if ran.empty and not rules.empty and "reason" in rules:
        skip_note = str(rules["reason"].dropna().iloc[0]) if rules["reason"].notna().any() else ""
    for k in CLASSES:
        tp = int(matrix.loc[k, k])
        fp, fn = int(matrix[k].sum()) - tp, int(matrix.loc[k].sum()) - tp
        out.append(
            {"class": k, "scorer": OURS_PRIMARY, "rules": "", "reports": int(matrix.to_numpy().sum()),
             "not_applicable": 0, "support": tp + fn, "tp": tp, "fp": fp, "fn": fn,
             **_scores(tp, fp, fn), "note": ""}
        )  # fmt: skip
        if readable.empty:
            tp = fp = fn = 0
        else:
            pos = readable["injected"] == k
            hit = readable[f"{k}_fired"].fillna(False).astype(bool)
            tp, fp, fn = int((pos & hit).sum()), int((~pos & hit).sum()), int((pos & ~hit).sum())
        out.append(
            {"class": k, "scorer": OURS_FIRED, "rules": "", "reports": len(readable),
             "not_applicable": 0, "support": tp + fn, "tp": tp, "fp": fp, "fn": fn,
             **_scores(tp, fp, fn), "note": ""}
        )  # fmt: skip
        mine = ran[ran["class"] == k] if not ran.empty else ran
        names = sorted({s.canonical for s in E.RULES if s.klass == k})
        row: dict[str, Any] = {"class": k, "scorer": NSYS, "rules": " ".join(names)}
        if not names:
            out.append({**row, "note": "no nsys rule maps to this class"})
            continue
        if mine.empty:
            out.append({**row, "note": skip_note or "no rule results"})
            continue
        tp = fp = fn = n = na = 0
        for _, g in mine.groupby(["scenario", "variant"], sort=False):
            judged = g[g["fired"].notna()]
            if judged.empty:
                na += 1
                continue
            n += 1
            hit = bool(judged["fired"].astype(bool).any())
            pos = g["injected"].iloc[0] == k
            tp, fp, fn = tp + (pos and hit), fp + (hit and not pos), fn + (pos and not hit)
        out.append(
            {**row, "reports": n, "not_applicable": na, "support": tp + fn, "tp": tp, "fp": fp,
             "fn": fn, **_scores(tp, fp, fn),
             "note": "" if n else "no report had the data these rules need"}
        )  # fmt: skip
    table = pd.DataFrame(out).reindex(columns=cols)
    for c in ("reports", "not_applicable", "support", "tp", "fp", "fn"):
        table[c] = table[c].astype("Int64")
    table["rules"] = table["rules"].fillna("")
    table["note"] = table["note"].fillna("")
    return table


def write_crosscheck(
    run_dir: Path, diag: pd.DataFrame, runs: pd.DataFrame, *, quiet: bool = False
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``expert_rules.csv`` and ``crosscheck.csv`` in ``run_dir``; prints a short summary.

    Never raises for nsys's sake: a missing nsys or ``analyze`` is recorded as ``skipped`` with
    the reason in both files; a failing rule is an ``error`` row.
    """
    cfg = load_thresholds().get("expert_rules", {})
    budget = cfg.get("budget_s")
    rules, skip = expert_rules_table(
        run_dir,
        diag,
        runs,
        timeout_s=float(cfg.get("timeout_s", 300)),
        budget_s=None if budget is None else float(budget),
    )
    scores = crosscheck(diag, rules)
    write_frame(run_dir / "expert_rules.csv", rules)
    write_frame(run_dir / "crosscheck.csv", scores)
    if not quiet:
        if skip:
            print(f"\nnsys analyze cross-check skipped: {skip}")
        else:
            print("\ncross-check with nsys analyze (crosscheck.csv, expert_rules.csv):")
            print(summary(scores).to_string(index=False))
    return rules, scores


def summary(scores: pd.DataFrame) -> pd.DataFrame:
    """One line per class: F1 of each scorer and on how many reports nsys's rules could judge."""
    out = []
    for k in CLASSES:
        g = scores[scores["class"] == k].set_index("scorer")

        def f1(scorer: str, g: pd.DataFrame = g) -> str:
            v = g.loc[scorer, "f1"] if scorer in g.index else float("nan")
            return "-" if pd.isna(v) else f"{v:.2f}"

        nsys = g.loc[NSYS] if NSYS in g.index else None
        judged = "" if nsys is None or pd.isna(nsys["reports"]) else int(nsys["reports"])
        na = "" if nsys is None or pd.isna(nsys["not_applicable"]) else int(nsys["not_applicable"])
        out.append(
            {
                "class": k,
                "F1 ours (primary)": f1(OURS_PRIMARY),
                "F1 ours (fired)": f1(OURS_FIRED),
                "F1 nsys": f1(NSYS),
                "nsys rules": "" if nsys is None else nsys["rules"],
                "nsys judged": judged,
                "nsys n/a": na,
            }
        )
    return pd.DataFrame(out)
