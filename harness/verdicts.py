"""Ground truth: every variant's export diagnosed, a verdict per scenario, a confusion matrix.

Each variant declares what the detectors should find on it (``Variant.expectation``): the
baseline its scenario's class (``bottleneck``), a fix or ``ideal`` nothing (``clean``), and a fix
that does not remove the whole bottleneck on some machines its class as ``partial``, decided by
a rule over measurements of the same run (``scenarios.Rule``: e.g. async_dataloader stays
data-stalled when its workers alone deliver under 70% of what ``ideal`` consumes). A *partial*
expectation is met when the scenario's class fires on the variant (it counts as a positive for
that class in the confusion matrix and the detector scores); when its rule does not hold the
variant is expected ``clean``; when the rule lacks a measurement the role is ``undecided`` and
the variant is not judged. ``clean`` is met when no class fires (and the scenario's own class
could be judged); ``bottleneck`` when the class fires.

Written at the end of ``harness run``: ``diagnosis.csv`` (one row per variant, see
:data:`DIAGNOSIS_COLUMNS`), ``findings.csv``/``.parquet`` (long: one row per variant, class and
metric, :data:`FINDINGS_COLUMNS`), ``verdicts.csv`` and ``confusion.csv``; ``diagnose_run`` also
cross-checks against nsys's own expert rules (``nsys analyze``) on the same exports and writes
``expert_rules.csv`` and ``crosscheck.csv`` (see :func:`write_crosscheck`).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from analysis import expert_rules as E
from analysis.detect import diagnose, load_thresholds
from analysis.findings import CLASSES, Finding, State
from analysis.gpu_work import gpu_work
from analysis.trace import TraceError, open_trace
from harness import nsys as nsys_mod
from harness import runfolder as rf
from harness.atomic import write_frame
from scenarios import Rule, Scenario

#: verdict_min_ci_low: the best fix's speedup CI lower bound a confirmed scenario needs.
MIN_CI_LOW = 1.1

#: main_metric: the metric that measures each class (quoted in verdict reasons).
MAIN_METRIC: dict[str, str] = {
    "data_stall": "data_load_share",
    "pageable_copy": "pageable_h2d_share",
    "launch_bound": "launch_gap_share",
    "host_sync": "sync_exposed_share",
    "exposed_comm": "nccl_exposed_share",
}

#: diagnosis.csv's columns, in order (then ``error``, empty unless the export was unreadable).
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
    "metric",
    "value",
    "unit",
)

UNREADABLE = "unreadable"
UNDECIDED = "undecided"


def _exports(run_dir: Path, runs: pd.DataFrame) -> list[tuple[Any, Path]]:
    """(runs row, .sqlite) of every profiled variant that has an export."""
    out = []
    for r in runs.itertuples():
        if not r.profiled:
            continue
        db = rf.profile_file(run_dir, r.scenario, r.variant, rf.SQLITE_SUFFIX)
        if db is not None:
            out.append((r, db))
    return out


# -- measurements the expectation rules read ----------------------------------------------------


def result_metrics(run_dir: Path, scenario: str, variant: str) -> dict[str, float]:
    """A variant's ``metrics()`` from its result.json files: the mean over its timing
    processes, then, for names they lack, the profiled process's value."""
    timed: list[dict[str, Any]] = []
    profiled: dict[str, Any] = {}
    for folder in rf.phase_dirs(run_dir, scenario, variant):
        try:
            res = rf.read_result(folder)
        except rf.CorruptFileError:
            continue
        if not res:
            continue
        if rf.is_timing(folder.name) and rf.unit_status(folder) is rf.Status.OK:
            timed.append(res.get("metrics") or {})
        elif rf.is_profile(folder.name):
            profiled = res.get("metrics") or {}
    out: dict[str, float] = {}
    for name in {k for m in timed for k in m}:
        vals = [float(m[name]) for m in timed if name in m]
        out[name] = sum(vals) / len(vals)
    for name, value in profiled.items():
        out.setdefault(name, float(value))
    return out


Measures = dict[tuple[str, str], dict[str, float]]


def _numeric(row: Mapping[str, Any]) -> dict[str, float]:
    out = {}
    for k, v in row.items():
        if isinstance(v, bool):
            continue
        try:
            f = float(v)
        except (TypeError, ValueError):
            continue
        if not math.isnan(f):
            out[str(k)] = f
    return out


def measurements(run_dir: Path, runs: pd.DataFrame, work: pd.DataFrame | None) -> Measures:
    """Per (scenario, variant): result metrics first, then gpu_work columns, then runs.csv
    columns (first name wins)."""
    by_work: dict[tuple[str, str], dict[str, float]] = {}
    if work is not None and not work.empty:
        for row in work.to_dict("records"):
            by_work[(row["scenario"], row["variant"])] = _numeric(row)
    out: Measures = {}
    for row in runs.to_dict("records"):
        key = (row["scenario"], row["variant"])
        merged = _numeric(row)
        merged.update(by_work.get(key, {}))
        merged.update(result_metrics(run_dir, *key))
        out[key] = merged
    return out


@dataclass(frozen=True)
class Expected:
    """A variant's expectation, resolved on one run."""

    klass: str
    """The class expected to fire, or ``none``."""
    role: str
    """clean / bottleneck / partial, or undecided (a rule lacked a measurement)."""
    because: str


def _rule_value(name: str, variant: str, meas: Measures, scenario: str) -> float | None:
    target, _, metric = name.partition(".") if "." in name else ("self", "", name)
    source = variant if target == "self" else target
    value = meas.get((scenario, source), {}).get(metric)
    return None if value is None or math.isnan(value) else value


def evaluate_rule(
    rule: Rule, scenario: str, variant: str, meas: Measures
) -> tuple[bool | None, str]:
    """Whether ``rule`` holds for the variant on this run (None: a measurement is missing),
    and the sentence saying so with the numbers."""
    value = _rule_value(rule.metric, variant, meas, scenario)
    bound = (
        float(rule.than)
        if not isinstance(rule.than, str)
        else _rule_value(rule.than, variant, meas, scenario)
    )
    scale = "" if rule.than_scale == 1 else f"{rule.than_scale:.3g} x "
    if value is None or bound is None:
        missing = rule.metric if value is None else str(rule.than)
        return None, f"rule {rule.metric} {rule.op} {scale}{rule.than} undecided: no {missing}"
    limit = bound * rule.than_scale
    holds = value < limit if rule.op == "<" else value > limit
    text = (
        f"{rule.metric} {value:.4g} {rule.op if holds else _negate(rule.op)} "
        f"{scale}{rule.than} ({limit:.4g})"
    )
    return holds, text + (f": {rule.because}" if holds else "")


def _negate(op: str) -> str:
    return ">=" if op == "<" else "<="


def resolve_expectation(scen: Scenario, variant: str, meas: Measures) -> Expected:
    """The variant's expected class and role on this run."""
    exp = scen.variant(variant).expectation
    if exp.role == "clean":
        return Expected("none", "clean", exp.because)
    if exp.role == "bottleneck" or exp.rule is None:
        return Expected(scen.bottleneck, exp.role, exp.because)
    holds, text = evaluate_rule(exp.rule, scen.name, variant, meas)
    if holds is None:
        return Expected(scen.bottleneck, UNDECIDED, text)
    if holds:
        return Expected(scen.bottleneck, "partial", text)
    return Expected("none", "clean", f"{text}: the fix should remove {scen.bottleneck}")


# -- diagnosis ------------------------------------------------------------------------------------


def judge(expected: Expected, findings: Mapping[str, Finding], own: str) -> bool | None:
    """Whether the findings meet the expectation; None when they cannot say.

    bottleneck / partial: the expected class fired (None if it was not judged). clean: no class
    fired, and the scenario's own class ``own`` was judged (None otherwise).
    """
    if expected.role == UNDECIDED:
        return None
    if expected.role in ("bottleneck", "partial"):
        f = findings[expected.klass]
        return None if f.state is State.NOT_JUDGED else f.fired
    if any(f.fired for f in findings.values()):
        return False
    return None if findings[own].state is State.NOT_JUDGED else True


def _diagnosis_row(
    r: Any, scen: Scenario, expected: Expected, findings: Mapping[str, Finding] | None, error: str
) -> dict[str, Any]:
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


def finding_rows(r: Any, findings: Mapping[str, Finding]) -> list[dict[str, Any]]:
    """findings.csv rows of one variant: one per class and metric (one with an empty metric
    for a finding without metrics)."""
    out = []
    for k in CLASSES:
        f = findings[k]
        base = {"scenario": r.scenario, "variant": r.variant, "kind": r.kind, "class": k,
                "state": str(f.state), "impact": f.impact}  # fmt: skip
        rows = f.metric_rows() or [("", float("nan"), "")]
        out += [{**base, "metric": m, "value": v, "unit": u} for m, v, u in rows]
    return out


def diagnose_exports(
    run_dir: Path,
    found: dict[str, Scenario],
    runs: pd.DataFrame,
    *,
    thresholds: Mapping[str, Any] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(diagnosis, findings) of every profiled export; see :data:`DIAGNOSIS_COLUMNS` and
    :data:`FINDINGS_COLUMNS`. Rule measurements come from the run's result files, runs table
    and each export's GPU work."""
    diagnosed: list[tuple[Any, dict[str, Finding] | None, str]] = []
    work_rows: list[dict[str, Any]] = []
    for r, db in _exports(run_dir, runs):
        try:
            with open_trace(db) as trace:
                findings = {f.klass: f for f in diagnose(trace, thresholds)}
                try:
                    work = gpu_work(trace).iloc[0].to_dict()
                    work_rows.append({"scenario": r.scenario, "variant": r.variant, **work})
                except TraceError:
                    pass  # no kernels (a CPU capture): rules that need them stay undecided
        except TraceError as exc:
            diagnosed.append((r, None, str(exc)))
            continue
        diagnosed.append((r, findings, ""))
    meas = measurements(run_dir, runs, pd.DataFrame(work_rows))
    rows, long = [], []
    for r, findings, error in diagnosed:
        scen = found[r.scenario]
        expected = resolve_expectation(scen, r.variant, meas)
        rows.append(_diagnosis_row(r, scen, expected, findings, error))
        if findings is not None:
            long += finding_rows(r, findings)
    diag = pd.DataFrame(rows).reindex(columns=list(DIAGNOSIS_COLUMNS))
    diag["match"] = diag["match"].astype("boolean")
    return diag, pd.DataFrame(long).reindex(columns=list(FINDINGS_COLUMNS))


def write_findings(run_dir: Path, findings: pd.DataFrame) -> None:
    """findings.csv, and findings.parquet when pyarrow is installed."""
    write_frame(rf.table_path(run_dir, "findings"), findings)
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return
    write_frame(rf.table_path(run_dir, "findings", ".parquet"), findings)


def diagnose_run(
    run_dir: Path,
    found: dict[str, Scenario],
    runs: pd.DataFrame,
    *,
    crosscheck: bool = True,
    thresholds: Mapping[str, Any] | None = None,
) -> pd.DataFrame:
    """diagnosis.csv's table (returned) and findings.csv (written into ``run_dir``).

    With ``crosscheck`` (the default, and unless ``expert_rules.enabled`` is false in
    conf/diagnosis), the same exports also go through nsys's expert rules:
    :func:`write_crosscheck` writes ``expert_rules.csv`` and ``crosscheck.csv`` into
    ``run_dir`` (or records why it could not).
    """
    diag, findings = diagnose_exports(run_dir, found, runs, thresholds=thresholds)
    write_findings(run_dir, findings)
    rules = (thresholds or load_thresholds()).get("expert_rules", {})
    if crosscheck and bool(rules.get("enabled", True)):
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


# -- verdicts -------------------------------------------------------------------------------------


def _describe(row: Any, main_metric: Mapping[str, str], findings: pd.DataFrame | None) -> str:
    """'async_dataloader: expected none (clean), observed data_stall (data_load_share 0.62)'."""
    observed = row.observed if isinstance(row.observed, str) and row.observed else "nothing"
    text = f"{row.variant}: expected {row.expected} ({row.expected_role}), observed {observed}"
    klass = row.expected if row.expected in main_metric else None
    klass = klass or (observed.split(";")[0] if observed != "nothing" else None)
    if klass and findings is not None and not findings.empty:
        metric = main_metric.get(klass, "")
        hit = findings[
            (findings["scenario"] == row.scenario)
            & (findings["variant"] == row.variant)
            & (findings["class"] == klass)
            & (findings["metric"] == metric)
        ]
        if not hit.empty:
            text += f" ({metric} {float(hit['value'].iloc[0]):.3g})"
    return text


def _not_judged_why(row: Any) -> str:
    if row.primary == UNREADABLE:
        return f"{row.variant}: export unreadable"
    if row.expected_role == UNDECIDED:
        return f"{row.variant}: {row.expected_because}"
    klass = row.expected if row.expected != "none" else None
    reason = getattr(row, f"{klass}_reason", "") if klass else ""
    return f"{row.variant}: {klass or 'its class'} not judged" + (f" ({reason})" if reason else "")


def _verdict(
    d: pd.DataFrame,
    best_low: float,
    min_ci_low: float,
    main_metric: Mapping[str, str],
    findings: pd.DataFrame | None,
) -> tuple[str, str]:
    base = d[d["kind"] == "baseline"] if not d.empty else d
    if base.empty or (base["primary"] == UNREADABLE).all():
        return "inconclusive", "the baseline has no readable export"
    rows = list(d.itertuples())
    unjudged = [r for r in rows if pd.isna(r.match)]
    wrong = [r for r in rows if not pd.isna(r.match) and not bool(r.match)]
    if wrong:
        return "refuted", "; ".join(_describe(r, main_metric, findings) for r in wrong)
    if unjudged:
        return "inconclusive", "not judged: " + "; ".join(_not_judged_why(r) for r in unjudged)
    if not best_low >= min_ci_low:
        return "inconclusive", f"best fix's speedup CI lower bound {best_low:.3g} < {min_ci_low}"
    partial = [r.variant for r in rows if r.expected_role == "partial"]
    note = f" ({', '.join(partial)} partial: the class still fires, as expected)" if partial else ""
    return "confirmed", f"every variant as expected{note}; best fix CI low {best_low:.3g}x"


def verdicts(
    diag: pd.DataFrame,
    runs: pd.DataFrame,
    found: dict[str, Scenario],
    *,
    min_ci_low: float | None = None,
    main_metric: Mapping[str, str] | None = None,
    findings: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Per scenario: ``confirmed`` (every profiled variant met its expectation and the best
    fix's speedup CI lower bound is >= ``min_ci_low``), ``refuted`` (a variant contradicts its
    expectation) or ``inconclusive`` (something could not be judged, or the CI is too low);
    with the reason and the off-target findings (fired classes other than the expected one)."""
    min_ci_low = MIN_CI_LOW if min_ci_low is None else float(min_ci_low)
    main_metric = {**MAIN_METRIC, **(main_metric or {})}
    out = []
    for name in runs["scenario"].unique():
        scen = found[name]
        d = diag[diag["scenario"] == name] if not diag.empty else diag
        r = runs[runs["scenario"] == name]
        fixes = r[r["kind"] == "fix"]
        best_low = fixes["speedup_ci_low"].max() if not fixes.empty else float("nan")
        verdict, why = _verdict(d, float(best_low), min_ci_low, main_metric, findings)
        off = []
        for row in d.itertuples() if not d.empty else []:
            fired = [k for k in str(row.observed or "").split(";") if k]
            off += [f"{row.variant}:{k}" for k in fired if k != row.expected]
        out.append(
            {
                "scenario": name,
                "bottleneck": scen.bottleneck,
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


def scored(diag: pd.DataFrame) -> pd.DataFrame:
    """The rows the scores count: readable exports whose expectation was decided."""
    if diag.empty:
        return diag
    return diag[(diag["primary"] != UNREADABLE) & (diag["expected_role"] != UNDECIDED)]


def confusion(diag: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Confusion matrix (expected x primary; a partial fix counts for its class) and
    precision / recall / F1 per class."""
    labels = [*CLASSES, "none"]
    rows = scored(diag)
    if rows.empty:
        matrix = pd.DataFrame(0, index=labels, columns=labels)
    else:
        matrix = pd.crosstab(rows["expected"], rows["primary"]).reindex(
            index=labels, columns=labels, fill_value=0
        )
    matrix.index.name = "expected"
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

    Columns: scenario, variant, kind, expected, rule (as this nsys names it), rule_2024 (the
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
            "expected": truth[(r.scenario, r.variant)].expected,
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
    cols = ["scenario", "variant", "kind", "expected", "rule", "rule_2024", "class", "status"]
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
    readable = scored(diag)
    decided = (
        set(zip(readable["scenario"], readable["variant"], strict=True))
        if not readable.empty
        else set()
    )
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
            pos = readable["expected"] == k
            hit = readable[f"{k}_state"] == str(State.FIRED)
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
        for key, g in mine.groupby(["scenario", "variant"], sort=False):
            if key not in decided:
                continue  # undecided expectation or unreadable export: not scored
            judged = g[g["fired"].notna()]
            if judged.empty:
                na += 1
                continue
            n += 1
            hit = bool(judged["fired"].astype(bool).any())
            pos = g["expected"].iloc[0] == k
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
