"""Which kernels each variant's ncu run profiles, and which it reads from another variant's.

ncu profiles a kernel by name (``--kernel-name``), one launch of each of its launch
configurations (name, grid, block) inside the window, and every profiled launch costs its
replay passes, taken in turn with every other ncu process: the row's time is mostly the
number of profiled launches (docs/kernels.md, "Time"). So, per variant:

- the names it would profile alone: by their heaviest configuration in its plan, each with
  all of its configurations that launch every step (ncu profiles them all; one that runs less
  often may not launch inside a one-step window and is not counted), while they fit within
  ``kernels.top`` launches, until they hold ``kernels.coverage`` of the window's kernel time;
- a name whose configurations another variant of the same scenario measures
  (``kernels.reuse``) is read from there: the same kernel binary on the same grid and block in
  the same scenario is the same work, and measuring it twice buys nothing; the others are its
  own run's.

A variant whose names are all measured elsewhere runs no ncu process; one that may not profile
kernels of its own (``new=False``: a fix of a scenario whose class the row does not witness)
reports only what it can read. The variants of a scenario are taken in the row's priority
order, so the baseline measures what it shares with its fixes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pandas as pd

from harness.core.kernels_config import KernelsConfig
from harness.kernels.parse import dims_key
from harness.kernels.plan import Plan

__all__ = ["Choice", "Chooser", "ConfigKey", "choose", "config_key"]

#: (name as ncu is given it, grid, block): what identifies a launch configuration.
ConfigKey = tuple[str, tuple[int, ...], tuple[int, ...]]


def config_key(name: object, grid: object, block: object) -> ConfigKey:
    """A launch configuration's key from a plan row's or an ncu row's three fields."""
    return (str(name), dims_key(grid), dims_key(block))


@dataclass
class Choice:
    """One variant's part of the row."""

    label: str
    """``scenario/variant``."""
    names: list[str] = field(default_factory=list)
    """Kernel names its own ncu run profiles (none: it runs no ncu process)."""
    launches: int = 0
    """Launches its own run profiles: its names' configurations in one window step."""
    rows: pd.DataFrame = field(default_factory=pd.DataFrame)
    """The plan rows it reports, with ``measured_in``: the variant whose ncu run measures
    each (its own label, or another variant's of the same scenario)."""

    @property
    def reused(self) -> int:
        """Reported configurations measured by another variant."""
        if self.rows.empty:
            return 0
        return int((self.rows["measured_in"] != self.label).sum())


class Chooser:
    """Choices in the row's priority order: each variant chosen against what the accepted
    variants of its scenario measure (an over-budget variant is never accepted, so nothing is
    read from a run that does not happen)."""

    def __init__(self, cfg: KernelsConfig) -> None:
        self.cfg = cfg
        self._measured: dict[str, dict[ConfigKey, str]] = {}

    def choice(self, scenario: str, label: str, plan: Plan, *, new: bool = True) -> Choice:
        """``label``'s choice against the accepted variants of ``scenario``; ``new=False``:
        only what they measure, no kernel of its own."""
        known = self._measured.get(scenario, {}) if self.cfg.reuse else {}
        return _one(label, plan, known, self.cfg, self.cfg.top if new else 0)

    def accept(self, scenario: str, plan: Plan, choice: Choice) -> None:
        """``choice``'s own run will happen: its configurations can be read from it."""
        known = self._measured.setdefault(scenario, {})
        for r in _configs_of(plan, choice.names).itertuples(index=False):
            known.setdefault(config_key(r.mangled, r.grid, r.block), choice.label)


def choose(plans: Sequence[tuple[str, str, Plan]], cfg: KernelsConfig) -> dict[str, Choice]:
    """Each variant's :class:`Choice`, every one accepted; ``plans``: (scenario, label, plan)
    in the row's priority order."""
    chooser = Chooser(cfg)
    out: dict[str, Choice] = {}
    for scenario, label, plan in plans:
        out[label] = chooser.choice(scenario, label, plan)
        chooser.accept(scenario, plan, out[label])
    return out


def _configs_of(plan: Plan, names: Sequence[str]) -> pd.DataFrame:
    """The plan's configurations of ``names`` that launch in every window step."""
    rows = plan.kernels
    if rows.empty or not names:
        return rows.iloc[0:0]
    return rows[rows["mangled"].isin(list(names)) & _steady(rows)]


def _steady(rows: pd.DataFrame) -> pd.Series:
    """Configurations that launch at least once per step (so inside a one-step window)."""
    return pd.to_numeric(rows["launches_per_step"], errors="coerce").fillna(0.0) >= 1.0


def _one(
    label: str, plan: Plan, known: dict[ConfigKey, str], cfg: KernelsConfig, top: int
) -> Choice:
    """One variant's choice: the names it would profile alone (heaviest first, whole names
    within ``cfg.top`` launches, until ``cfg.coverage``); each name whose configurations its
    scenario already measures (``known``) is read from there, the others are its own run's,
    at most ``top`` launches of them."""
    rows = plan.kernels
    choice = Choice(label=label)
    if rows.empty:
        choice.rows = rows.assign(measured_in=pd.Series(dtype=str))
        return choice
    steady = _steady(rows)
    keys = [config_key(r.mangled, r.grid, r.block) for r in rows.itertuples(index=False)]
    taken: dict[int, str] = {}  # row position -> measured_in
    for name in _alone(rows, steady, cfg):
        mine = [i for i in range(len(rows)) if rows["mangled"].iloc[i] == name and steady.iloc[i]]
        sources = {known.get(keys[i]) for i in mine}
        if None not in sources:
            taken.update({i: known[keys[i]] for i in mine})
        elif choice.launches + len(mine) <= top:
            choice.names.append(name)
            choice.launches += len(mine)
            taken.update(dict.fromkeys(mine, label))
    picked = sorted(taken)
    choice.rows = rows.iloc[picked].assign(measured_in=[taken[i] for i in picked])
    return choice


def _alone(rows: pd.DataFrame, steady: pd.Series, cfg: KernelsConfig) -> list[str]:
    """The names a variant profiles alone: by their heaviest configuration, each with all its
    steady configurations while they fit in ``cfg.top`` launches, until ``cfg.coverage``."""
    cost = rows[steady].groupby("mangled").size()
    share = rows[steady].groupby("mangled")["share"].sum()
    names: list[str] = []
    launches, covered = 0, 0.0
    for name in rows.loc[steady, "mangled"].drop_duplicates():
        if covered >= cfg.coverage:
            break
        if launches + int(cost[name]) > cfg.top:
            continue
        names.append(str(name))
        launches += int(cost[name])
        covered += float(share[name])
    return names
