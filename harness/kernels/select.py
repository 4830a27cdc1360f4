"""Which profiled variants the row runs, in what order, and what the budget lets in.

Candidates are the run's profiled GPU variants with an export (``<s>/<v>/profile/*.sqlite``).
Priority: the scenarios whose class the row witnesses (:data:`harness.kernels.tables.WITNESSED`)
first, every variant of them; then every other scenario's baseline, its ``ideal``, its fixes;
within each, scenarios and variants in runs.csv's order, a variant whose plan holds no kernel
rows (CUDA graphs traced at graph level: its first launches are profiled blind) last.
``kernels.variants=removals`` keeps only each scenario's baseline and its removal (``ideal``,
else its first fix).

The budget check estimates each variant's wall under ncu from the row's measured walls
(docs/kernels.md, "Time"): a process takes :data:`PROCESS_S` to reach its window (ncu's
start, a fresh interpreter's imports, CUDA under ncu, the scenario's set-up) plus its warm-up
and window steps, then its profiled launches at :data:`LAUNCH_S` each, which every ncu
process takes in turn (ncu serializes them across processes), then :data:`TAIL_S` to write
and exit. ``parallel`` lanes are simulated on one GPU; a variant whose addition would carry
the estimate past ``budget_s`` is left out (``over_budget``).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from harness.core import runfolder as rf
from harness.core.kernels_config import KernelsConfig
from harness.kernels.tables import WITNESSED

#: Seconds from an ncu process's start to its first profiled launch, beside others doing the
#: same: ncu's start, the interpreter's imports, CUDA's start under ncu, the scenario's set-up
#: (fitted to a real run's per-variant walls: docs/kernels.md, "Time").
PROCESS_S = 13.5
#: Seconds of one profiled launch with the row's section and metrics (its replay passes),
#: taken in turn with every other process's (the same fit, at 12 replay passes a launch).
LAUNCH_S = 0.65
#: Seconds after a process's last profiled launch: the rest of its window, ncu's report
#: written, the exit (the same fit).
TAIL_S = 3.0
#: Host microseconds per kernel launch under ncu, which intercepts every launch.
SERIAL_LAUNCH_US = 20.0
#: Warm-up steps a worker runs with a zero warm-up budget (harness.execution.worker's
#: MIN_WARMUP_STEPS; read here as a number so this module imports no worker code).
MIN_WARMUP_STEPS = 4

_KIND_ORDER = {"baseline": 0, "ideal": 1, "fix": 2}


@dataclass
class Candidate:
    """One profiled variant the row may run."""

    scenario: str
    variant: str
    kind: str
    profile_dir: Path
    export: Path
    spec: dict[str, Any]
    result: dict[str, Any] = field(default_factory=dict)
    skip: str = ""
    """Why the row cannot run it ('' when it can)."""
    bottleneck: str = ""
    """Its scenario's class (runs.csv), '' where unknown."""

    @property
    def label(self) -> str:
        return f"{self.scenario}/{self.variant}"


def candidates(run_dir: Path) -> list[Candidate]:
    """The run's profiled variants with an export, in priority order (module docstring)."""
    order = _runs_order(run_dir)
    found = []
    for spec_path in sorted(Path(run_dir).glob(f"*/*/{rf.PROFILE}/{rf.SPEC}")):
        pdir = spec_path.parent
        exports = sorted(p for p in pdir.glob(f"*{rf.SQLITE_SUFFIX}")
                         if not p.name.endswith(rf.PARTIAL_SQLITE_SUFFIX))  # fmt: skip
        if not exports or rf.unit_status(pdir) not in (rf.Status.OK, None):
            continue
        try:
            spec = rf.read_json(spec_path) or {}
            result = rf.read_result(pdir) or {}
        except rf.CorruptFileError:
            continue
        scen, var = pdir.parent.parent.name, pdir.parent.name
        _, _, listed_kind, klass = order.get((scen, var), (0, 0, "", ""))
        kind = str(result.get("kind") or listed_kind)
        cand = Candidate(scen, var, kind, pdir, exports[0], spec, result, bottleneck=klass)
        cand.skip = _unsupported(cand)
        found.append(cand)
    return sorted(found, key=lambda c: _priority(c, order))


def _unsupported(c: Candidate) -> str:
    """Why the row cannot profile this variant, or ''."""
    if c.spec.get("device") != "cuda":
        return "a CPU run: no GPU kernels"
    world = int(c.result.get("world_size") or 1)
    if world > 1:
        return f"distributed ({world} ranks): the row profiles single-process variants"
    return ""


_Order = dict[tuple[str, str], tuple[int, int, str, str]]


def _runs_order(run_dir: Path) -> _Order:
    """(scenario, variant) -> (scenario's position, variant's position, kind, class) in
    runs.csv."""
    try:
        runs = pd.read_csv(Path(run_dir) / "runs.csv")
    except (OSError, ValueError):
        return {}
    if not {"scenario", "variant", "kind"} <= set(runs.columns):
        return {}
    klass = runs["bottleneck"] if "bottleneck" in runs else pd.Series([""] * len(runs))
    scen_pos = {s: i for i, s in enumerate(dict.fromkeys(runs["scenario"]))}
    return {
        (str(r.scenario), str(r.variant)): (scen_pos[r.scenario], i, str(r.kind), str(k))
        for i, (r, k) in enumerate(zip(runs.itertuples(index=False), klass, strict=True))
    }


def _priority(c: Candidate, order: _Order) -> tuple:
    scen_pos, var_pos, _, _ = order.get((c.scenario, c.variant), (10**6, 10**6, "", ""))
    kind = _KIND_ORDER.get(c.kind, 3)
    return (c.bottleneck not in WITNESSED, kind, scen_pos, c.scenario, var_pos, c.variant)


def keep_removals(cands: list[Candidate]) -> list[Candidate]:
    """Each scenario's baseline and its removal: ``ideal``, else its first fix."""
    kept = []
    for scen in dict.fromkeys(c.scenario for c in cands):
        mine = [c for c in cands if c.scenario == scen]
        kept += [c for c in mine if c.kind == "baseline"]
        removal = [c for c in mine if c.kind == "ideal"] or [c for c in mine if c.kind == "fix"]
        kept += removal[:1]
    return [c for c in cands if c in kept]


def estimate(c: Candidate, plan_facts: tuple[int, float], cfg: KernelsConfig) -> tuple[float, int]:
    """(host seconds, profiled launches) of one variant's ncu process. ``plan_facts``:
    (launches it profiles, kernel launches per step). Host: :data:`PROCESS_S`, then its
    warm-up and window steps at its profiled run's step time (or at ncu's intercepted launch
    rate, whichever is slower)."""
    launches, launches_per_step = plan_facts
    steps = MIN_WARMUP_STEPS + cfg.window_steps
    steps_ms = c.result.get("step_ms") or []
    step_s = (sum(steps_ms) / len(steps_ms) / 1e3) if steps_ms else 0.1
    step_s = max(step_s, launches_per_step * SERIAL_LAUNCH_US / 1e6)
    return PROCESS_S + steps * step_s, int(launches)


def makespan(jobs: list[tuple[float, int]], parallel: int) -> float:
    """Wall seconds of ``jobs`` ((host seconds, profiled launches) each, started in order) on
    ``parallel`` lanes: each job's launches queue, one at a time, for the one GPU the
    processes share (:data:`LAUNCH_S` each, first come first served, as ncu takes them); a
    lane is held :data:`TAIL_S` past its job's last launch."""
    waiting = list(jobs)
    running: list[list[float]] = []  # [time of its next request, launches left]
    gpu_free = end = 0.0
    lanes_free = [0.0] * max(1, parallel)

    def start(at: float) -> None:
        host, launches = waiting.pop(0)
        if launches <= 0:
            heapq.heappush(lanes_free, at + host + TAIL_S)
        else:
            running.append([at + host, float(launches)])

    heapq.heapify(lanes_free)
    while waiting or running:
        while waiting and lanes_free:
            start(heapq.heappop(lanes_free))
        if not running:
            continue
        job = min(running, key=lambda j: j[0])
        gpu_free = max(job[0], gpu_free) + LAUNCH_S
        job[0], job[1] = gpu_free, job[1] - 1
        if job[1] <= 0:
            running.remove(job)
            heapq.heappush(lanes_free, gpu_free + TAIL_S)
    return max([end, *lanes_free]) if lanes_free else end


def fits(taken: list[tuple[float, int]], cost: tuple[float, int], cfg: KernelsConfig) -> bool:
    """Whether a job of ``cost`` after the ``taken`` ones keeps the estimate within
    ``budget_s`` (always, when the budget is 0)."""
    return cfg.budget_s <= 0 or makespan([*taken, cost], cfg.parallel) <= cfg.budget_s


def within_budget(costs: list[tuple[float, int]], cfg: KernelsConfig) -> list[bool]:
    """Which jobs (in priority order) the budget lets in: each one whose addition keeps the
    estimated wall within ``budget_s`` (all of them when the budget is 0)."""
    if cfg.budget_s <= 0:
        return [True] * len(costs)
    taken: list[tuple[float, int]] = []
    keep = []
    for cost in costs:
        fits = makespan([*taken, cost], cfg.parallel) <= cfg.budget_s
        keep.append(fits)
        if fits:
            taken.append(cost)
    return keep
