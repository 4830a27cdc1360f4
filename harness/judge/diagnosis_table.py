"""The tables the detectors' outcomes are written to: ``diagnosis.csv`` (one row per profiled
variant) and ``findings.csv`` / ``.parquet`` (one row per variant, class and metric).

This module is the one place that defines their columns and builds their rows: a new column is
one entry in :data:`DIAGNOSIS_COLUMNS` or :data:`FINDINGS_COLUMNS` and one key in the row
builder beside it; every reader and test takes the order from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.findings import CLASSES, PREDICTION_FIELDS, Finding
from harness.core import runfolder as rf
from harness.core.atomic import write_frame
from harness.judge.predictions import PREDICTION_COLUMNS
from harness.judge.truth import Expected, judge
from scenarios import Scenario

__all__ = [
    "DIAGNOSIS_COLUMNS",
    "FINDINGS_COLUMNS",
    "UNREADABLE",
    "diagnosis_frame",
    "diagnosis_row",
    "finding_rows",
    "findings_frame",
    "profiled_exports",
    "write_findings",
]

#: ``primary`` of a variant whose export could not be read (its reason is in ``error``).
UNREADABLE = "unreadable"

#: diagnosis.csv's columns, in order (``error`` is empty unless the export was unreadable).
DIAGNOSIS_COLUMNS: tuple[str, ...] = (
    "scenario",
    "variant",
    "kind",
    "expected",
    "expected_role",
    "expected_because",
    "primary",
    "observed",
    "match",
    *PREDICTION_COLUMNS,
    *(f"{k}_{part}" for k in CLASSES for part in ("state", "impact", "reason")),
    "error",
)

#: findings.csv's columns: one row per scenario x variant x class x metric.
FINDINGS_COLUMNS: tuple[str, ...] = (
    "scenario",
    "variant",
    "kind",
    "class",
    "state",
    "impact",
    *PREDICTION_FIELDS,
    "metric",
    "value",
    "unit",
)


def profiled_exports(run_dir: Path, runs: pd.DataFrame) -> list[tuple[Any, Path]]:
    """(runs row, .sqlite) of every profiled variant that has an export."""
    out = []
    for r in runs.itertuples():
        if not r.profiled:
            continue
        db = rf.profile_file(run_dir, r.scenario, r.variant, rf.SQLITE_SUFFIX)
        if db is not None:
            out.append((r, db))
    return out


def diagnosis_row(
    r: Any, scen: Scenario, expected: Expected, findings: Mapping[str, Finding] | None, error: str
) -> dict[str, Any]:
    """One diagnosis.csv row: ``r`` is the variant's runs row (scenario, variant, kind);
    ``findings`` None means the export was unreadable (``error`` says why)."""
    row: dict[str, Any] = {
        "scenario": r.scenario,
        "variant": r.variant,
        "kind": r.kind,
        "expected": expected.klass,
        "expected_role": expected.role,
        "expected_because": expected.because,
    }
    if findings is None:
        return {**row, "primary": UNREADABLE, "observed": "", "match": None, "error": error}
    fired = sorted((f for f in findings.values() if f.fired), key=lambda f: -f.impact)
    row["primary"] = fired[0].klass if fired else "none"
    row["observed"] = ";".join(f.klass for f in fired)
    row["match"] = judge(expected, findings, scen.bottleneck)
    for k in CLASSES:
        row[f"{k}_state"] = str(findings[k].state)
        row[f"{k}_impact"] = findings[k].impact
        row[f"{k}_reason"] = findings[k].reason
    row["error"] = ""
    return row


def diagnosis_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """diagnosis.csv's table from :func:`diagnosis_row` rows (``match`` a nullable boolean)."""
    diag = pd.DataFrame(rows).reindex(columns=list(DIAGNOSIS_COLUMNS))
    diag["match"] = diag["match"].astype("boolean")
    return diag


def finding_rows(r: Any, findings: Mapping[str, Finding]) -> list[dict[str, Any]]:
    """findings.csv rows of one variant: one per class and metric (one with an empty metric
    for a finding without metrics)."""
    out = []
    for k in CLASSES:
        f = findings[k]
        base = {"scenario": r.scenario, "variant": r.variant, "kind": r.kind, "class": k,
                "state": str(f.state), "impact": f.impact}  # fmt: skip
        base |= {name: getattr(f, name) for name in PREDICTION_FIELDS}
        rows = f.metric_rows() or [("", float("nan"), "")]
        out += [{**base, "metric": m, "value": v, "unit": u} for m, v, u in rows]
    return out


def findings_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """findings.csv's table from :func:`finding_rows` rows."""
    return pd.DataFrame(rows).reindex(columns=list(FINDINGS_COLUMNS))


def write_findings(run_dir: Path, findings: pd.DataFrame) -> None:
    """findings.csv, and findings.parquet when pyarrow is installed."""
    write_frame(rf.table_path(run_dir, "findings"), findings)
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return
    write_frame(rf.table_path(run_dir, "findings", ".parquet"), findings)
