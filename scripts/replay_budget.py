"""Replay a finished run's added-round budget checks offline: at each decision of its
``rounds.json``, the old projection (unmeasured units at fixed prices, the tail of the queued
profiles only) and :func:`harness.execution.wallplan.project`, against what the run actually
had left without its added rounds.

``python scripts/replay_budget.py RUN_DIR [RUN_DIR ...]``

How a decision is rebuilt from the finished folder: its time is the end of the scenario's
round (timings.csv ``ended_at``); the clock's zero is the last worker's end less the workers'
span of the call that ran them (``wall_time.json``'s ``workers_calls_s``, else ``workers_s``);
the scenarios known then are those with a unit ended; their
costs are learned from the whole run (a profile not yet run is priced at the timed step, as
the run loop does); the queue is every unit launched later (an added round only when a
decision before this one added it), and, for the new projection, the units started and not
ended (the next scenario's set-ups). What remained is ``total_s`` less the decision's time,
(every call's, ``all_calls_s``: a resumed tail counts) less the time only added rounds' workers ran (their [launch, end] spans that no planned
unit's span covers: a lower bound on their cost, so what remained is if anything too high).
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.core import runfolder as rf
from harness.core.config import discover_scenarios
from harness.core.runfolder import Unit
from harness.execution import wallplan as wp

GRID_S = 0.01
#: The tail the check before the change priced: 12 s, and 2 s per profile of the queue.
OLD_TAIL_FIXED_S, OLD_TAIL_PER_PROFILE_S = 12.0, 2.0


def old_projection(costs: wp.Costs, k: wp.Knobs, elapsed: float, scenario: str,
                   variants: list[str], queue: list[Unit]) -> float:  # fmt: skip
    """The budget check before the change (fixed prices, the queued profiles' tail)."""
    vs = [v for v in costs.variants.get(scenario, []) if v.variant in variants]
    rest, n_prof, profiled, rounds = 0.0, 0, set(), {}
    for unit in queue:
        known = costs.variants.get(unit.scenario)
        if rf.is_profile(unit.phase):
            n_prof += 1
            if known and unit.scenario not in profiled:
                rest += wp._profiles_s(known, k) + wp.PROFILE_SWITCH_S
            profiled.add(unit.scenario)
            rest += 0.0 if known else 6.5
        elif rf.is_timing(unit.phase):
            if known:
                rounds.setdefault(unit.scenario, set()).add(unit.phase)
            else:
                rest += 5.0
    for name, phases in rounds.items():
        rest += len(phases) * wp._one_round(costs.variants[name], k)
    return (
        elapsed + wp._one_round(vs, k) + rest + OLD_TAIL_FIXED_S + OLD_TAIL_PER_PROFILE_S * n_prof
    )


def _only_extra_s(t: pd.DataFrame, extra: pd.Series, after: float) -> float:
    """Seconds after ``after`` when an added round's worker ran and no planned one did."""
    end = float(t["ended_at"].max())
    grid = np.arange(after, end, GRID_S)
    ex, pl = np.zeros(len(grid), bool), np.zeros(len(grid), bool)
    for row, is_extra in zip(t.itertuples(), extra, strict=True):
        span = (grid >= row.launched_at) & (grid < row.ended_at)
        if is_extra:
            ex |= span
        else:
            pl |= span
    return float((ex & ~pl).sum() * GRID_S)


def _known_costs(full: wp.Costs, t: pd.DataFrame, at: float) -> wp.Costs:
    done = t[t["ended_at"] <= at]
    profiled = set(done.loc[done["phase"] == rf.PROFILE, "scenario"])
    variants = {}
    for name in set(done["scenario"]):
        vs = full.variants.get(name, [])
        if name not in profiled:
            vs = [replace(v, profile_step_s=v.step_s, profile_setup_s=v.setup_s) for v in vs]
        variants[name] = vs
    return replace(full, variants=variants, profiles_done=int((done["phase"] == rf.PROFILE).sum()))


def workers_span(wall: dict[str, Any]) -> float:
    """The workers' span of the last call that ran workers (``workers_calls_s``; a resumed call
    that only ran the tail reads ~0 s), else ``workers_s``."""
    ran = [float(v) for v in (wall.get("workers_calls_s") or {}).values() if float(v) > 1.0]
    return ran[-1] if ran else float(wall["workers_s"])


def replay(run: Path) -> pd.DataFrame:
    """One row per budget-checked decision of ``run``."""
    found = discover_scenarios()
    full = wp.learn(run, found)
    manifest = json.loads((run / "manifest.json").read_text())
    kern = (manifest.get("config") or {}).get("kernels") or {}
    k = full.knobs
    if kern.get("enabled") and manifest.get("device") == "cuda":
        k = replace(k, kernels_s=float(kern.get("budget_s") or 0.0))
    wall = json.loads((run / "wall_time.json").read_text())
    record = json.loads((run / "rounds.json").read_text())
    budget = (manifest["config"]["harness"].get("timing") or {}).get("budget_s")
    t = pd.read_csv(run / "timings.csv")
    t = t[t["launched_at"].notna() & (t["wall_s"].fillna(0) > 0)].reset_index(drop=True)
    workers_s = workers_span(wall)
    zero = float(t["ended_at"].max()) - workers_s
    t["launched_at"] -= zero
    t["ended_at"] -= zero
    decisions = record["decisions"]
    added_by = {}  # (scenario, phase) -> index of the decision that added it
    for i, d in enumerate(decisions):
        if d["added"]:
            added_by[(d["scenario"], rf.timing_phase(d["after_round"] + 1))] = i
    rows: list[dict[str, Any]] = []
    for i, d in enumerate(decisions):
        if d["why"] not in ("added", "budget"):
            continue
        s, r = d["scenario"], d["after_round"]
        at = float(
            t.loc[(t["scenario"] == s) & (t["phase"] == rf.timing_phase(r)), "ended_at"].max()
        )
        idx = [added_by.get((row.scenario, row.phase), -1) for row in t.itertuples()]
        later = pd.Series([j >= i for j in idx])  # added here or later: not in this queue
        queued = t[(t["launched_at"] > at) & ~later]
        live = t[(t["launched_at"] <= at) & (t["ended_at"] > at) & (t["scenario"] != s) & ~later]
        to_unit = lambda df: [Unit(x.scenario, x.variant, x.phase) for x in df.itertuples()]  # noqa: E731
        wide = [p for p, w in d["widths"].items() if w is None or w > record["target_half_width"]]
        names = d["added"] or sorted({v for p in wide for v in p.split("/")})
        costs = _known_costs(full, t, at)
        old = old_projection(costs, k, at, s, names, to_unit(queued))
        pending = [*to_unit(live), *to_unit(queued)]
        new = wp.project(costs, k, at, s, names, pending, r + 1 - k.repeats, found)
        extra_s = _only_extra_s(t, pd.Series([j >= i for j in idx]), at)
        total_s = float(wall.get("all_calls_s") or wall["total_s"])
        remained = total_s - at - extra_s
        run_tail = total_s - workers_s
        rows.append({
            "scenario": s, "round": r, "why": d["why"], "elapsed_s": at,
            "recorded_s": d["projected_s"], "old_s": old,
            "old_rest_s": old - at - new.round_s, "new_rest_s": new.rest_s + new.tail_s,
            "remained_s": remained, "new_s": new.wall_s, "checked_s": new.checked_s,
            "tail_s": new.tail_s, "run_tail_s": run_tail,
            "workers/remained": new.rest_s / (remained - run_tail),
            "new_fits": budget is None or new.checked_s <= budget,
        })  # fmt: skip
    out = pd.DataFrame(rows)
    out["old/remained"] = out["old_rest_s"] / out["remained_s"]
    out["new/remained"] = out["new_rest_s"] / out["remained_s"]
    return out


def main(argv: list[str]) -> int:
    for arg in argv:
        table = replay(Path(arg))
        print(f"{arg}:")
        print(table.round(2).to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
