"""A variant's result files read once, into one typed record: the timed rounds and the metrics.

Why one reader: the judge needs each timing round's steps (ratios are paired within a round,
:func:`harness.core.stats.paired_ratio_ci`) and each variant's ``metrics()`` (a measured limit
such as pipeline_imbalance's ``balanced_bound_ms``), and how long its step loop waited for a
core (:mod:`harness.core.schedwait`: CPU oversubscription, told apart from the class's cause).
The rules are said here once: a timing round counts when its unit ended ``ok`` and wrote
steps; a metric is the mean over those rounds, else the profiled process's value. The layout is :mod:`harness.core.runfolder`'s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core import runfolder as rf
from harness.core import schedwait

__all__ = ["PhaseRecord", "VariantResults", "read_variant"]


@dataclass(frozen=True)
class PhaseRecord:
    """One phase folder of a variant (``timing-<r>``, ``profile``, ``kineto``) as read once:
    its status.json and result.json (None where missing or unreadable)."""

    phase: str
    folder: Path
    status: rf.Status | None
    """How the unit ended; None without a readable status.json (not run, or interrupted)."""
    status_record: Mapping[str, Any] | None
    """status.json as written (``error``, ``rc``, ...)."""
    result: Mapping[str, Any] | None
    """result.json as written; None where it is missing, corrupt or not an object."""

    @property
    def error(self) -> str:
        """The status record's error, or the status itself (``timeout``), '' without either."""
        return str((self.status_record or {}).get("error") or (self.status or ""))


@dataclass(frozen=True)
class VariantResults:
    """What a variant's result.json files hold, by round."""

    scenario: str
    variant: str
    rounds: Mapping[int, tuple[float, ...]] = field(default_factory=dict)
    """Timing round number -> its measured steps (ms), rounds that ended ``ok`` only."""
    round_metrics: Mapping[int, Mapping[str, float]] = field(default_factory=dict)
    """Timing round number -> that process's ``metrics()`` (finite numbers only)."""
    profile_metrics: Mapping[str, float] = field(default_factory=dict)
    """The profiled process's ``metrics()``."""
    profile_step_ms: tuple[float, ...] = ()
    """The profiled process's measured steps (ms)."""
    round_wait_ms: Mapping[int, float] = field(default_factory=dict)
    """Timing round number -> its step loop's run-queue wait per step (ms; the most of any
    rank: :mod:`harness.core.schedwait`), rounds that recorded it only."""
    round_cpu_ms: Mapping[int, float] = field(default_factory=dict)
    """Timing round number -> its step loop's CPU time per step (ms; as ``round_wait_ms``)."""
    phases: tuple[PhaseRecord, ...] = ()
    """Every phase folder in run order, as read (what runs.csv's row is built from:
    ``harness.execution.collect``); the fields above are these under the rules of the
    module's docstring."""

    @property
    def timed(self) -> bool:
        """At least one timing round has steps."""
        return any(self.rounds.values())

    @property
    def step_ms_mean(self) -> float | None:
        """Mean over every step of every timing round (each step weighs the same)."""
        steps = [ms for r in self.rounds.values() for ms in r]
        return sum(steps) / len(steps) if steps else None

    def metric(self, name: str) -> float | None:
        """``name`` averaged over the timing rounds that report it, else the profile's."""
        vals = [m[name] for m in self.round_metrics.values() if name in m]
        if vals:
            return sum(vals) / len(vals)
        return self.profile_metrics.get(name)

    def metric_by_round(self, name: str) -> dict[int, float]:
        """``name`` per timing round that has steps: the round's own value, else the variant's
        (:meth:`metric`) for rounds that lack it; empty when no process reports it."""
        whole = self.metric(name)
        out = {}
        for r in self.rounds:
            value = self.round_metrics.get(r, {}).get(name, whole)
            if value is not None:
                out[r] = value
        return out


def _numbers(raw: Any) -> dict[str, float]:
    out = {}
    for k, v in (raw or {}).items() if isinstance(raw, Mapping) else ():
        if isinstance(v, bool):
            continue
        try:
            f = float(v)
        except (TypeError, ValueError):
            continue
        if math.isfinite(f):
            out[str(k)] = f
    return out


def _steps(res: Mapping[str, Any]) -> tuple[float, ...]:
    return tuple(float(x) for x in res.get("step_ms") or ())


def _phase(folder: Path) -> PhaseRecord:
    """One phase folder read: its status and its result, each None where unreadable."""
    try:
        record = rf.read_status(folder)
    except rf.CorruptFileError:
        record = None
    try:
        res = rf.read_result(folder)
    except rf.CorruptFileError:
        res = None
    return PhaseRecord(
        phase=folder.name,
        folder=folder,
        status=rf.unit_status(folder),
        status_record=record,
        result=res if isinstance(res, dict) else None,
    )


def read_variant(run_dir: Path, scenario: str, variant: str) -> VariantResults:
    """The one reader of a variant's result.json files: its timed rounds and metrics from its
    phase folders, and every phase as read (:attr:`VariantResults.phases`). Unreadable or
    corrupt files are skipped: a round that cannot be read was not measured."""
    rounds: dict[int, tuple[float, ...]] = {}
    metrics: dict[int, dict[str, float]] = {}
    profile: dict[str, float] = {}
    profile_steps: tuple[float, ...] = ()
    waits: dict[int, float] = {}
    cpus: dict[int, float] = {}
    phases = tuple(_phase(folder) for folder in rf.phase_dirs(run_dir, scenario, variant))
    for ph in phases:
        res = ph.result
        if res is None:
            continue
        number = rf.timing_round(ph.phase)
        if number is not None and ph.status is rf.Status.OK:
            if _steps(res):
                rounds[number] = _steps(res)
            metrics[number] = _numbers(res.get("metrics"))
            sched = schedwait.timing_columns(res)
            wait, cpu = sched["loop_runqueue_wait_ms_per_step"], sched["loop_cpu_ms_per_step"]
            if wait is not None and number in rounds:
                waits[number] = wait
            if cpu is not None and number in rounds:
                cpus[number] = cpu
        elif rf.is_profile(ph.phase):
            profile = _numbers(res.get("metrics"))
            profile_steps = _steps(res)
    return VariantResults(
        scenario=scenario,
        variant=variant,
        rounds=dict(sorted(rounds.items())),
        round_metrics=metrics,
        profile_metrics=profile,
        profile_step_ms=profile_steps,
        round_wait_ms=dict(sorted(waits.items())),
        round_cpu_ms=dict(sorted(cpus.items())),
        phases=phases,
    )
