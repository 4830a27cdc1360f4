"""Judging a run, as one typed pipeline that runs in memory and writes its tables once.

    results -> measurements -> evidence -> expectation -> verdict

1. **results** (:mod:`harness.core.results`): each variant's result.json files, read once: its
   timing rounds' steps and its metrics.
2. **measurements** (:mod:`harness.judge.measure`): per variant, the saving of removing its
   scenario's cause, paired within rounds, with its interval (:mod:`harness.core.stats`).
3. **evidence** (:mod:`harness.judge.evidence`): each profiled export opened once: its
   findings, its GPU work per step and the trace-only prediction.
4. **expectation** (:mod:`harness.judge.truth`): the measured saving against the class's bar
   (``fires`` / ``clear`` / ``either``, ``not_taken``, ``no_removal``, ``oversubscribed``: the
   loop's extra wait for a core explains the gap); the findings judged
   against it, other classes held to the measured gap; the predictions checked against the
   same measurement (:mod:`harness.judge.predictions`). One :class:`Judged` per variant.
5. **verdict** (:mod:`harness.judge.verdicts`) per scenario, and the scores
   (:mod:`harness.judge.scoring`).

:func:`judge_run` returns every table (:class:`JudgedRun`); :func:`write_judged` writes them
(diagnosis.csv, findings.csv, gpu_work.csv, verdicts.csv, confusion.csv, detector_scores.csv)
and the nsys expert-rules cross-check. Nothing is written and read back on the way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.detect import load_thresholds
from bottlenecks import SPECS
from harness.core import runfolder as rf
from harness.core.results import VariantResults
from harness.judge import evidence as E
from harness.judge import scoring, witness
from harness.judge.diagnosis_table import (
    Judged,
    diagnosis_frame,
    diagnosis_row,
    finding_rows,
    findings_frame,
    write_findings,
)
from harness.judge.measure import (
    extra_cpu_share,
    extra_wait_share,
    ideal_saving,
    measure_scenario,
    measured_saving,
)
from harness.judge.predictions import prediction_columns
from harness.judge.truth import bar_of, expect, judge_own, off_targets
from harness.judge.verdicts import verdicts
from scenarios import Scenario

__all__ = ["JudgedRun", "diagnose_run", "gpu_work_table", "judge_run", "write_judged"]

#: Per class, whether its cost is the step loop asleep (its extra CPU time then counts against
#: the measured gap: :func:`harness.judge.truth.oversubscribed`).
ASLEEP: dict[str, bool] = {s.name: s.loop_asleep for s in SPECS}


@dataclass(frozen=True)
class JudgedRun:
    """Every judged variant and the run's tables built from them."""

    judged: tuple[Judged, ...]
    diagnosis: pd.DataFrame
    findings: pd.DataFrame
    gpu_work: pd.DataFrame
    verdicts: pd.DataFrame
    confusion: pd.DataFrame
    """Expected x primary, ``expected`` as the index."""
    scores: pd.DataFrame


def _results(
    run_dir: Path, found: Mapping[str, Scenario], runs: pd.DataFrame
) -> dict[str, dict[str, VariantResults]]:
    """Stage 1-2's input: each scenario's variants' results, by scenario and variant."""
    out = {}
    for name in runs["scenario"].unique():
        listed = [str(v) for v in runs.loc[runs["scenario"] == name, "variant"]]
        out[str(name)] = measure_scenario(run_dir, found[name], listed)
    return out


def judge_variant(
    e: E.Evidence,
    scen: Scenario,
    timed: Mapping[str, VariantResults],
    cfg: Mapping[str, Any],
) -> Judged:
    """One variant through stages 2 and 4: its measured saving (and its loop's extra wait for a
    core), its truth, its findings against it."""
    saving, why = measured_saving(scen, e.variant, timed, e.work)
    truth = expect(
        scen, e.variant, saving, bar_of(cfg, scen.bottleneck), why,
        wait_share=extra_wait_share(scen, e.variant, timed),
        cpu_share=extra_cpu_share(scen, e.variant, timed) if ASLEEP[scen.bottleneck] else None,
        oversubscribed_min_share=cfg.oversubscribed_min_share,
    )  # fmt: skip
    findings = e.findings or {}
    tolerance = cfg.predict.tolerance_share
    return Judged(
        evidence=e,
        truth=truth,
        own=judge_own(truth, findings.get(scen.bottleneck)),
        off=off_targets(truth, findings, ideal_saving(scen, e.variant, timed)),
        prediction=prediction_columns(scen, truth, e.findings, tolerance),
    )


def judge_run(
    run_dir: Path,
    found: Mapping[str, Scenario],
    runs: pd.DataFrame,
    *,
    thresholds: Mapping[str, Any] | None = None,
    jobs: int = 1,
) -> JudgedRun:
    """The whole pipeline on a run folder (``runs``: runs.csv's rows: scenario, variant, kind,
    profiled, and ``speedup_ci_low`` for the verdict's bar); nothing is written. ``jobs``:
    exports read at once (:func:`harness.judge.evidence.gather`)."""
    cfg = load_thresholds(thresholds)
    timed = _results(run_dir, found, runs)
    steps = {(s, v): r.step_ms_mean for s, by in timed.items() for v, r in by.items()}
    evidence = E.gather(run_dir, found, runs, cfg, steps, jobs=jobs)
    judged = tuple(judge_variant(e, found[e.scenario], timed[e.scenario], cfg) for e in evidence)
    judged = _witnessed(run_dir, judged)
    diag = diagnosis_frame([diagnosis_row(j) for j in judged])
    matrix, scores = scoring.confusion(diag)
    return JudgedRun(
        judged=judged,
        diagnosis=diag,
        findings=findings_frame([row for e in evidence for row in finding_rows(e)]),
        gpu_work=E.gpu_work_frame(evidence, found, steps),
        verdicts=witness.apply_verdicts(
            verdicts(judged, runs, found, min_ci_low=cfg.verdict_min_ci_low),
            {(j.scenario, j.variant): j.witness for j in judged},
        ),
        confusion=matrix,
        scores=scores,
    )


def _witnessed(run_dir: Path, judged: tuple[Judged, ...]) -> tuple[Judged, ...]:
    """Each judged variant with the kernels row's witness of its truth (absent, with the
    reason, where the run has no row yet: the kernels step brings it in after)."""
    tables = witness.read_tables(run_dir)
    return tuple(
        replace(j, witness=witness.witness_of(
            j.truth.klass, str(j.truth.state), tables, j.scenario, j.variant))
        for j in judged
    )  # fmt: skip


def write_judged(
    run_dir: Path,
    judged: JudgedRun,
    runs: pd.DataFrame,
    *,
    crosscheck: bool = True,
    thresholds: Mapping[str, Any] | None = None,
    jobs: int = 1,
) -> None:
    """The judged run's tables, each written once; with ``crosscheck`` (and unless
    ``expert_rules.enabled`` is false), nsys's expert rules on the same exports
    (expert_rules.csv, crosscheck.csv), ``jobs`` reports at once."""
    rf.write_frame(rf.table_path(run_dir, "diagnosis"), judged.diagnosis)
    write_findings(run_dir, judged.findings)
    rf.write_frame(rf.table_path(run_dir, "gpu_work"), judged.gpu_work)
    rf.write_frame(rf.table_path(run_dir, "verdicts"), judged.verdicts)
    matrix = judged.confusion.reset_index(names="expected")
    rf.write_frame(rf.table_path(run_dir, "confusion"), matrix)
    rf.write_frame(rf.table_path(run_dir, "detector_scores"), judged.scores)
    if crosscheck and load_thresholds(thresholds).expert_rules.enabled:
        from harness.judge.crosscheck import write_crosscheck

        write_crosscheck(run_dir, judged.diagnosis, runs, jobs=jobs)


def diagnose_run(
    run_dir: Path,
    found: Mapping[str, Scenario],
    runs: pd.DataFrame,
    *,
    crosscheck: bool = True,
    thresholds: Mapping[str, Any] | None = None,
    jobs: int = 1,
) -> JudgedRun:
    """:func:`judge_run`, then :func:`write_judged`: what ``harness run`` and
    ``harness rediagnose`` do at the end of a run."""
    judged = judge_run(run_dir, found, runs, thresholds=thresholds, jobs=jobs)
    write_judged(run_dir, judged, runs, crosscheck=crosscheck, thresholds=thresholds, jobs=jobs)
    return judged


def gpu_work_table(
    run_dir: Path, found: Mapping[str, Scenario], runs: pd.DataFrame
) -> pd.DataFrame:
    """``gpu_work.csv`` alone (:func:`harness.judge.evidence.gpu_work_frame`), the exports
    read for it: for a caller that wants no judging."""
    cfg = load_thresholds()
    timed = _results(run_dir, found, runs)
    steps = {(s, v): r.step_ms_mean for s, by in timed.items() for v, r in by.items()}
    evidence = E.gather(run_dir, found, runs, cfg, steps, detect=False)
    return E.gpu_work_frame(evidence, found, steps)
