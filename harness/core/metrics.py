"""Precision, recall and F1 from counts: the one definition every score table uses
(``detector_scores.csv``, ``score_classes.csv``, ``tools_scores.csv``, the expert-rules
cross-check).

The edge rule, once: precision is NaN where nothing was flagged (``tp + fp == 0``), recall is
NaN where the truth has no positive (``tp + fn == 0``); F1 is NaN where there is nothing to
score at all (``tp == fp == fn == 0``: no report could be judged, or none was positive nor
flagged), 0 where nothing was found right but something was missed or flagged wrongly
(``tp == 0``), else ``2PR / (P + R)``. A class nobody could judge scores n/a, never 0.
"""

from __future__ import annotations

__all__ = ["prf"]

NAN = float("nan")


def prf(tp: int, fp: int, fn: int) -> dict[str, float]:
    """``{"precision", "recall", "f1"}`` from true positives, false positives and false
    negatives (the module's edge rule)."""
    precision = tp / (tp + fp) if tp + fp else NAN
    recall = tp / (tp + fn) if tp + fn else NAN
    if tp:
        f1 = 2 * precision * recall / (precision + recall)
    else:
        f1 = 0.0 if fp or fn else NAN
    return {"precision": precision, "recall": recall, "f1": f1}
