"""Judging a run: every profiled variant's export diagnosed, and a verdict per scenario.

At the end of ``harness run`` (and in ``scripts/rediagnose.py``) the detectors read every
profiled export; each variant's findings are compared with what it should show
(:mod:`harness.judge.truth`) into ``diagnosis.csv`` and ``findings.csv`` (their columns:
:mod:`harness.judge.diagnosis_table`); the same exports also go through nsys's expert rules
(:mod:`harness.judge.crosscheck`); ``gpu_work.csv`` holds each export's GPU work per step. Each
scenario then gets its verdict (``verdicts.csv``): ``confirmed``, ``refuted`` or
``inconclusive``, with the reason. The scores (``confusion.csv``, ``detector_scores.csv``) are
:mod:`harness.judge.scoring`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.detect import diagnose, load_thresholds
from analysis.detect.config import MAIN_METRIC
from analysis.detect.predict import PROBE_KEYS, host_speed, trace_only
from analysis.findings import Finding
from analysis.gpu_work import add_side_bound, gpu_work
from analysis.trace import TraceError, open_trace
from harness.judge.crosscheck import write_crosscheck
from harness.judge.diagnosis_table import (
    UNREADABLE,
    diagnosis_frame,
    diagnosis_row,
    finding_rows,
    findings_frame,
    profiled_exports,
    write_findings,
)
from harness.judge.predictions import LIMIT, prediction_columns
from harness.judge.truth import UNDECIDED, measurements, resolve_expectation
from scenarios import Scenario

__all__ = ["MIN_CI_LOW", "diagnose_exports", "diagnose_run", "gpu_work_table", "verdicts"]

#: verdict_min_ci_low: the best fix's speedup CI lower bound a confirmed scenario needs.
MIN_CI_LOW = 1.1


# -- diagnosis ------------------------------------------------------------------------------------


def diagnose_exports(
    run_dir: Path,
    found: dict[str, Scenario],
    runs: pd.DataFrame,
    *,
    thresholds: Mapping[str, Any] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(diagnosis, findings) of every profiled export (their columns:
    :mod:`harness.judge.diagnosis_table`). Rule measurements come from the run's result files, runs
    table and each export's GPU work."""
    diagnosed: list[tuple[Any, dict[str, Finding] | None, str]] = []
    work_rows: list[dict[str, Any]] = []
    alone: dict[tuple[str, str], float | None] = {}
    cfg = load_thresholds(thresholds)
    for r, db in profiled_exports(run_dir, runs):
        step_ms = _calibrating_step(found[r.scenario], r)
        speed = _host_speed(r)
        try:
            with open_trace(db) as trace:
                found_here = diagnose(trace, cfg, step_ms=step_ms, host_speed=speed)
                findings = {f.klass: f for f in found_here}
                own = findings.get(found[r.scenario].bottleneck)
                if own is not None:
                    alone[(r.scenario, r.variant)] = trace_only(trace, cfg, own)
                try:
                    work = gpu_work(trace).iloc[0].to_dict()
                    work_rows.append({"scenario": r.scenario, "variant": r.variant, **work})
                except TraceError:
                    pass  # no kernels (a CPU capture): rules that need them stay undecided
        except TraceError as exc:
            diagnosed.append((r, None, str(exc)))
            continue
        diagnosed.append((r, findings, ""))
    work = with_limits(pd.DataFrame(work_rows), found, runs)
    meas = measurements(run_dir, runs, work)
    tolerance = float(cfg["predict"]["tolerance_share"])
    rows, long = [], []
    for r, findings, error in diagnosed:
        scen = found[r.scenario]
        expected = resolve_expectation(scen, r.variant, meas)
        row = diagnosis_row(r, scen, expected, findings, error)
        check = prediction_columns(
            scen, r.variant, expected.role, findings, runs, work, tolerance, meas
        )
        check["trace_only_speedup"] = alone.get((r.scenario, r.variant))
        rows.append(row | check)
        if findings is not None:
            long += finding_rows(r, findings)
    return diagnosis_frame(rows), findings_frame(long)


def _calibrating_step(scen: Scenario, r: Any) -> float | None:
    """The variant's unprofiled mean step, which calibrates its predictions; None where the
    scenario's removal is a limit read from the same trace and step (the kernel-sum limit: a
    prediction calibrated to that step would equal it by construction, so it is checked as the
    trace alone predicts it)."""
    if scen.removed_by == LIMIT and not scen.limit_metric:
        return None
    step = pd.to_numeric(getattr(r, "step_ms_mean", None), errors="coerce")
    return float(step) if pd.notna(step) and step > 0 else None


def _host_speed(r: Any) -> float | None:
    """The timed processes' host speed relative to the profiled process's, from runs.csv's
    host probes (``probe_*``: the timing processes' median, ``profile_probe_*``: the profiled
    process's); None where a run has none. Passed for every scenario, kernel_flood's too: it
    scales the profiled host to the timed one without reading the timed step."""

    def probes(prefix: str) -> dict[str, float | None]:
        out: dict[str, float | None] = {}
        for key in PROBE_KEYS:
            v = pd.to_numeric(getattr(r, f"{prefix}{key}", None), errors="coerce")
            out[key] = float(v) if pd.notna(v) else None
        return out

    return host_speed(probes("profile_probe_"), probes("probe_"))


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
    for r, db in profiled_exports(run_dir, runs):
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
    table = with_limits(pd.DataFrame(rows), found, runs)
    if table.empty or "kernel_ms_per_step" not in table:
        return table
    return add_side_bound(table)  # how close a variant beside an ideal can come, at most


def with_limits(
    table: pd.DataFrame, found: dict[str, Scenario], runs: pd.DataFrame
) -> pd.DataFrame:
    """``table`` (gpu_work rows) with ``limit_ms_per_step`` and ``share_of_limit``: for a
    scenario whose cause is removed by its analytic limit (``Scenario.removed_by == "limit"``),
    the baseline's kernel-sum per step from its own trace, over each variant's unprofiled mean
    step time (a variant traced at graph level, without kernel rows, leaves the limit as it is)."""
    if table.empty or "kernel_ms_per_step" not in table:
        return table
    table = table.copy()
    index = runs.set_index(["scenario", "variant"])
    keys = list(zip(table["scenario"], table["variant"], strict=True))
    for col in ("kind", "step_ms_mean"):
        if col not in table:
            table[col] = [index[col].get(k) for k in keys] if col in index else None
    table["limit_ms_per_step"] = float("nan")
    for name, group in table.groupby("scenario", sort=False):
        if name not in found or found[name].removed_by != "limit" or found[name].limit_metric:
            continue  # no limit here, or one the run measured (Scenario.limit_metric)
        base = group[group["kind"] == "baseline"]["kernel_ms_per_step"].dropna()
        if not base.empty:
            table.loc[group.index, "limit_ms_per_step"] = float(base.iloc[0])
    steps = pd.to_numeric(table["step_ms_mean"], errors="coerce")
    table["share_of_limit"] = table["limit_ms_per_step"] / steps
    return table


# -- verdicts -------------------------------------------------------------------------------------


def _describe(row: Any, main_metric: Mapping[str, str], findings: pd.DataFrame | None) -> str:
    """'async_dataloader: expected none (clean), observed data_stall (predicted_saving_share
    0.75, data_load_share 0.62)': the number that decided the class, then its main metric."""
    observed = row.observed if isinstance(row.observed, str) and row.observed else "nothing"
    text = f"{row.variant}: expected {row.expected} ({row.expected_role}), observed {observed}"
    klass = row.expected if row.expected in main_metric else None
    klass = klass or (observed.split(";")[0] if observed != "nothing" else None)
    if klass and findings is not None and not findings.empty:
        mine = findings[
            (findings["scenario"] == row.scenario)
            & (findings["variant"] == row.variant)
            & (findings["class"] == klass)
        ]
        # the number that decided the class (the time model's), then its main metric
        shown = [m for m in ("predicted_saving_share", main_metric.get(klass, "")) if m]
        told = [
            f"{m} {float(mine.loc[mine['metric'] == m, 'value'].iloc[0]):.3g}"
            for m in dict.fromkeys(shown)
            if (mine["metric"] == m).any()
        ]
        if told:
            text += f" ({', '.join(told)})"
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
        skipped = _skipped_baseline(r)
        if skipped and (d.empty or d[d["kind"] == "baseline"].empty):
            why = skipped  # inconclusive, and why: the baseline never ran here
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
