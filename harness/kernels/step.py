"""The row as a step of a run: :func:`run_kernels` (``harness kernels RUN`` and the hook in
``harness run``).

Plan each candidate variant from its export, choose its kernels (reading what another variant
of its scenario measures: :mod:`harness.kernels.choose`) in priority order while the budget
lets them in, run their ncu processes, parse and classify what came back, and write the tables:
``kernels.csv`` (one row per profiled kernel), ``kernel_limits.csv`` (one row per variant: how
its row ended and the step's roofline limit beside gpu_work.csv's measured GPU time) and
``kernels_run.json`` (the step's state, its reason when skipped, its wall and settings). Then
the judge's second witness is brought up to date in diagnosis.csv and verdicts.csv, where the
run has them (:func:`harness.judge.witness.rewitness`). A variant that fails is a row with its
state and reason; only a stop signal or a table that cannot be written ends the step.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.trace import TraceError
from harness.core import atomic
from harness.core.envinfo import detect_gpus
from harness.core.kernels_config import KernelsConfig, kernels_config
from harness.kernels import launch, select
from harness.kernels.choose import Choice, Chooser
from harness.kernels.classify import classify
from harness.kernels.command import candidates as ncu_candidates
from harness.kernels.command import find_ncu, ncu_version
from harness.kernels.limits import add_at_bound, by_config, join_choice, read_gpu_work, step_limit
from harness.kernels.parse import NcuCsvError, kernel_metrics, read_raw
from harness.kernels.plan import Plan, plan_export
from harness.kernels.select import Candidate
from harness.kernels.tables import (
    KERNEL_COLUMNS,
    KERNELS_CSV,
    LIMIT_COLUMNS,
    LIMITS_CSV,
    RUN_JSON,
    WITNESSED,
    RowState,
    StepState,
)

__all__ = ["KERNELS_CSV", "LIMITS_CSV", "RUN_JSON", "KernelsResult", "StepState", "run_kernels"]

#: Most launch configurations a plan ranks (the chooser takes a few of them).
PLAN_ROWS = 64


@dataclass
class KernelsResult:
    """What the step did; the tables are also in the run folder."""

    state: StepState
    reason: str = ""
    wall_s: float = 0.0
    kernels: pd.DataFrame = field(
        default_factory=lambda: pd.DataFrame(columns=list(KERNEL_COLUMNS))
    )
    limits: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(LIMIT_COLUMNS)))


@dataclass
class _Planned:
    """One variant the row reports: its plan, its choice and its ncu process (None when it
    reads every kernel from other variants' runs)."""

    cand: Candidate
    plan: Plan
    choice: Choice
    job: launch.Job | None = None


def why_not(cfg: KernelsConfig, ncu: str | None) -> str:
    """Why the row cannot run on this machine ('' when it can)."""
    if not cfg.enabled:
        return "kernels.enabled=false"
    if not detect_gpus().present:
        return "no NVIDIA GPU on this machine (nvidia-smi lists none)"
    if ncu is None:
        looked = ", ".join(ncu_candidates(cfg.ncu_path)) or "PATH"
        return f"no ncu (Nsight Compute) found (looked in $NCU, PATH, {looked})"
    return ""


def run_kernels(
    run_dir: Path | str,
    section: Any = None,
    *,
    say: Callable[[str], None] = print,
    top: int | None = None,
    variants: Sequence[str] | None = None,
    meanwhile: Callable[[], None] | None = None,
) -> KernelsResult:
    """The row over a run folder's profiled variants (``section``: the run's ``kernels``
    config, a mapping or None for the defaults; ``top`` and ``variants`` as the CLI's
    ``--top`` and ``--variants``). Never raises for a variant's failure.

    ``meanwhile`` (a run's diagnosis and tools: CPU work on the exports) is called on this
    thread while the ncu processes plan and run on another, and before the tables, which read
    what it writes (gpu_work.csv, diagnosis.csv): the tail then takes the longer of the two,
    not their sum. Its exception (a stop signal) stops the ncu processes and is raised."""
    t0 = time.monotonic()
    run_dir = Path(run_dir)
    cfg = kernels_config(section, top=top)
    ncu = find_ncu(cfg.ncu_path)
    reason = why_not(cfg, ncu)
    cands = [] if reason else _chosen(run_dir, cfg, variants)
    if not reason and not cands:
        reason = "no profiled GPU variant with an export in the run folder"
    if reason:
        say(f"kernels: skipped: {reason}")
        if meanwhile is not None:
            meanwhile()
        return _finish(run_dir, KernelsResult(StepState.SKIPPED, reason), cfg, ncu, t0, {}, say)
    assert ncu is not None
    row = _Row(run_dir, cands, ncu, cfg, t0)
    idle = launch.beside(row.run, meanwhile, say)
    result = _collect(run_dir, row.planned, row.left, cfg)
    estimate = select.makespan([_cost(p, cfg) for p in row.planned if p.job], cfg.parallel)
    return _finish(run_dir, result, cfg, ncu, t0, {"estimate_s": estimate}, say, idle)


@dataclass
class _Row:
    """The row's ncu side: every candidate planned, then their processes run (on the thread
    :func:`harness.kernels.launch.beside` gives it)."""

    run_dir: Path
    cands: list[Candidate]
    ncu: str
    cfg: KernelsConfig
    t0: float
    planned: list[_Planned] = field(default_factory=list)
    left: list[dict[str, Any]] = field(default_factory=list)

    def run(self, stop: threading.Event, say: Callable[[str], None]) -> None:
        cfg = self.cfg
        self.planned, self.left = _plan_all(self.run_dir, self.cands, self.ncu, cfg)
        jobs = [p.job for p in self.planned if p.job is not None]
        if self.left:
            say(f"kernels: {len(self.left)} variants left out "
                f"({', '.join(r['variant'] for r in self.left)})")  # fmt: skip
        say(f"kernels: ncu on {len(jobs)} variants ({sum(j.launches for j in jobs)} launches), "
            f"{len(self.planned) - len(jobs)} read from them, {cfg.parallel} at once "
            f"({ncu_version(self.ncu) or self.ncu})")  # fmt: skip
        launch.run_jobs(jobs, cfg, say, self.t0, stop=stop)


def _chosen(run_dir: Path, cfg: KernelsConfig, variants: Sequence[str] | None) -> list[Candidate]:
    """The candidates the settings pick: ``variants`` names ('scenario/variant', 'scenario'
    or 'variant'), then ``kernels.variants``'s policy."""
    cands = select.candidates(run_dir)
    if variants:
        wanted = set(variants)
        cands = [c for c in cands if {c.label, c.scenario, c.variant} & wanted]
    if cfg.variants == "removals":
        cands = select.keep_removals(cands)
    return cands


def _plan_all(
    run_dir: Path, cands: list[Candidate], ncu: str, cfg: KernelsConfig
) -> tuple[list[_Planned], list[dict[str, Any]]]:
    """Every candidate planned and chosen in priority order (blind ones, whose plans hold no
    kernel rows, last), each new ncu process let in while the estimate stays within the
    budget; a limits row for each variant left out."""
    left: list[dict[str, Any]] = []
    plans: list[tuple[Candidate, Plan]] = []
    for c in cands:
        if c.skip:
            left.append(_row(c, RowState.SKIPPED, c.skip))
            continue
        try:
            plans.append((c, plan_export(c.export, top=PLAN_ROWS, min_share=cfg.min_share)))
        except TraceError as exc:
            left.append(_row(c, RowState.FAILED, f"export unreadable: {exc}"))
    plans.sort(key=lambda cp: cp[1].kernels.empty)  # stable: the priority order otherwise
    chooser, planned, costs = Chooser(cfg), [], []
    for c, plan in plans:
        new = cfg.variants != "witness" or c.kind == "baseline" or c.bottleneck in WITNESSED
        choice = chooser.choice(c.scenario, c.label, plan, new=new)
        p = _Planned(c, plan, choice)
        if choice.names or plan.graph_level:
            cost = _cost(p, cfg)
            if not select.fits(costs, cost, cfg):
                left.append(_row(c, RowState.OVER_BUDGET,
                                 f"estimated past kernels.budget_s={cfg.budget_s:g}"))  # fmt: skip
                continue
            costs.append(cost)
            p.job = launch.prepare(c, plan, choice.names, ncu, run_dir, cfg, choice.launches)
        chooser.accept(c.scenario, plan, choice)
        planned.append(p)
    return planned, left


def _cost(p: _Planned, cfg: KernelsConfig) -> tuple[float, int]:
    """(host seconds, launches) of a variant's ncu process (:func:`harness.kernels.select.estimate`):
    its launches, and its kernel launches per step extrapolated from the planned ones by their
    share of the kernel time."""
    rows = p.plan.kernels
    per_step = 0.0
    if len(rows) and p.plan.coverage:
        per_step = float(rows["launches_per_step"].sum()) / p.plan.coverage
    launches = p.choice.launches if p.choice.names else cfg.top
    return select.estimate(p.cand, (launches, per_step), cfg)


def _row(c: Candidate, state: RowState, reason: str, **more: Any) -> dict[str, Any]:
    return {"scenario": c.scenario, "variant": c.variant, "kind": c.kind,
            "state": state.value, "reason": reason, **more}  # fmt: skip


def _collect(
    run_dir: Path, planned: list[_Planned], left: list[dict[str, Any]], cfg: KernelsConfig
) -> KernelsResult:
    """Every variant's rows (its own run's and those read from others'), classified and joined;
    the two tables."""
    work = read_gpu_work(run_dir / "gpu_work.csv")
    own = {p.cand.label: _measured(p.job) for p in planned if p.job is not None}
    measured = {label: by_config(frame) for label, (frame, _) in own.items()}
    kernel_frames, limit_rows = [], list(left)
    for p in planned:
        c, job = p.cand, p.job
        mine, problem = own.get(c.label, (pd.DataFrame(), ""))
        rows = join_choice(p.choice, mine, measured)
        rows = add_at_bound(classify(rows, cfg)) if len(rows) else rows
        state, reason = _state(p, rows, problem)
        if len(rows):
            kernel_frames.append(rows.assign(scenario=c.scenario, variant=c.variant, kind=c.kind))
        limit = step_limit(p.plan, rows, work.get((c.scenario, c.variant)), label=c.label,
                           own_launches=len(mine))  # fmt: skip
        limit_rows.append(_row(c, state, reason, **_process(p), **limit))
        if job is not None:
            atomic.write_json(job.unit_dir / launch.OUTCOME, {
                "state": state.value, "reason": reason, "rc": job.rc, "wall_s": job.wall_s,
                "start_s": job.start_s, "launches": job.launches, "kernels": len(mine),
                "note": p.plan.note, **launch.worker_parts(job), "argv": job.argv,
            })  # fmt: skip
    kernels = pd.concat(kernel_frames, ignore_index=True) if kernel_frames else pd.DataFrame()
    kernels = kernels.reindex(columns=list(KERNEL_COLUMNS))
    limits = pd.DataFrame(limit_rows).reindex(columns=list(LIMIT_COLUMNS))
    return KernelsResult(StepState.DONE, "", 0.0, kernels, limits)


def _measured(job: launch.Job) -> tuple[pd.DataFrame, str]:
    """One finished run's parsed rows, and why there are none when its CSV is bad."""
    if not job.csv.exists():
        return pd.DataFrame(), ""
    try:
        return kernel_metrics(read_raw(job.csv)), ""
    except NcuCsvError as exc:
        return pd.DataFrame(), str(exc)


def _process(p: _Planned) -> dict[str, Any]:
    """kernel_limits.csv's columns about the variant's own ncu process."""
    job = p.job
    if job is None:
        return {"selection": "reused", "launches": 0}
    return {"selection": "heaviest" if p.choice.names else "first_launches",
            "launches": job.launches, "start_s": job.start_s, "wall_s": job.wall_s,
            **launch.worker_parts(job)}  # fmt: skip


def _state(p: _Planned, rows: pd.DataFrame, problem: str) -> tuple[RowState, str]:
    """How a variant's row ended, and why."""
    job = p.job
    if job is None:
        if len(rows):
            return RowState.OK, f"every kernel read from {', '.join(_sources(p, rows))}"
        return RowState.NO_KERNELS, p.plan.note or "no kernel chosen"
    reason = "; ".join(x for x in (job.reason, problem) if x)
    if job.state in (RowState.TIMEOUT, RowState.OVER_BUDGET, RowState.FAILED) and not len(rows):
        return job.state, reason
    if len(rows):
        note = f"ncu exit {job.rc}" if job.rc else ""
        return RowState.OK, "; ".join(x for x in (reason, note, p.plan.note) if x)
    if job.rc:
        why = launch.tail(job.unit_dir / launch.rf.STDERR) or launch.tail(
            job.unit_dir / launch.rf.STDOUT
        )
        return RowState.FAILED, f"ncu exit {job.rc}: {why}"
    return RowState.NO_KERNELS, p.plan.note or "ncu profiled no kernel inside the window"


def _sources(p: _Planned, rows: pd.DataFrame) -> list[str]:
    return sorted({str(m) for m in rows["measured_in"] if str(m) != p.cand.label})


def _finish(
    run_dir: Path, result: KernelsResult, cfg: KernelsConfig, ncu: str | None, t0: float,
    extra: dict[str, Any], say: Callable[[str], None], idle_s: float = 0.0,
) -> KernelsResult:  # fmt: skip
    """The tables and kernels_run.json, written atomically, then the witness brought up to
    date; the wall time: the row's own, less ``idle_s`` (its processes had ended while the
    work beside them still ran). A table that cannot be written fails the step (its reason
    says which), never the run that called it."""
    result.wall_s = time.monotonic() - t0 - idle_s
    try:
        if result.state == StepState.DONE:
            atomic.write_frame(run_dir / KERNELS_CSV, result.kernels)
            atomic.write_frame(run_dir / LIMITS_CSV, result.limits)
        record = {
            "state": result.state.value, "reason": result.reason, "wall_s": result.wall_s,
            "ncu": ncu, "variants": len(result.limits), "kernels": len(result.kernels),
            **extra, "config": asdict(cfg),
        }  # fmt: skip
        atomic.write_json(run_dir / RUN_JSON, record)
    except atomic.ResultWriteError as exc:
        say(f"kernels: FAILED writing the tables: {exc}")
        result.state, result.reason = StepState.FAILED, f"tables not written: {exc}"
        return result
    _rewitness(run_dir, say)
    return result


def _rewitness(run_dir: Path, say: Callable[[str], None]) -> None:
    """The judge's second witness from the new tables, where the run has been judged."""
    from harness.judge.witness import rewitness

    try:
        if rewitness(run_dir):
            say("kernels: the second witness is in diagnosis.csv and verdicts.csv")
    except (OSError, ValueError) as exc:  # the row's tables are written; say what broke
        say(f"kernels: could not bring the witness into the run's tables: {exc}")
