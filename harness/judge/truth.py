"""Ground truth: what the detectors should find on each variant of a run, and whether they did.

Each variant declares its expectation (``scenarios.Variant.expectation``): the baseline its
scenario's class (``bottleneck``), a fix or ``ideal`` nothing (``clean``), and a fix that does
not remove the whole bottleneck on some machines its class as ``partial``, decided by a rule over
measurements of the same run (``scenarios.Rule``: e.g. async_dataloader stays data-stalled when
its workers alone deliver under 70% of what ``ideal`` consumes). When the rule holds the
variant is expected ``partial``, when it does not ``clean``, and when a measurement is missing
the role is ``undecided`` and the variant is not judged.

The measurements a rule reads come from the run itself: each variant's ``metrics()`` in its
result files, its GPU work per step (``gpu_work.csv``'s columns) and its ``runs.csv`` row.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.findings import Finding, State
from harness.core import runfolder as rf
from scenarios import Rule, Scenario

__all__ = [
    "UNDECIDED",
    "Expected",
    "Measures",
    "evaluate_rule",
    "judge",
    "measurements",
    "resolve_expectation",
    "result_metrics",
]

#: The role of a variant whose rule lacked a measurement on this run: it is not judged.
UNDECIDED = "undecided"

#: Per (scenario, variant): measurement name -> value.
Measures = dict[tuple[str, str], dict[str, float]]


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


# -- expectations ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Expected:
    """A variant's expectation, resolved on one run."""

    klass: str
    """The class expected to fire, or ``none``."""
    role: str
    """clean / bottleneck / partial, or undecided (a rule lacked a measurement)."""
    because: str
    """Why, with the rule's numbers where a rule decided it."""


def _rule_value(name: str, variant: str, meas: Measures, scenario: str) -> float | None:
    target, _, metric = name.partition(".") if "." in name else ("self", "", name)
    source = variant if target == "self" else target
    value = meas.get((scenario, source), {}).get(metric)
    return None if value is None or math.isnan(value) else value


def _negate(op: str) -> str:
    return ">=" if op == "<" else "<="


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
