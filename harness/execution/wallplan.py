"""What a plan of timing rounds and profiles will cost in wall time, from a run's own timings.

``python -m harness.execution.wallplan RUN_DIR [KEY=VALUE ...]`` learns each variant's costs from
a finished run (its step time, warm-up steps, size, set-up; ``timings.csv``, ``runs.csv``,
``result.json``, ``wall_time.json``) and prints what the same scenarios would take under the
run's own settings or under others (``repeats=5 slices=true window_s=1.5 ...``: :class:`Knobs`).
The run loop uses the same model to decide whether one more round fits the suite's budget
(:func:`fits`, :func:`project`): the units still queued (a scenario not measured yet at this
run's own mean per unit, :func:`unit_prices`), the tail of every profile of the run, and a fair
share kept for the scenarios whose planned rounds are still queued.

The model follows the run loop: nothing measures beside a set-up, so a scenario's timing part is
its set-ups that nobody's measurement hides plus every worker's measured span (warm-up, window,
host probes) plus a hand-over between consecutive measurements; a sliced round sets up all its
processes first (side by side, or one after the other for ``Scenario.setup_alone``), then
measures. Profiles follow the same rule with their own budgets. After the workers: the exports,
the diagnosis and the report, which grow with the number of profiles. The constants below were
read off a reference run's timings (docs/measurement.md), where the model is checked against
two runs.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import pandas as pd

from harness.core import runfolder as rf
from harness.execution.steps import MIN_WARMUP_STEPS, window_steps

__all__ = [
    "Costs",
    "Knobs",
    "Projection",
    "VariantCost",
    "estimate",
    "fits",
    "learn",
    "main",
    "project",
    "unit_prices",
]

#: Seconds from one worker's window end to the next held worker's warm-up (the gate, its
#: progress file, the previous one's exit).
HANDOVER_S = 0.25
#: Seconds a batch's set-up takes beyond its slowest worker's own set-up (process start,
#: the parent seeing it held).
SETUP_SLACK_S = 0.5
#: A sliced round: seconds per hand-over between slices (signals and the socket round trip).
TURN_S = 0.002
#: Seconds after the last worker, once: the tables and the report.
TAIL_FIXED_S = 16.0
#: The tools' scores, after the diagnosis and beside the kernels row.
TAIL_TOOLS_S = 5.0
#: The diagnosis after the last worker: once (the judged tables), per profiled variant on the
#: parent (its rows), and per profiled variant shared by ``harness.diagnose_jobs`` processes
#: (reading its export). The exports themselves are taken during the run.
DIAGNOSIS_FIXED_S = 3.0
DIAGNOSIS_SERIAL_PER_PROFILE_S = 0.17
DIAGNOSIS_PER_PROFILE_S = 0.78


def diagnosis_s(profiles: int, jobs: int) -> float:
    """Seconds of the end-of-run diagnosis of ``profiles`` exports in ``jobs`` processes."""
    per = DIAGNOSIS_SERIAL_PER_PROFILE_S + DIAGNOSIS_PER_PROFILE_S / max(1, jobs)
    return DIAGNOSIS_FIXED_S + per * profiles


def tail_s(profiles: int, jobs: int, kernels_s: float = 0.0) -> float:
    """Seconds after the last worker: the longer of the kernels row (its budget, on a GPU) and
    the diagnosis and tools that run beside it, then the tables and the report."""
    return TAIL_FIXED_S + max(kernels_s, diagnosis_s(profiles, jobs) + TAIL_TOOLS_S)


#: Seconds per profiled scenario beyond its workers' spans and set-ups: its last capture taken,
#: its traced servers closed, the next scenario's first worker held until nsys has written.
PROFILE_SWITCH_S = 4.0


@dataclass(frozen=True, kw_only=True)
class VariantCost:
    """One variant's costs, as a run measured them."""

    scenario: str
    variant: str
    step_s: float
    """Mean timed step (seconds)."""
    profile_step_s: float
    """Mean profiled step (seconds)."""
    setup_s: float
    """A worker's start-up to held: start, imports, CUDA context, set-up (median, seconds)."""
    profile_setup_s: float
    warmup_steps: int
    """Planned warm-up steps (the most any of its workers ran)."""
    warmup_step_s: float = 0.0
    """Mean warm-up step (seconds; the first steps after a set-up run slower than the
    window's); 0: as ``step_s``."""
    steps: int
    """The size's measured steps (``steps_planned``)."""
    probe_s: float = 0.05
    setup_alone: bool = False
    period_steps: int = 1
    sliced: bool = True
    """Its scenario's rounds may be sliced (``Scenario.slice_rounds``)."""

    @property
    def warm_s(self) -> float:
        return self.warmup_step_s or self.step_s


@dataclass(frozen=True, kw_only=True)
class Knobs:
    """The plan's settings that move the wall (each a ``harness.*`` or ``harness.timing.*``
    setting of the same name)."""

    repeats: int = 3
    slices: bool = True
    max_window_s: float | None = 10.0
    window_s: float | None = 1.0
    """A sliced round's window budget (at most ``max_window_s``)."""
    window_min_steps: int = 4
    """A sliced round's fewest measured steps."""
    min_steps: int = 5
    max_warmup_s: float | None = 5.0
    warmup_s: float | None = 1.0
    """A sliced round's warm-up budget (at most ``max_warmup_s``)."""
    warmup_min_steps: int = 2
    profile: bool = True
    profile_max_window_s: float | None = 3.0
    capture_lead_steps: int = 2
    setup_batch: int = 4
    extra_rounds: dict[str, int] = field(default_factory=dict)
    """Rounds added to a scenario beyond ``repeats`` (all its variants)."""
    kernels_s: float = 0.0
    """The kernels row's budget where the budget check counts it (``kernels.budget_s``; the
    estimate from a run folder leaves it out)."""
    diagnose_jobs: int = 1
    """Exports the diagnosis reads at once (``harness.diagnose_jobs``, resolved)."""


@dataclass
class Costs:
    """What a run measured of its variants, by scenario."""

    variants: dict[str, list[VariantCost]]
    knobs: Knobs
    """The run's own settings."""
    measured_s: float | None = None
    """The run's harness wall (``wall_time.json``'s ``total_s``)."""
    profiles_done: int = 0
    """Profiled units that have run (their exports and diagnosis are still to come)."""


def _warm(step_s: float, planned: int, budget: float | None, least: int) -> float:
    """Seconds of a warm-up of ``planned`` steps of ``step_s`` each, ended once past
    ``budget`` after ``least`` steps."""
    if budget is None or step_s <= 0:
        return planned * step_s
    n = min(planned, max(least, math.floor(budget / step_s) + 1))
    return n * step_s


def _at_most(general: float | None, sliced: float | None) -> float | None:
    """A sliced round's budget: its own, at most the general one; None when the general one
    is off (as harness/execution/settings.py applies them)."""
    if general is None:
        return None
    return general if sliced is None else min(general, sliced)


def _span(v: VariantCost, k: Knobs, sliced: bool) -> float:
    """A timing worker's measured span: warm-up, window, host probes."""
    if sliced:
        budget = _at_most(k.max_warmup_s, k.warmup_s)
        warm = _warm(v.warm_s, v.warmup_steps, budget, k.warmup_min_steps)
        window = _at_most(k.max_window_s, k.window_s)
        least = k.window_min_steps
    else:
        warm = _warm(v.warm_s, v.warmup_steps, k.max_warmup_s, MIN_WARMUP_STEPS)
        window, least = k.max_window_s, k.min_steps
    n = window_steps(v.steps, v.step_s, window, least)
    return warm + n * v.step_s + 2 * v.probe_s


def _round_s(vs: Sequence[VariantCost], k: Knobs, sliced: bool) -> float:
    """One timing round of ``vs``: set-ups nobody hides, then every measured span."""
    if not vs:
        return 0.0
    spans = sum(_span(v, k, sliced) for v in vs)
    if sliced:
        setups = [v.setup_s for v in vs]
        alone = any(v.setup_alone for v in vs)
        batches = [setups[i : i + k.setup_batch] for i in range(0, len(setups), k.setup_batch)]
        setup = sum(setups) if alone else sum(max(b) for b in batches)
        turns = 2 * len(vs) * max(1, round(5 * sum(_span(v, k, True) for v in vs) / len(vs)))
        return setup + SETUP_SLACK_S + spans + turns * TURN_S + HANDOVER_S
    return spans + len(vs) * HANDOVER_S


def _backtoback_setups(vs: Sequence[VariantCost], k: Knobs, rounds: int) -> float:
    """The set-ups of back-to-back rounds that no measurement hides: a scenario's units run
    in batches of ``setup_batch`` (one by one where it sets up alone), each batch waiting for
    its slowest set-up."""
    units = [v for r in range(rounds) for v in (vs if r % 2 == 0 else list(reversed(vs)))]
    if any(v.setup_alone for v in vs):
        return sum(v.setup_s for v in units)
    return sum(
        max(v.setup_s for v in units[i : i + k.setup_batch]) + SETUP_SLACK_S
        for i in range(0, len(units), k.setup_batch)
    )


def _profiles_s(vs: Sequence[VariantCost], k: Knobs) -> float:
    """A scenario's profiles: one worker each, the next set up while the last one's capture is
    taken; each measures its warm-up, lead steps and window."""
    total = 0.0
    for i, v in enumerate(vs):
        step = v.warm_s * v.profile_step_s / v.step_s if v.step_s > 0 else v.warm_s
        warm = _warm(step, v.warmup_steps, k.max_warmup_s, MIN_WARMUP_STEPS)
        n = window_steps(v.steps, v.profile_step_s, k.profile_max_window_s, k.min_steps)
        span = warm + (k.capture_lead_steps + n) * v.profile_step_s + 2 * v.probe_s
        total += span + (v.profile_setup_s + SETUP_SLACK_S if i != 1 else HANDOVER_S)
    return total


def _sliced(vs: Sequence[VariantCost], k: Knobs) -> bool:
    """Whether the scenario's rounds are sliced: the run slices, and the scenario allows it."""
    return k.slices and all(v.sliced for v in vs)


def _one_round(vs: Sequence[VariantCost], k: Knobs) -> float:
    """One more timing round of ``vs`` as the run would time it, set-ups included."""
    if _sliced(vs, k):
        return _round_s(vs, k, True)
    return _round_s(vs, k, False) + _backtoback_setups(vs, k, 1)


def scenario_s(vs: Sequence[VariantCost], k: Knobs) -> dict[str, float]:
    """A scenario's timing rounds and profiles (seconds)."""
    rounds = k.repeats + k.extra_rounds.get(vs[0].scenario, 0) if vs else 0
    if _sliced(vs, k):
        timing = rounds * _round_s(vs, k, True)
    else:
        timing = rounds * _round_s(vs, k, False) + _backtoback_setups(vs, k, rounds)
    profile = _profiles_s(vs, k) + PROFILE_SWITCH_S if k.profile and vs else 0.0
    return {"timing_s": timing, "profile_s": profile}


def estimate(costs: Costs, knobs: Knobs | None = None) -> pd.DataFrame:
    """One row per scenario (``timing_s``, ``profile_s``) and a ``tail`` row (exports,
    diagnosis, report); their sum is the predicted harness wall."""
    k = knobs or costs.knobs
    rows = [{"scenario": s, **scenario_s(vs, k)} for s, vs in costs.variants.items()]
    n_prof = sum(len(vs) for vs in costs.variants.values()) if k.profile else 0
    rows.append({"scenario": "tail", "timing_s": 0.0,
                 "profile_s": tail_s(n_prof, k.diagnose_jobs, k.kernels_s)})  # fmt: skip
    out = pd.DataFrame(rows)
    out["total_s"] = out["timing_s"] + out["profile_s"]
    return out


def total_s(costs: Costs, knobs: Knobs | None = None) -> float:
    return float(estimate(costs, knobs)["total_s"].sum())


# -- learning a run's costs -----------------------------------------------------------------------


def _knobs_of(manifest: dict[str, Any]) -> Knobs:
    h = (manifest.get("config") or {}).get("harness") or {}
    t = h.get("timing") or {}
    nsys = (manifest.get("config") or {}).get("nsys") or {}
    base = Knobs()
    return replace(
        base,
        repeats=int(h.get("repeats", base.repeats)),
        slices=bool(t.get("slices", False)),  # a run made before the switch: back to back
        max_window_s=h.get("max_window_s", base.max_window_s),
        window_s=t.get("window_s", base.window_s),
        window_min_steps=int(t.get("min_steps", base.window_min_steps)),
        min_steps=int(h.get("min_steps", base.min_steps)),
        max_warmup_s=h.get("max_warmup_s", base.max_warmup_s),
        warmup_s=t.get("warmup_s", base.warmup_s),
        warmup_min_steps=int(t.get("warmup_min_steps", base.warmup_min_steps)),
        profile=bool(nsys.get("enabled", True)),
        profile_max_window_s=h.get("profile_max_window_s", base.profile_max_window_s),
        capture_lead_steps=int(nsys.get("capture_lead_steps", base.capture_lead_steps)),
        setup_batch=int(h.get("setup_batch", base.setup_batch)),
    )


def _start_s(rows: pd.DataFrame) -> float:
    cols = ["startup_s", "import_s", "cuda_init_s", "setup_s"]
    per = rows[[c for c in cols if c in rows]].fillna(0.0).sum(axis=1)
    return float(per.median()) if len(per) else 1.0


def learn(run_dir: Path, found: dict[str, Any] | None = None) -> Costs:
    """Each variant's costs from a finished (or partly finished) run folder."""
    run_dir = Path(run_dir)
    manifest = rf.read_json(rf.manifest_path(run_dir)) or {}
    table = rf.table_path(run_dir, "timings")
    timings = pd.read_csv(table) if table.is_file() else _timings_of_results(run_dir)
    runs = pd.read_csv(rf.table_path(run_dir, "runs"))
    timings = timings[timings["wall_s"].fillna(0) > 0]
    out: dict[str, list[VariantCost]] = {}
    for row in runs.itertuples():
        if not (isinstance(row.step_ms_mean, float) and math.isfinite(row.step_ms_mean)):
            continue
        mine = timings[(timings["scenario"] == row.scenario) & (timings["variant"] == row.variant)]
        timed = mine[mine["phase"].astype(str).str.startswith(rf.TIMING_PREFIX)]
        prof = mine[mine["phase"] == rf.PROFILE]
        warm, steps = _result_steps(run_dir, row.scenario, row.variant)
        per_warm = (timed["warmup_s"] / warm).median() if len(timed) else 0.0
        scen = (found or {}).get(row.scenario)
        prof_ms = row.profile_step_ms_mean if pd.notna(row.profile_step_ms_mean) else None
        cost = VariantCost(
            scenario=row.scenario, variant=row.variant, step_s=row.step_ms_mean / 1e3,
            profile_step_s=(prof_ms or row.step_ms_mean) / 1e3, setup_s=_start_s(timed),
            profile_setup_s=_start_s(prof) if len(prof) else _start_s(timed),
            warmup_steps=warm, warmup_step_s=float(per_warm or 0.0), steps=steps,
            probe_s=float(timed["probe_s"].median() / 2) if len(timed) else 0.05,
            setup_alone=bool(getattr(scen, "setup_alone", False)),
            sliced=bool(getattr(scen, "slice_rounds", True)),
        )  # fmt: skip
        out.setdefault(row.scenario, []).append(cost)
    wall_file = run_dir / "wall_time.json"
    wall = rf.read_json(wall_file) if wall_file.is_file() else {}
    return Costs(variants=out, knobs=_knobs_of(manifest), measured_s=(wall or {}).get("total_s"),
                 profiles_done=int((timings["phase"] == rf.PROFILE).sum()))  # fmt: skip


#: The worker's own timing parts the model reads (result.json's ``timing``).
_PARTS = ("import_s", "cuda_init_s", "setup_s", "warmup_s", "probe_s")


def _timings_of_results(run_dir: Path) -> pd.DataFrame:
    """What the model reads of timings.csv, from the result files (a run still running has
    no timings.csv yet)."""
    rows = []
    for path in rf.result_files(run_dir):
        try:
            res = rf.read_json(path) or {}
        except rf.CorruptFileError:
            continue
        timing = res.get("timing") or {}
        row = {"scenario": res.get("scenario"), "variant": res.get("variant"),
               "phase": res.get("phase"), "wall_s": 1.0,
               "startup_s": timing.get("launch_to_main_s")}  # fmt: skip
        row.update({k: timing.get(k) for k in _PARTS})
        rows.append(row)
    return pd.DataFrame(rows, columns=["scenario", "variant", "phase", "wall_s", "startup_s",
                                       *_PARTS])  # fmt: skip


def _result_steps(run_dir: Path, scenario: str, variant: str) -> tuple[int, int]:
    """(planned warm-up steps, the size's steps) from its timing rounds' result.json: the
    most warm-up steps any ran, and ``steps_planned``."""
    warm, steps = 0, 0
    for folder in rf.phase_dirs(run_dir, scenario, variant):
        if not rf.is_timing(folder.name):
            continue
        try:
            res = rf.read_result(folder) or {}
        except rf.CorruptFileError:
            continue
        warm = max(warm, int(res.get("warmup_steps") or 0))
        steps = max(steps, int(res.get("steps_planned") or res.get("steps") or 0))
    return max(1, warm), max(1, steps)


# -- the run loop's budget check -------------------------------------------------------------------


#: Seconds a queued unit of a scenario the run has not measured yet is taken to cost on the
#: critical path (a timing worker, a profiled one) while no scenario of the run is measured yet
#: (a reference run's means, docs/measurement.md); after that, :func:`unit_prices`.
UNKNOWN_TIMING_UNIT_S = 5.0
UNKNOWN_PROFILE_UNIT_S = 6.5
#: The factor on the run's own mean per unit when it prices a scenario it has not measured:
#: scenarios differ (one unit of a data-loading scenario costs several of a GPU-bound one), and
#: under-pricing them costs the budget while over-pricing only defers rounds to later scenarios.
UNKNOWN_SAFETY = 1.25


def unit_prices(costs: Costs, knobs: Knobs) -> tuple[float, float]:
    """(timing, profile) seconds per unit of a scenario the run has not measured: the model's
    mean per unit over the scenarios it has, times :data:`UNKNOWN_SAFETY`; the constants while
    it has none."""
    known = [vs for vs in costs.variants.values() if vs]
    units = sum(len(vs) for vs in known)
    if not units:
        return UNKNOWN_TIMING_UNIT_S, UNKNOWN_PROFILE_UNIT_S
    timing = sum(_one_round(vs, knobs) for vs in known) / units
    profile = sum(_profiles_s(vs, knobs) + PROFILE_SWITCH_S for vs in known) / units
    return UNKNOWN_SAFETY * timing, UNKNOWN_SAFETY * profile


def _unsliced_more_s(k: Knobs) -> float:
    """What a unit that declines slicing (``Scenario.slice_rounds``) may take beyond a sliced
    one: its window and warm-up run to the general budgets, not the sliced round's."""
    if not k.slices:
        return 0.0
    window = (k.max_window_s or 0.0) - (_at_most(k.max_window_s, k.window_s) or 0.0)
    warm = (k.max_warmup_s or 0.0) - (_at_most(k.max_warmup_s, k.warmup_s) or 0.0)
    return window + warm


@dataclass(frozen=True)
class Projection:
    """The run's projected wall at a budget check, by part (seconds)."""

    elapsed_s: float
    round_s: float
    """The round asked for."""
    rest_s: float
    """What is still queued (or started and not ended)."""
    tail_s: float
    """After the workers: exports, diagnosis, report (every profile of the run), the kernels
    row (:attr:`Knobs.kernels_s`)."""
    reserve_s: float
    """The fair share: as many added rounds for every scenario whose planned rounds are still
    queued as the asking one would have."""

    @property
    def wall_s(self) -> float:
        """The run's wall with the round and nothing else added."""
        return self.elapsed_s + self.round_s + self.rest_s + self.tail_s

    @property
    def checked_s(self) -> float:
        """The number held against the budget: the wall and the reserve."""
        return self.wall_s + self.reserve_s


def project(
    costs: Costs,
    knobs: Knobs,
    elapsed_s: float,
    scenario: str,
    variants: Sequence[str],
    queue: Sequence[Any],
    extra: int = 1,
    found: Mapping[str, Any] | None = None,
) -> Projection:
    """The run's wall with one more round of ``variants`` of ``scenario`` (its ``extra``-th
    added one), and the fair share it must leave (:class:`Projection`); ``found``: the
    scenarios (a unit of one not measured yet that declines slicing costs more)."""
    vs = [v for v in costs.variants.get(scenario, []) if v.variant in variants]
    t_mean, p_unit = unit_prices(costs, knobs)

    def t_unit(name: str) -> float:
        sliced = getattr((found or {}).get(name), "slice_rounds", True)
        return t_mean + (0.0 if sliced else _unsliced_more_s(knobs))

    rest, n_prof, profiled = 0.0, 0, set()
    rounds: dict[str, set[str]] = {}
    unknown: dict[str, set[str]] = {}
    planned: set[str] = set()
    for unit in queue:
        known = costs.variants.get(unit.scenario)
        if rf.is_profile(unit.phase):
            n_prof += 1
            if known and unit.scenario not in profiled:
                rest += _profiles_s(known, knobs) + PROFILE_SWITCH_S
            profiled.add(unit.scenario)
            rest += 0.0 if known else p_unit
        elif rf.is_timing(unit.phase):
            rounds.setdefault(unit.scenario, set()).add(unit.phase)
            if (rf.timing_round(unit.phase) or 0) <= knobs.repeats:
                planned.add(unit.scenario)
            if not known:
                rest += t_unit(unit.scenario)
                unknown.setdefault(unit.scenario, set()).add(unit.variant)
    reserve = 0.0
    for name, phases in rounds.items():
        share = extra if name in planned and name != scenario else 0
        if name in unknown:
            reserve += share * len(unknown[name]) * t_unit(name)
            continue
        one = _one_round(costs.variants[name], knobs)
        rest += len(phases) * one
        reserve += share * one
    tail = tail_s(costs.profiles_done + n_prof, knobs.diagnose_jobs, knobs.kernels_s)
    return Projection(elapsed_s=elapsed_s, round_s=_one_round(vs, knobs), rest_s=rest,
                      tail_s=tail, reserve_s=reserve)  # fmt: skip


def fits(
    costs: Costs,
    knobs: Knobs,
    elapsed_s: float,
    budget_s: float | None,
    scenario: str,
    variants: Sequence[str],
    queue: Sequence[Any],
    extra: int = 1,
    found: Mapping[str, Any] | None = None,
) -> tuple[bool, float]:
    """Whether one more round of ``variants`` of ``scenario`` (its ``extra``-th added one) fits
    ``budget_s``: the run's wall so far, that round, what is still queued (``queue``: units),
    the tail, and the fair share left to the scenarios still queued (:func:`project`).
    (fits, the number held against the budget)."""
    p = project(costs, knobs, elapsed_s, scenario, variants, queue, extra, found)
    return (budget_s is None or p.checked_s <= budget_s), p.checked_s


def knobs_of_config(cfg: Any, gpu: bool = False) -> Knobs:
    """The :class:`Knobs` of a run's composed config (:class:`harness.core.config.SuiteConfig`);
    on a GPU the kernels row's budget counts in the tail."""
    from dataclasses import asdict

    k = _knobs_of({"config": {"harness": asdict(cfg.harness), "nsys": asdict(cfg.nsys)}})
    k = replace(k, diagnose_jobs=cfg.harness.diagnosis_processes())
    kernels = getattr(cfg, "kernels", None)
    if gpu and kernels is not None and kernels.enabled and k.profile:
        k = replace(k, kernels_s=float(kernels.budget_s or 0.0))
    return k


# -- the command line -------------------------------------------------------------------------------


def _parse(pairs: Sequence[str], base: Knobs) -> Knobs:
    names = {f.name: f for f in fields(Knobs)}
    changes: dict[str, Any] = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        key = key.removeprefix("harness.timing.").removeprefix("harness.")
        if key not in names or key == "extra_rounds":
            raise SystemExit(f"unknown knob {key!r}; knobs: {', '.join(names)}")
        if value.lower() in ("null", "none"):
            changes[key] = None
        elif value.lower() in ("true", "false"):
            changes[key] = value.lower() == "true"
        else:
            changes[key] = float(value) if "." in value else int(value)
    return replace(base, **changes)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.execution.wallplan", description=__doc__)
    ap.add_argument("run", type=Path, help="a run folder (timings.csv, runs.csv, manifest.json)")
    ap.add_argument("knobs", nargs="*", help="KEY=VALUE: the plan to price (default: the run's)")
    args = ap.parse_args(argv)
    from harness.core.config import discover_scenarios

    costs = learn(args.run, discover_scenarios())
    own = total_s(costs)
    plan = _parse(args.knobs, costs.knobs)
    table = estimate(costs, plan)
    print(table.round(1).to_string(index=False))
    said = f" (measured {costs.measured_s:.0f} s)" if costs.measured_s else ""
    print(f"\nthe run's own plan: {own:.0f} s predicted{said}")
    print(f"this plan: {table['total_s'].sum():.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
