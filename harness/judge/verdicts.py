"""The verdict per scenario, from its judged variants (:class:`harness.judge.diagnosis_table.Judged`).

``confirmed``: every variant whose truth is decided met it, nothing fired beyond the measured
gap, and the best fix's speedup CI lower bound reaches ``verdict_min_ci_low``; ``refuted``: a
variant contradicts its measured truth (its class missed or fired against it, or another class
fired beyond the gap); ``inconclusive``: something could not be judged (an unreadable export, a
class the export cannot judge, no measured removal, a baseline whose injection did not take),
or the CI is too low. ``either`` (the measured saving straddles the bar) and ``oversubscribed``
(the gap is the loop's extra wait for a core: :func:`harness.judge.truth.oversubscribed`) are
shown and counted, with their numbers, and never refute. Every reason prints the measured saving next to the predicted one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from harness.judge.diagnosis_table import Judged
from harness.judge.truth import OffTargetState, TruthState, predicted_text
from scenarios import Scenario

__all__ = ["MIN_CI_LOW", "VERDICT_COLUMNS", "describe", "verdicts"]

#: Truth states shown and counted apart: not judged, never what makes a verdict inconclusive.
SHOWN = (TruthState.EITHER, TruthState.OVERSUBSCRIBED)

#: verdict_min_ci_low: the best fix's speedup CI lower bound a confirmed scenario needs.
MIN_CI_LOW = 1.1

#: verdicts.csv's columns: the verdict, its reason, then how many variants had each truth
#: state, how many of the decided ones were right or wrong, and the off-target findings.
VERDICT_COLUMNS: tuple[str, ...] = (
    "scenario",
    "bottleneck",
    "verdict",
    "reason",
    *(f"truth_{s.value}" for s in TruthState),
    "judged_right",
    "judged_wrong",
    "second_causes",
    "false_positives",
    "off_target",
)


def describe(j: Judged) -> str:
    """'dali: data_stall measured 17% [15-19%] >= bar 15% (fires), predicted 17% [16-18%]
    (fired)', then each off-target class with its predicted saving against the gap."""
    t = j.truth
    text = f"{j.variant}: {t.measured()}"
    own = (j.evidence.findings or {}).get(t.klass)
    if own is not None:
        text += f", {predicted_text(own)} ({own.state})"
    if t.declared_agrees is False:
        text += f" (declared {t.declared}: judged by the measurement)"
    for o in j.off:
        if o.state is not OffTargetState.SECOND_CAUSE:
            text += f"; {o.describe()}"
    return text


def _not_judged_why(j: Judged) -> str:
    """Why the variant's own class was not judged (without the variant's name)."""
    if not j.evidence.readable:
        return "export unreadable"
    t = j.truth
    if t.state in (TruthState.NOT_TAKEN, TruthState.NO_REMOVAL):
        return t.because
    f = (j.evidence.findings or {}).get(t.klass)
    reason = f.reason if f is not None else ""
    return f"{t.klass} not judged" + (f" ({reason})" if reason else "")


def _grouped(judged: Sequence[Judged]) -> str:
    """'baseline, ideal: WHY; fix: OTHER': variants that share a reason say it once (a CPU
    capture's missing kernel table is the same sentence for every variant)."""
    by_why: dict[str, list[str]] = {}
    for j in judged:
        by_why.setdefault(_not_judged_why(j), []).append(j.variant)
    return "; ".join(f"{', '.join(names)}: {why}" for why, names in by_why.items())


def _verdict(judged: Sequence[Judged], best_low: float, min_ci_low: float) -> tuple[str, str]:
    base = [j for j in judged if j.evidence.kind == "baseline"]
    if not base or not any(j.evidence.readable for j in base):
        return "inconclusive", "the baseline has no readable export"
    wrong = [j for j in judged if j.match is False]
    if wrong:
        return "refuted", "; ".join(describe(j) for j in wrong)
    unjudged = [j for j in judged if j.match is None and j.truth.state not in SHOWN]
    if unjudged:
        return "inconclusive", "not judged: " + _grouped(unjudged)
    if not best_low >= min_ci_low:
        return "inconclusive", f"best fix's speedup CI lower bound {best_low:.3g} < {min_ci_low}"
    said = [describe(j) for j in judged if j.truth.state in (TruthState.FIRES, *SHOWN)]
    apart = [f"{j.variant} {j.truth.state}" for j in judged if j.truth.state in SHOWN]
    note = f" ({', '.join(apart)}: not judged)" if apart else ""
    text = f"every variant as measured{note}; best fix CI low {best_low:.3g}x"
    return "confirmed", "; ".join([text, *said])


def _skipped_baseline(runs: pd.DataFrame) -> str:
    """``skipped: <why>`` when the scenario's baseline did not run here (e.g. it needs 2 GPUs),
    the reason a verdict gives instead of "no readable export"; "" otherwise."""
    if "kind" not in runs or "status" not in runs:
        return ""
    base = runs[runs["kind"] == "baseline"]
    if base.empty or str(base["status"].iloc[0]) != "skipped":
        return ""
    error = base["error"].iloc[0] if "error" in base else ""
    return f"skipped: {error}" if isinstance(error, str) and error else "skipped"


def _counts(judged: Sequence[Judged]) -> dict[str, int | str]:
    out: dict[str, int | str] = {
        f"truth_{s.value}": sum(j.truth.state is s for j in judged if j.evidence.readable)
        for s in TruthState
    }
    out["judged_right"] = sum(j.match is True for j in judged)
    out["judged_wrong"] = sum(j.match is False for j in judged)
    out["second_causes"] = sum(len(j.off_in(OffTargetState.SECOND_CAUSE)) for j in judged)
    out["false_positives"] = sum(len(j.off_in(OffTargetState.FALSE_POSITIVE)) for j in judged)
    out["off_target"] = "; ".join(f"{j.variant}:{o.klass}" for j in judged for o in j.off)
    return out


def verdicts(
    judged: Sequence[Judged],
    runs: pd.DataFrame,
    found: Mapping[str, Scenario],
    *,
    min_ci_low: float | None = None,
) -> pd.DataFrame:
    """verdicts.csv (:data:`VERDICT_COLUMNS`): per scenario of ``runs``, its verdict (see the
    module's docstring) with the reason and the counts."""
    min_ci_low = MIN_CI_LOW if min_ci_low is None else float(min_ci_low)
    out = []
    for name in runs["scenario"].unique():
        mine = [j for j in judged if j.scenario == name]
        r = runs[runs["scenario"] == name]
        fixes = r[r["kind"] == "fix"]
        low = fixes["speedup_ci_low"].max() if not fixes.empty and "speedup_ci_low" in r else None
        verdict, why = _verdict(mine, float("nan") if low is None else float(low), min_ci_low)
        skipped = _skipped_baseline(r)
        if skipped and not any(j.evidence.kind == "baseline" for j in mine):
            why = skipped  # inconclusive, and why: the baseline never ran here
        row = {"scenario": name, "bottleneck": found[name].bottleneck, "verdict": verdict,
               "reason": why, **_counts(mine)}  # fmt: skip
        out.append(row)
    return pd.DataFrame(out, columns=list(VERDICT_COLUMNS))
