"""Ground truth: every variant's export diagnosed, a verdict per scenario, a confusion matrix.

The suite knows what each variant injects (the baseline its scenario's class, fixes and
``ideal`` nothing), so the detectors can be scored. Written at the end of ``harness run`` as
``diagnosis.csv``, ``verdicts.csv`` and ``confusion.csv`` in the run folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from analysis.detect import diagnose
from analysis.findings import CLASSES
from analysis.trace import TraceError, open_trace
from scenarios import Scenario

MIN_CI_LOW = 1.1


def diagnose_run(run_dir: Path, found: dict[str, Scenario], runs: pd.DataFrame) -> pd.DataFrame:
    """One row per profiled scenario x variant: injected class, primary, every detector."""
    rows: list[dict[str, Any]] = []
    for r in runs.itertuples():
        if not r.profiled:
            continue
        db = next((run_dir / r.scenario / r.variant / "profile").glob("*.sqlite"), None)
        if db is None:
            continue
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
    return pd.DataFrame(rows)


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
        precision = tp / (tp + fp) if tp + fp else float("nan")
        recall = tp / (tp + fn) if tp + fn else float("nan")
        f1 = (
            2 * precision * recall / (precision + recall)
            if tp and (precision + recall)
            else (0.0 if support or fp else float("nan"))
        )
        scores.append(
            {"class": k, "support": support, "precision": precision, "recall": recall, "f1": f1}
        )
    return matrix, pd.DataFrame(scores)
