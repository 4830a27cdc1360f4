"""The record of one judged variant (:class:`Judged`) and the tables it is written to:
``diagnosis.csv`` (one row per profiled variant) and ``findings.csv`` / ``.parquet`` (one row
per variant, class and metric).

This module is the one place that defines their columns and builds their rows: a new column is
one entry in :data:`DIAGNOSIS_COLUMNS` or :data:`FINDINGS_COLUMNS` and one key in the row
builder beside it; every reader and test takes the order from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.findings import CLASSES, PREDICTION_FIELDS, Finding
from harness.core import runfolder as rf
from harness.core.atomic import write_frame
from harness.judge.evidence import Evidence
from harness.judge.predictions import PREDICTION_COLUMNS
from harness.judge.truth import OffTarget, OffTargetState, Truth
from harness.judge.witness import NOT_READ, Witness

__all__ = [
    "DIAGNOSIS_COLUMNS",
    "FINDINGS_COLUMNS",
    "UNREADABLE",
    "Judged",
    "diagnosis_frame",
    "diagnosis_row",
    "finding_rows",
    "findings_frame",
    "write_findings",
]

#: ``primary`` of a variant whose export could not be read (its reason is in ``error``).
UNREADABLE = "unreadable"


@dataclass(frozen=True)
class Judged:
    """One profiled variant judged: its evidence against its measured truth."""

    evidence: Evidence
    truth: Truth
    own: bool | None
    """Whether the scenario's class's finding meets the truth (None: not judged)."""
    off: tuple[OffTarget, ...] = ()
    """Fired classes other than the scenario's own, held to the measured gap."""
    prediction: Mapping[str, Any] = field(default_factory=dict)
    """The :data:`PREDICTION_COLUMNS` of the variant."""
    witness: Witness = NOT_READ
    """The Nsight Compute row's witness of its truth (:mod:`harness.judge.witness`)."""

    @property
    def scenario(self) -> str:
        return self.evidence.scenario

    @property
    def variant(self) -> str:
        return self.evidence.variant

    @property
    def fired(self) -> list[Finding]:
        """The fired findings, largest impact first."""
        found = (self.evidence.findings or {}).values()
        return sorted((f for f in found if f.fired), key=lambda f: -f.impact)

    @property
    def primary(self) -> str:
        if not self.evidence.readable:
            return UNREADABLE
        fired = self.fired
        return fired[0].klass if fired else "none"

    def off_in(self, state: OffTargetState) -> list[str]:
        return [o.klass for o in self.off if o.state is state]

    @property
    def match(self) -> bool | None:
        """The variant as its truth says: wrong on a false positive or on its own class
        contradicting a decided truth; None when its own class could not be judged."""
        if not self.evidence.readable:
            return None
        if self.off_in(OffTargetState.FALSE_POSITIVE):
            return False
        return self.own


#: diagnosis.csv's columns, in order (``error`` is empty unless the export was unreadable).
DIAGNOSIS_COLUMNS: tuple[str, ...] = (
    "scenario",
    "variant",
    "kind",
    "expected",
    "expected_role",
    "truth_state",
    "measured_saving",
    "measured_saving_ci_low",
    "measured_saving_ci_high",
    "extra_runqueue_wait_share",
    "extra_loop_cpu_share",
    "bar",
    "declared_agrees",
    "expected_because",
    "primary",
    "observed",
    "match",
    "witness",
    "witness_reason",
    *PREDICTION_COLUMNS,
    *(f"{k}_{part}" for k in CLASSES for part in ("state", "impact", "off_target", "reason")),
    "error",
)


def diagnosis_row(j: Judged) -> dict[str, Any]:
    """One diagnosis.csv row of a judged variant. ``expected_role`` is the declared role,
    ``truth_state`` the measured one (:class:`harness.judge.truth.TruthState`);
    ``extra_runqueue_wait_share`` the step loop's run-queue wait per step beyond the removal's,
    a share of the variant's step, and ``extra_loop_cpu_share`` its CPU time the same way
    (counted for a class whose cost is the loop asleep only): what tells ``oversubscribed``
    from ``fires``;
    ``<class>_off_target`` is ``second_cause`` / ``false_positive`` / ``unchecked`` for a fired
    class other than the scenario's own, empty otherwise."""
    e, t = j.evidence, j.truth
    s = t.saving
    row: dict[str, Any] = {
        "scenario": e.scenario,
        "variant": e.variant,
        "kind": e.kind,
        "expected": t.expected,
        "expected_role": t.declared,
        "truth_state": str(t.state),
        "measured_saving": s.share if s else None,
        "measured_saving_ci_low": s.low if s else None,
        "measured_saving_ci_high": s.high if s else None,
        "extra_runqueue_wait_share": t.extra_wait_share,
        "extra_loop_cpu_share": t.extra_cpu_share,
        "bar": t.bar,
        "declared_agrees": t.declared_agrees,
        "expected_because": t.because,
        "primary": j.primary,
        "match": j.match,
        "witness": j.witness.state.value,
        "witness_reason": j.witness.reason,
        **j.prediction,
        "trace_only_speedup": e.trace_only_speedup,
        "error": e.error,
    }
    if e.findings is None:
        return {**row, "observed": ""}
    row["observed"] = ";".join(f.klass for f in j.fired)  # for people; code reads the states
    off = {o.klass: str(o.state) for o in j.off}
    for k in CLASSES:
        f = e.findings[k]
        row[f"{k}_state"] = str(f.state)
        row[f"{k}_impact"] = f.impact
        row[f"{k}_off_target"] = off.get(k, "")
        row[f"{k}_reason"] = f.reason
    return row


def diagnosis_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """diagnosis.csv's table from :func:`diagnosis_row` rows (``match`` and
    ``declared_agrees`` nullable booleans)."""
    diag = pd.DataFrame(rows).reindex(columns=list(DIAGNOSIS_COLUMNS))
    for col in ("match", "declared_agrees"):
        diag[col] = diag[col].astype("boolean")
    return diag


def finding_rows(e: Evidence) -> list[dict[str, Any]]:
    """findings.csv rows of one variant: one per class and metric (one with an empty metric
    for a finding without metrics); none for an unreadable export."""
    out: list[dict[str, Any]] = []
    for k in CLASSES if e.findings is not None else ():
        f = e.findings[k]
        base = {"scenario": e.scenario, "variant": e.variant, "kind": e.kind, "class": k,
                "state": str(f.state), "impact": f.impact}  # fmt: skip
        base |= {name: getattr(f, name) for name in PREDICTION_FIELDS}
        rows = f.metric_rows() or [("", float("nan"), "")]
        out += [{**base, "metric": m, "value": v, "unit": u} for m, v, u in rows]
    return out


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
