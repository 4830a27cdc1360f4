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
from harness.report.fmt import num, pct, x
from harness.report.load import RunFolder, class_state, truthy

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


def _outcome(row: Mapping[str, Any], expected: str) -> tuple[str, list[str]]:
    """(MATCH / MISMATCH / NOT_JUDGED, fired classes) of one diagnosis row.

    A table with a ``match`` column carries the harness's own judgement (empty: it cannot say);
    an older one is judged here: the fired classes are exactly the expected one (none on a fix),
    not judged where the expected class, or every class, was not judged.
    """
    states = {k: class_state(row, k) for k in CLASSES}
    fired = [k for k, s in states.items() if s is State.FIRED]
    if "match" in row:
        m = row.get("match")
        if m is None or (not isinstance(m, str) and pd.isna(m)) or m == "":
            return NOT_JUDGED, fired
        return (MATCH if truthy(m) else MISMATCH), fired
    judged = [k for k, s in states.items() if s not in (None, State.NOT_JUDGED)]
    if (expected != "none" and states.get(expected) is State.NOT_JUDGED) or not (judged or fired):
        return NOT_JUDGED, fired
    return (MATCH if set(fired) == {expected} - {"none"} else MISMATCH), fired


def expectation_table(run: RunFolder) -> pd.DataFrame:
    """One row per diagnosed variant: scenario, variant, kind, expected, role, because,
    observed (';'-joined fired classes), outcome (match / mismatch / notjudged), and each
    class's state (``<class>``: fired / clear / not_judged, "" where the column is absent)."""
    diag = run.tables.get("diagnosis.csv")
    cols = ["scenario", "variant", "kind", "expected", "role", "because", "observed", "outcome"]
    if diag is None or diag.empty:
        return pd.DataFrame(columns=cols + list(CLASSES))
    rows = []
    for r in diag.to_dict("records"):
        exp, role, because = _expected(r)
        outcome, fired = _outcome(r, exp)
        obs = r.get("observed")
        states = {k: class_state(r, k) for k in CLASSES}
        rows.append({
            "scenario": str(r.get("scenario")), "variant": str(r.get("variant")),
            "kind": str(r.get("kind", "")), "expected": exp, "role": role, "because": because,
            "observed": obs if isinstance(obs, str) else ";".join(fired), "outcome": outcome,
            **{k: (str(s) if s is not None else "") for k, s in states.items()},
        })  # fmt: skip
    return pd.DataFrame(rows, columns=cols + list(CLASSES))


def _class_cell(r: Mapping[str, Any], k: str, exp: str, role: str) -> Any:
    if f"{k}_state" not in r and f"{k}_fired" not in r:
        return "–"
    state = class_state(r, k)
    reason = str(r.get(f"{k}_reason", "") or "")
    if state is State.FIRED:
        impact = num(r.get(f"{k}_impact"))
        txt = f"fired {impact:.0%}" if math.isfinite(impact) else "fired"
        return Badge(txt, "fired-good" if k == exp else "fired-bad", reason)
    if state is State.NOT_JUDGED:
        if f"{k}_state" not in r:
            reason = (
                "this diagnosis.csv predates <class>_state: a detector that did not fire may "
                f"have been clear or unable to judge. {reason}"
            )
        return Tip("not judged", reason)
    return Tip("no", reason) if reason else "no"


def _expectation_cells(e: Mapping[str, Any]) -> list[Any]:
    role = e["role"]
    tip = e["because"] or ""
    expected = f"{e['expected']} ({role})" if role else e["expected"]
    word = {MATCH: "match", MISMATCH: "mismatch", NOT_JUDGED: "not judged"}[e["outcome"]]
    kind = e["outcome"] + (" partial" if role == "partial" else "")
    observed = e["observed"] or "none"
    return [Tip(expected, tip) if tip else expected, Cell(observed, kind, tip), Cell(word, kind)]


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
        cells = [_class_cell(r, k, e["expected"], e["role"]) for k in CLASSES]
        rows.append([r.get("scenario"), r.get("variant"), r.get("kind"),
                     *_expectation_cells(e), primary, *cells])  # fmt: skip
    doc.image(
        "diagnosis_matrix",
        expectation_figure(exp),
        "expected against observed detector outcome per variant",
        "One row per profiled variant, a column per detector. Green: the detector did what the "
        "suite expects on that variant (fired on the class it injects, stayed clear elsewhere); "
        "red: it did not (missed or false alarm); grey: it could not judge. Hatched: a partial "
        "fix, expected to leave part of its baseline's bottleneck. Right column: the variant's "
        "overall match.",
        width_px=0,
    )
    header = ["scenario", "variant", "kind", "expected", "observed", "match", "primary", *CLASSES]
    doc.table(header, rows)
    doc.p(
        "expected / observed: the class the suite expects the detectors to find on the variant "
        "(none on a clean fix; a partial fix may still show it) against the classes that fired; "
        "green match, red mismatch, grey not judged. Per detector: 'fired N%' gives the impact "
        "(share of step time the bottleneck explains), green where it is the expected class, "
        "red elsewhere; 'not judged': the export lacks what the detector needs (CPU capture). "
        "Hover for the reasons.",
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
                         "removed": removed, "speedup": num(r.get("speedup"))})  # fmt: skip
    return pd.DataFrame(rows, columns=cols)


def _chain(g: pd.DataFrame) -> str:
    """``data_load_share 95% → 62% (async_dataloader) → 13% (dali)``."""
    metric = str(g["metric"].iloc[0])
    steps = [
        (pct(r.value, metric) if math.isfinite(r.value) else "not measured")
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
        removed = (
            "baseline"
            if r.kind == "baseline"
            else (f"{r.removed:.0%}" if math.isfinite(r.removed) else "–")
        )
        rows.append([r.scenario, r.klass, r.metric or "–", r.variant, r.kind,
                     pct(r.value, r.metric), removed,
                     "1 (reference)" if r.kind == "baseline" else x(r.speedup)])  # fmt: skip
    doc.table(
        ["scenario", "class", "main metric", "variant", "kind", "value", "removed of baseline's", "speedup"],
        rows,
        numeric={5, 6, 7},
    )  # fmt: skip
    doc.p(
        "The main metric of the scenario's detector on each variant's export (findings.csv), and "
        "the share of the baseline's value the variant removed (1 - variant / baseline). A fix "
        "that removes most of the metric but gains little speed moved the bottleneck elsewhere.",
        cls="sub",
    )
