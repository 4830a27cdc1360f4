"""The detector sections of a run report: what each detector concluded on each variant against
what the suite expected there, and how much of the baseline's bottleneck metric each fix removed.

Both read the run folder's tables only: ``diagnosis.csv`` (``<class>_state``, ``expected``,
``expected_role``, ``observed``, ``match``) and ``findings.csv`` (one row per scenario x variant
x class x metric). A folder made before those columns existed falls back to ``injected`` and
``<class>_fired`` and says so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from analysis.findings import CLASSES, State
from bottlenecks import SPECS
from harness.core.config import MAIN_METRIC
from harness.core.runfolder import Status
from harness.report.doc import Badge, Cell, Doc, Tip
from harness.report.fmt import metric_value, num, share, speedup_of
from harness.report.load import (
    CLEAR,
    FALSE_POSITIVE,
    FIRES,
    UNCHECKED,
    RunFolder,
    class_state,
    truthy,
)

__all__ = [
    "MAIN_METRIC",
    "class_legend",
    "detectors_section",
    "expectation_table",
    "fix_effect_section",
    "fix_effect_table",
]


def main_metrics(run: RunFolder, given: Mapping[str, str] | None = None) -> dict[str, str]:
    """Class -> the findings.csv metric its fixes are judged on: ``given``, else the run's own
    ``diagnosis.main_metric`` (manifest.json's config), else the config's defaults."""
    if given is not None:
        return dict(given)
    conf = ((run.manifest or {}).get("config") or {}).get("diagnosis") or {}
    mine = conf.get("main_metric") if isinstance(conf, dict) else None
    return {**MAIN_METRIC, **(mine if isinstance(mine, dict) else {})}


#: What a score cell shows where the score is undefined.
NA = "n/a"

#: Cell colour kinds (doc.Cell / the PNG figure).
MATCH, MISMATCH, NOT_JUDGED = "match", "mismatch", "notjudged"

#: What the match column and the grid's overall column say, per colour kind.
OUTCOME_WORDS = {MATCH: "match", MISMATCH: "mismatch", NOT_JUDGED: "not judged"}

#: The decided truth states: the scenario's own detector is judged against these only (the
#: judge's ``judge_own``); the others are shown apart.
DECIDED = (FIRES, CLEAR)


def _expected(row: Mapping[str, Any]) -> tuple[str, str, str]:
    """(expected class or "none", role, because) of a diagnosis row, old tables included."""
    exp = row.get("expected")
    if isinstance(exp, str) and exp:
        role = row.get("expected_role")
        because = row.get("expected_because")
        return (
            exp,
            role if isinstance(role, str) else "",
            because if isinstance(because, str) else "",
        )
    injected = str(row.get("injected", "none") or "none")
    role = "bottleneck" if injected != "none" else "clean"
    return injected, role, "diagnosis.csv has no expected column: the injected class is used"


def _truth(row: Mapping[str, Any]) -> str:
    """diagnosis.csv's measured truth of the variant (``fires``, ``either``, ...), "" before
    the truth was measured."""
    t = row.get("truth_state")
    return t if isinstance(t, str) else ""


def own_class(row: Mapping[str, Any]) -> str:
    """The scenario's class: what the truth is about (``predicted_class``, else ``expected``)."""
    for col in ("predicted_class", "expected", "injected"):
        v = row.get(col)
        if isinstance(v, str) and v and v != "none":
            return v
    return ""


def truth_text(row: Mapping[str, Any]) -> str:
    """What the variant should show, as the report writes it everywhere: the scenario's class
    and its measured truth (``data_stall either``), the declared role beside it where the
    measurement says otherwise; a table made before the truth: ``expected (role)``."""
    truth = _truth(row)
    if not truth:
        exp, role, _ = _expected(row)
        return f"{exp} ({role})" if role else exp
    text = f"{own_class(row) or 'none'} {truth}"
    declared = row.get("expected_role")
    if truth_agrees(row) is False and isinstance(declared, str) and declared:
        text += f" (declared {declared})"
    return text


def truth_agrees(row: Mapping[str, Any]) -> bool | None:
    """diagnosis.csv's ``declared_agrees``: None where the truth is undecided."""
    v = row.get("declared_agrees")
    if v is None or (not isinstance(v, str) and pd.isna(v)) or v == "":
        return None
    return truthy(v)


def _judged(outcome: Any) -> str:
    """diagnosis.csv's ``match`` (the judge's verdict on the variant) as a colour kind."""
    if outcome is None or (not isinstance(outcome, str) and pd.isna(outcome)) or outcome == "":
        return NOT_JUDGED
    return MATCH if truthy(outcome) else MISMATCH


def class_outcome(row: Mapping[str, Any], klass: str) -> str:
    """MATCH / MISMATCH / NOT_JUDGED of one detector on one variant, by the rules the judge's
    ``match`` follows, so that no cell contradicts the row: the scenario's own class against
    the measured truth (not judged where the truth is undecided: ``either``, ...), another
    class wrong only where it fired beyond the measured gap (``<class>_off_target``)."""
    state = class_state(row, klass)
    if state is None or state is State.NOT_JUDGED:
        return NOT_JUDGED
    fired = state is State.FIRED
    truth = _truth(row)
    if not truth:  # a table made before the truth: against the expected class
        exp = _expected(row)[0]
        return MATCH if fired == (klass == exp) else MISMATCH
    if klass == own_class(row):
        if truth not in DECIDED:
            return NOT_JUDGED
        return MATCH if fired == (truth == FIRES) else MISMATCH
    if not fired:
        return MATCH
    off = str(row.get(f"{klass}_off_target", "") or "")
    if off == FALSE_POSITIVE:
        return MISMATCH
    return NOT_JUDGED if off == UNCHECKED else MATCH


def _outcome(row: Mapping[str, Any], expected: str) -> tuple[str, list[str]]:
    """(MATCH / MISMATCH / NOT_JUDGED, fired classes) of one diagnosis row.

    A table with a ``match`` column carries the harness's own judgement (empty: it cannot say);
    an older one is judged here: the fired classes are exactly the expected one (none on a fix),
    not judged where the expected class, or every class, was not judged.
    """
    states = {k: class_state(row, k) for k in CLASSES}
    fired = [k for k, s in states.items() if s is State.FIRED]
    if "match" in row:
        return _judged(row.get("match")), fired
    judged = [k for k, s in states.items() if s not in (None, State.NOT_JUDGED)]
    if (expected != "none" and states.get(expected) is State.NOT_JUDGED) or not (judged or fired):
        return NOT_JUDGED, fired
    return (MATCH if set(fired) == {expected} - {"none"} else MISMATCH), fired


def expectation_table(run: RunFolder) -> pd.DataFrame:
    """One row per diagnosed variant: scenario, variant, kind, expected, role, because,
    truth (:func:`truth_text`), observed (';'-joined fired classes), outcome (match /
    mismatch / notjudged: the judge's ``match``), each class's state (``<class>``: fired /
    clear / not_judged, "" where the column is absent) and its outcome (``<class>:outcome``,
    :func:`class_outcome`)."""
    diag = run.tables.get("diagnosis.csv")
    cols = ["scenario", "variant", "kind", "expected", "role", "because", "truth", "observed",
            "outcome", *CLASSES, *(f"{k}:outcome" for k in CLASSES)]  # fmt: skip
    if diag is None or diag.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    for r in diag.to_dict("records"):
        exp, role, because = _expected(r)
        outcome, fired = _outcome(r, exp)
        obs = r.get("observed")
        states = {k: class_state(r, k) for k in CLASSES}
        rows.append({
            "scenario": str(r.get("scenario")), "variant": str(r.get("variant")),
            "kind": str(r.get("kind", "")), "expected": exp, "role": role, "because": because,
            "truth": truth_text(r), "outcome": outcome,
            "observed": obs if isinstance(obs, str) else ";".join(fired),
            **{k: (str(s) if s is not None else "") for k, s in states.items()},
            **{f"{k}:outcome": class_outcome(r, k) for k in CLASSES},
        })  # fmt: skip
    return pd.DataFrame(rows, columns=cols)


#: A class cell's colour kind in the table, by its outcome and whether it fired.
_FIRED_KIND = {MATCH: "fired-good", MISMATCH: "fired-bad", NOT_JUDGED: "notjudged"}


def _class_cell(r: Mapping[str, Any], k: str, outcome: str) -> Any:
    """One detector on one variant: the same word and colour as the grid's cell."""
    if f"{k}_state" not in r and f"{k}_fired" not in r:
        return "–"
    state = class_state(r, k)
    reason = str(r.get(f"{k}_reason", "") or "")
    if state is State.FIRED:
        impact = num(r.get(f"{k}_impact"))
        txt = f"fired {share(impact)}" if math.isfinite(impact) else "fired"
        return Badge(txt, _FIRED_KIND[outcome], reason)
    if state is State.NOT_JUDGED:
        if f"{k}_state" not in r:
            reason = (
                "this diagnosis.csv predates <class>_state: a detector that did not fire may "
                f"have been clear or unable to judge. {reason}"
            )
        return Cell(Tip("not judged", reason), NOT_JUDGED)
    word = "clear" if outcome != MISMATCH else "clear (missed)"
    return Cell(Tip(word, reason) if reason else word, outcome)


def _expectation_cells(e: Mapping[str, Any]) -> list[Any]:
    tip = e["because"] or ""
    word = OUTCOME_WORDS[e["outcome"]]
    kind = e["outcome"] + (" partial" if e["role"] == "partial" else "")
    observed = e["observed"] or "none"
    truth = Tip(e["truth"], tip) if tip else e["truth"]
    return [truth, Cell(observed, kind, tip), Cell(word, kind)]


def detectors_section(doc: Doc, run: RunFolder) -> None:
    """Per profiled variant: expected vs observed (coloured), each detector's state, the scores."""
    from analysis.plots.diagnosis import expectation_figure

    diag = run.tables.get("diagnosis.csv")
    if diag is None or diag.empty:
        doc.note(run.why_missing("diagnosis.csv"))
        return
    exp = expectation_table(run)
    rows = []
    for r, e in zip(diag.to_dict("records"), exp.to_dict("records"), strict=True):
        primary: Any = r.get("primary")
        if isinstance(r.get("error"), str) and r.get("error"):
            primary = Tip(str(primary), str(r["error"]))
        cells = [_class_cell(r, k, e[f"{k}:outcome"]) for k in CLASSES]
        rows.append([r.get("scenario"), r.get("variant"), r.get("kind"),
                     *_expectation_cells(e), primary, *cells])  # fmt: skip
    doc.image(
        "diagnosis_matrix",
        expectation_figure(exp),
        "expected against observed detector outcome per variant",
        "One row per profiled variant (in brackets: its measured truth, the scenario's class and "
        "its state), a column per detector. Green: the detector did what the measured truth "
        "asks (fired where removing the cause saved more than its bar, clear where it saved "
        "less, clear on the other classes or fired within the measured gap); red: it did not "
        "(missed or false alarm); grey: not judged (the export lacks what it needs, or the "
        "truth is undecided: either, oversubscribed, not_taken, no_removal). Hatched: a fix "
        "declared partial. Right column: the variant's overall match (diagnosis.csv's match).",
        width_px=0,
    )
    header = ["scenario", "variant", "kind", "truth", "observed", "match", "primary", *CLASSES]
    doc.table(header, rows)
    doc.p(
        "truth: the scenario's class and its measured state on the variant (fires: removing the "
        "cause saved at least the class's bar; clear: less; either: the interval straddles the "
        "bar; the declared role beside it where the measurement disagrees) against the classes "
        "that fired; match as diagnosis.csv says: green match, red mismatch, grey not judged. "
        "Per detector, coloured as in the picture above: 'fired N%' gives the impact (share of "
        "step time the bottleneck explains); 'clear (missed)': the truth says it should fire; "
        "'not judged': the export lacks what the detector needs (a CPU capture) or the truth "
        "is undecided. Hover for the reasons.",
        cls="sub",
    )
    class_legend(doc, main_metrics(run))
    if not any(f"{k}_state" in diag for k in CLASSES):
        doc.note(
            "this diagnosis.csv was written before detector states (<class>_state) and "
            "expectations (expected, match) were recorded: detectors that did not fire show as "
            "'not judged', and the match is derived from the injected class",
            kind="caveat",
        )
    scores = run.tables.get("detector_scores.csv")
    if scores is not None and not scores.empty:
        doc.h(3, "Detector scores")
        scores_table(doc, scores)


def class_legend(doc: Doc, main_metric: Mapping[str, str]) -> None:
    """What each class means, for a reader who meets the names in the tables, with the metric
    it is plotted and ranked on (``ClassSpec.means``; the run's ``diagnosis.main_metric``)."""
    doc.deflist(
        [
            (s.name, [f"{s.means} (main metric: {main_metric.get(s.name, s.main_metric)})"])
            for s in SPECS
        ]
    )


#: detector_scores.csv columns that hold a score (n/a where undefined).
_SCORES = ("precision", "recall", "f1")


def scores_table(doc: Doc, scores: pd.DataFrame) -> None:
    """detector_scores.csv as a table: a score that is undefined (no report of the class could
    be judged, or nothing was predicted) reads n/a, never a number."""
    cols = list(scores.columns)
    rows = []
    for r in scores.to_dict("records"):
        rows.append([NA if c in _SCORES and not math.isfinite(num(r[c])) else r[c] for c in cols])
    doc.table(cols, rows, numeric=range(1, len(cols)))
    doc.p(
        "Per class, over the variants the detectors could judge: a variant whose expected class "
        "could not be judged (a CPU capture has no CUDA tables) is left out and counted in "
        "not_judged, never as a miss; n/a: no variant gave the score a value.",
        cls="sub",
    )


# --- how much of the bottleneck each fix removed --------------------------------------------------


def fix_effect_table(
    run: RunFolder, classes: Mapping[str, str], main_metric: Mapping[str, str] = MAIN_METRIC
) -> pd.DataFrame:
    """One row per scenario x variant with an ok status: its class's main metric from
    findings.csv (``value``), the baseline's (``baseline``), and ``removed`` = 1 - value /
    baseline (NaN where either is unknown or the baseline's is 0)."""
    cols = [
        "scenario",
        "klass",
        "metric",
        "variant",
        "kind",
        "value",
        "baseline",
        "removed",
        "speedup",
        "speedup_text",
    ]
    runs = run.runs
    rows: list[dict[str, Any]] = []
    if runs is None or runs.empty:
        return pd.DataFrame(columns=cols)
    for scen, g in runs.groupby("scenario", sort=False):
        klass = classes.get(str(scen), "")
        metric = main_metric.get(klass, "")
        kinds = g["kind"].astype(str) if "kind" in g else pd.Series("fix", index=g.index)
        base_rows = g[kinds == "baseline"]
        base_name = str(base_rows["variant"].iloc[0]) if not base_rows.empty else "baseline"
        base = run.metric(str(scen), base_name, klass, metric) if metric else math.nan
        order = list(g[kinds == "baseline"].index) + list(g[kinds != "baseline"].index)
        for i in order:
            r = g.loc[i]
            if "status" in g and str(r["status"]) != Status.OK:
                continue
            v = str(r["variant"])
            val = run.metric(str(scen), v, klass, metric) if metric else math.nan
            removed = (
                1 - val / base
                if math.isfinite(val) and math.isfinite(base) and base > 0
                else math.nan
            )
            rows.append({"scenario": str(scen), "klass": klass, "metric": metric, "variant": v,
                         "kind": str(kinds.loc[i]), "value": val, "baseline": base,
                         "removed": removed, "speedup": num(r.get("speedup")),
                         "speedup_text": speedup_of(r)})  # fmt: skip
    return pd.DataFrame(rows, columns=cols)


def _chain(g: pd.DataFrame) -> str:
    """``data_load_share 95% → 62% (async_dataloader) → 13% (dali)``."""
    metric = str(g["metric"].iloc[0])
    steps = [
        (metric_value(r.value, metric) if math.isfinite(r.value) else "not measured")
        + ("" if r.kind == "baseline" else f" ({r.variant})")
        for r in g.itertuples()
    ]
    return f"{metric} " + " → ".join(steps)


def fix_effect_section(
    doc: Doc,
    run: RunFolder,
    classes: Mapping[str, str],
    main_metric: Mapping[str, str] = MAIN_METRIC,
) -> None:
    """Per fix: how much of the baseline's bottleneck metric it removed (from findings.csv)."""
    if run.runs is None or run.runs.empty:
        doc.note(run.why_missing("runs.csv"))
        return
    if run.tables.get("findings.csv") is None:
        doc.note(run.why_missing("findings.csv"))
        return
    t = fix_effect_table(run, classes, main_metric)
    known = t[t["value"].notna()]
    if known.empty:
        doc.note(
            "findings.csv holds none of the scenarios' main metrics ("
            + ", ".join(
                sorted({f"{k}: {m}" for k, m in zip(t["klass"], t["metric"], strict=True) if m})
            )
            + ") for a finished variant: their detectors could not measure them on these exports"
        )
        return
    for scen, g in t.groupby("scenario", sort=False):
        if g["value"].notna().any():
            doc.p(Badge(str(scen), ""), " ", _chain(g))
    rows = []
    for r in t.itertuples():
        removed = "baseline" if r.kind == "baseline" else share(r.removed)
        rows.append([r.scenario, r.klass, r.metric or "–", r.variant, r.kind,
                     metric_value(r.value, r.metric), removed,
                     "1 (reference)" if r.kind == "baseline" else r.speedup_text])  # fmt: skip
    doc.table(
        ["scenario", "class", "main metric", "variant", "kind", "value on its export", "removed of baseline's", "speedup [95% CI]"],
        rows,
        numeric={5, 6, 7},
    )  # fmt: skip
    doc.p(
        "The main metric of the scenario's detector on each variant's export (findings.csv), and "
        "the share of the baseline's value the variant removed (1 - variant / baseline). A fix "
        "that removes most of the metric but gains little speed moved the bottleneck elsewhere.",
        cls="sub",
    )
