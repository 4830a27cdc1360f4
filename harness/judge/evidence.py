"""Evidence: every profiled export opened once, for everything the judge reads from a trace.

From one open trace come the findings (every detector, predictions calibrated to the variant's
untraced step), the GPU work per step (``gpu_work.csv``'s row, and a launch-bound variant's
limit) and the prediction the trace alone gives (``trace_only_speedup``). An export that cannot
be read is evidence too: its reason, and no findings.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.detect import PROBE_KEYS, diagnose, host_speed, trace_only
from analysis.findings import Finding
from analysis.gpu_work import add_side_bound, gpu_work
from analysis.trace import TraceError, open_trace
from harness.core import runfolder as rf
from harness.judge.measure import LIMIT
from scenarios import Scenario

__all__ = ["Evidence", "gather", "gpu_work_frame", "probed_host_speed", "profiled_exports"]


@dataclass(frozen=True)
class Evidence:
    """What one variant's export says."""

    scenario: str
    variant: str
    kind: str
    findings: Mapping[str, Finding] | None
    """Class -> finding; None when the export could not be read (``error`` says why)."""
    error: str = ""
    work: Mapping[str, Any] = field(default_factory=dict)
    """The export's GPU work per step (:func:`analysis.gpu_work.gpu_work`); empty without
    GPU activity (``work_error`` says why)."""
    work_error: str = ""
    trace_only_speedup: float | None = None
    """The scenario's class's prediction from the trace alone (no measured step)."""

    @property
    def readable(self) -> bool:
        return self.findings is not None


def profiled_exports(run_dir: Path, runs: pd.DataFrame) -> list[tuple[Any, Path]]:
    """(runs row, .sqlite) of every profiled variant that has an export."""
    out = []
    for r in runs.itertuples():
        if not r.profiled:
            continue
        db = rf.profile_file(run_dir, r.scenario, r.variant, rf.SQLITE_SUFFIX)
        if db is not None:
            out.append((r, db))
    return out


def calibrating_step(scen: Scenario, variant: str, step_ms: float | None) -> float | None:
    """The variant's unprofiled mean step, which calibrates its predictions; None where the
    variant's removal is a limit read from the same trace (the launch limit: a prediction
    calibrated to that step would equal it by construction, so it is checked as the trace alone
    predicts it). A removal timed as a variant of its own (kernel_flood's baseline against
    ``cuda_graphs``) is no such construction: that variant is calibrated."""
    if scen.removal_for(variant) == LIMIT and not scen.limit_metric:
        return None
    return step_ms if step_ms is not None and step_ms > 0 else None


def probed_host_speed(r: Any) -> float | None:
    """The timed processes' host speed relative to the profiled process's, from runs.csv's
    host probes (``probe_*``: the timing rounds' median, ``profile_probe_*``: the profiled
    process's); None where the run has none. It scales the profiled host to the timed one, so
    a profile taken on a slow (or fast) moment of the host does not move the prediction."""

    def probes(prefix: str) -> dict[str, float | None]:
        out: dict[str, float | None] = {}
        for key in PROBE_KEYS:
            v = pd.to_numeric(getattr(r, f"{prefix}{key}", None), errors="coerce")
            out[key] = float(v) if pd.notna(v) else None
        return out

    return host_speed(probes("profile_probe_"), probes("probe_"))


def read_export(
    db: Path,
    scen: Scenario,
    variant: str,
    kind: str,
    cfg: Mapping[str, Any],
    step_ms: float | None,
    *,
    detect: bool = True,
    speed: float | None = None,
) -> Evidence:
    """One export's evidence, the trace opened once (``detect`` False: its GPU work only, and
    no findings); ``speed``: :func:`probed_host_speed`."""
    base = {"scenario": scen.name, "variant": variant, "kind": kind}
    findings: dict[str, Finding] | None = None
    alone = None
    try:
        with open_trace(db) as trace:
            if detect:
                found = diagnose(
                    trace, cfg, step_ms=calibrating_step(scen, variant, step_ms), host_speed=speed
                )
                findings = {f.klass: f for f in found}
                own = findings.get(scen.bottleneck)
                alone = trace_only(trace, cfg, own) if own is not None else None
            try:
                work, work_error = dict(gpu_work(trace).iloc[0].to_dict()), ""
            except TraceError as exc:  # no kernels (a CPU capture)
                work, work_error = {}, str(exc)
    except TraceError as exc:
        return Evidence(**base, findings=None, error=str(exc), work_error=str(exc))
    return Evidence(
        **base, findings=findings, work=work, work_error=work_error, trace_only_speedup=alone
    )


def gather(
    run_dir: Path,
    found: Mapping[str, Scenario],
    runs: pd.DataFrame,
    cfg: Mapping[str, Any],
    step_ms: Mapping[tuple[str, str], float | None],
    *,
    detect: bool = True,
    jobs: int = 1,
) -> list[Evidence]:
    """Every profiled export's evidence, in runs.csv's order; ``step_ms``: each variant's
    untraced mean step (the timed rounds'), which calibrates its predictions. ``jobs`` above 1
    reads that many exports at once, each in a fresh process (the exports are independent and
    each read is CPU-bound; docs/measurement.md), the largest first; the evidence is the same
    either way."""
    calls = [
        (db, found[r.scenario], r.variant, r.kind, cfg, step_ms.get((r.scenario, r.variant)),
         detect, probed_host_speed(r))
        for r, db in profiled_exports(run_dir, runs)
    ]  # fmt: skip
    if jobs <= 1 or len(calls) < 2:
        return [_read(c) for c in calls]
    order = sorted(range(len(calls)), key=lambda i: -calls[i][0].stat().st_size)
    out: list[Evidence | None] = [None] * len(calls)
    spawn = multiprocessing.get_context("spawn")  # the parent runs threads: never fork it
    with ProcessPoolExecutor(max_workers=min(jobs, len(calls)), mp_context=spawn) as pool:
        for i, evidence in zip(order, pool.map(_read, [calls[i] for i in order]), strict=True):
            out[i] = evidence
    return [e for e in out if e is not None]


def _read(call: tuple) -> Evidence:
    db, scen, variant, kind, cfg, step, detect, speed = call
    return read_export(db, scen, variant, kind, cfg, step, detect=detect, speed=speed)


def gpu_work_frame(
    evidence: list[Evidence], found: Mapping[str, Scenario], step_ms: Mapping[tuple[str, str], Any]
) -> pd.DataFrame:
    """``gpu_work.csv``: GPU work per step of every profiled variant, its unprofiled mean step,
    and for a scenario removed by the launch limit ``limit_ms_per_step`` (the variant's own
    :func:`harness.judge.measure.launch_limit_ms`) and ``share_of_limit`` = limit / step. An
    export without kernels (a CPU capture) gets its reason in ``error``."""
    from harness.judge.measure import launch_limit_ms

    rows = []
    for e in evidence:
        step = step_ms.get((e.scenario, e.variant))
        row: dict[str, Any] = {"scenario": e.scenario, "variant": e.variant, "kind": e.kind,
                               "step_ms_mean": step}  # fmt: skip
        row.update(e.work)
        if e.work_error:
            row["error"] = e.work_error
        scen = found[e.scenario]
        limited = scen.removal_for(e.variant) == LIMIT and not scen.limit_metric
        limit = launch_limit_ms(e.work) if limited else None
        row["limit_ms_per_step"] = limit
        row["share_of_limit"] = limit / step if limit is not None and step else None
        rows.append(row)
    table = pd.DataFrame(rows)
    if table.empty or "kernel_ms_per_step" not in table:
        return table
    for col in ("limit_ms_per_step", "share_of_limit", "step_ms_mean"):
        table[col] = pd.to_numeric(table[col], errors="coerce")
    return add_side_bound(table)  # how close a variant beside an ideal can come, at most
