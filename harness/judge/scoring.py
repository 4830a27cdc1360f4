"""The detectors scored against the ground truth of a run: the confusion matrix and precision,
recall and F1 per class (``confusion.csv``, ``detector_scores.csv``).

The ground truth is the measured one (:mod:`harness.judge.truth`): ``expected`` and
``truth_state`` in diagnosis.csv. Only what could be judged is counted. A report whose export
was unreadable or whose truth is not decided (``either``, ``not_taken``, ``no_removal``) counts
nowhere in the matrix; the ``either`` ones are counted apart per class (``either``). A report
whose expected class could not be judged (a CPU capture has no CUDA tables, so pageable_copy
cannot say anything there) is left out of the matrix and counted in its class's
``not_judged`` instead: a class that no report could judge scores n/a (NaN), never 0. "Could not
judge" is never "did not fire". A class that fired beside the scenario's own within the
measured gap (``<class>_off_target`` = ``second_cause``) is a true positive of that class where
it is scored on its own (:func:`fired_counts`), not a false one.
"""

from __future__ import annotations

import pandas as pd

from analysis.findings import CLASSES, State
from harness.core.metrics import prf
from harness.judge.diagnosis_table import UNREADABLE
from harness.judge.truth import OffTargetState, TruthState

__all__ = ["SCORE_COLUMNS", "confusion", "decided", "fired_counts", "is_decided", "judged"]

#: detector_scores.csv's columns (``either``: readable reports of the class whose measured
#: saving straddled its bar, left out of the other columns).
SCORE_COLUMNS: tuple[str, ...] = (
    "class",
    "support",
    "not_judged",
    "either",
    "precision",
    "recall",
    "f1",
)


def is_decided(diag: pd.DataFrame) -> pd.Series:
    """Per row: the measured truth says fires or clear (a table written before the truth was
    measured has no ``truth_state``: its rows with a decided ``expected_role``)."""
    if "truth_state" in diag:
        states = {str(s) for s in TruthState if s.decided}
        return diag["truth_state"].astype(str).isin(states)
    if "expected_role" in diag:
        return diag["expected_role"].astype(str) != "undecided"
    return pd.Series(True, index=diag.index)


def decided(diag: pd.DataFrame) -> pd.DataFrame:
    """Rows with a ground truth: readable exports whose truth is decided."""
    if diag.empty:
        return diag
    return diag[(diag["primary"] != UNREADABLE) & is_decided(diag)]


def judged(diag: pd.DataFrame) -> pd.DataFrame:
    """The rows the primary scores count: decided rows whose findings could say whether they
    meet the expectation (``match`` known)."""
    rows = decided(diag)
    return rows if rows.empty else rows[rows["match"].notna()]


def confusion(diag: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Confusion matrix (expected x primary over :func:`judged` rows; a fix measured ``fires``
    counts for its class) and precision / recall / F1 per class (:data:`SCORE_COLUMNS`), with
    ``not_judged``: the decided reports expected to show the class that were left out."""
    labels = [*CLASSES, "none"]
    rows = judged(diag)
    if rows.empty:
        matrix = pd.DataFrame(0, index=labels, columns=labels)
    else:
        matrix = pd.crosstab(rows["expected"], rows["primary"]).reindex(
            index=labels, columns=labels, fill_value=0
        )
    matrix.index.name = "expected"
    left_out = decided(diag)
    left_out = left_out[left_out["match"].isna()] if not left_out.empty else left_out
    scores = []
    for k in CLASSES:
        tp = int(matrix.loc[k, k])
        fp = int(matrix[k].sum()) - tp
        fn = int(matrix.loc[k].sum()) - tp
        missing = int((left_out["expected"] == k).sum()) if not left_out.empty else 0
        scores.append({"class": k, "support": tp + fn, "not_judged": missing,
                       "either": _either(diag, k), **prf(tp, fp, fn)})  # fmt: skip
    return matrix, pd.DataFrame(scores, columns=list(SCORE_COLUMNS))


def _either(diag: pd.DataFrame, klass: str) -> int:
    """Readable reports of ``klass`` whose measured saving straddled its bar."""
    if diag.empty or "truth_state" not in diag:
        return 0
    rows = diag[(diag["primary"] != UNREADABLE) & (diag["expected"] == klass)]
    return int((rows["truth_state"].astype(str) == str(TruthState.EITHER)).sum())


def fired_counts(diag: pd.DataFrame, klass: str) -> dict[str, int]:
    """The class scored on its own over decided rows: a report is predicted positive when the
    class fired, a true positive when it is expected or a second cause within the measured gap.
    Reports on which the class was not judged are left out (``not_judged``). Keys: reports,
    not_judged, tp, fp, fn."""
    rows = decided(diag)
    col = f"{klass}_state"
    if rows.empty or col not in rows:
        return {"reports": 0, "not_judged": 0, "tp": 0, "fp": 0, "fn": 0}
    unjudged = rows[col] == str(State.NOT_JUDGED)
    mine = rows[~unjudged]
    pos = mine["expected"] == klass
    off = f"{klass}_off_target"
    if off in mine:
        pos = pos | (mine[off].astype(str) == str(OffTargetState.SECOND_CAUSE))
    hit = mine[col] == str(State.FIRED)
    return {
        "reports": len(mine),
        "not_judged": int(unjudged.sum()),
        "tp": int((pos & hit).sum()),
        "fp": int((~pos & hit).sum()),
        "fn": int((pos & ~hit).sum()),
    }
