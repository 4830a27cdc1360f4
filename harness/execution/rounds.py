"""Rounds where the noise is: after a scenario's last planned timing round, one more round of the
variants whose intervals are still wide, while the suite's time budget allows.

Why: a GPU-bound pair repeats within 1% and its interval is tight after the fewest rounds
(``harness.repeats``); a host-bound pair on a lent guest needs more rounds for the same width.
Rounds cost the same whichever pair they serve, so they go to the pairs that need them
(Kalibera and Jones, "Rigorous benchmarking in reasonable time", ISMM 2013: repetitions at each
level sized by where the variance is). A pair is the ratio a table reports: each variant
against the baseline (runs.csv's speedup) and against what removes the scenario's cause
(diagnosis.csv's measured saving; runs.csv's share of ``ideal``). A round is added while one of
them is wider than ``harness.timing.target_half_width``, up to ``max_rounds``, and only with
the pair's two variants (its other variants are not timed again); the budget check is
:func:`harness.execution.wallplan.fits`.

The check spreads the rounds over the run rather than giving them to whichever scenario runs
first: a scenario's k-th added round must leave room for k added rounds of every scenario whose
planned rounds are still queued (a fair share, :func:`harness.execution.wallplan.project`), and
the scenarios not measured yet are priced from what this run has measured so far, not from
fixed constants, so the early checks are neither refused by an inflated projection nor
allowed to spend what the later scenarios need. What the later ones leave unused (their pairs
narrow) is there for the last ones, and for the earlier ones it refused: where a scenario gets
no round, one refused for the budget before is asked again, widest pair first (``revisited``).

Every decision is recorded (:attr:`MoreRounds.decisions`, ``rounds.json`` in the run folder),
with the half-widths it read.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.core import runfolder as rf
from harness.core.atomic import write_json
from harness.core.results import read_variant
from harness.core.runfolder import Unit
from harness.core.stats import half_width, paired_ratio_ci, paired_rounds
from harness.execution.plan import round_order
from scenarios import Scenario

__all__ = ["Decision", "MoreRounds", "pairs_of", "widths"]

#: The run folder's record of the added rounds.
ROUNDS_FILE = "rounds.json"


def pairs_of(scen: Scenario, variants: Sequence[str]) -> list[tuple[str, str]]:
    """The scenario's reported ratios among ``variants``, as (numerator, denominator) of mean
    step times: the baseline over each other variant, and each variant's removal (a variant,
    not a measured limit) over it."""
    base = scen.baseline.name
    out = [(base, v) for v in variants if v != base and base in variants]
    for v in variants:
        by = scen.removal_for(v)
        if by != v and by in variants and (by, v) not in out and (v, by) not in out:
            out.append((by, v))
    return out


def widths(run_dir: Path, scen: Scenario, variants: Sequence[str]) -> dict[str, float]:
    """Each pair's interval half-width (``num/den`` -> sqrt(high / low) - 1) from the
    variants' result files; infinite where one round pairs, NaN where none does (a variant
    that failed in every round so far: another round would not narrow what was never
    measured)."""
    timed = {v: read_variant(run_dir, scen.name, v) for v in variants}
    out = {}
    for num, den in pairs_of(scen, variants):
        a, b = timed[num].rounds, timed[den].rounds
        n = len(paired_rounds(a, b))
        if n < 2:
            out[f"{num}/{den}"] = float("inf") if n else float("nan")
            continue
        _, lo, hi = paired_ratio_ci(a, b)
        out[f"{num}/{den}"] = half_width(lo, hi)
    return out


@dataclass
class Decision:
    """What was decided after a scenario's round."""

    scenario: str
    after_round: int
    widths: dict[str, float]
    added: list[str] = field(default_factory=list)
    """The variants of the added round (empty: none added)."""
    why: str = ""
    """``narrow`` (every pair within the target), ``unmeasured`` (no pair wider than the
    target, and one with no round paired: a variant failed in each), ``max_rounds``,
    ``budget``, ``added``, or
    ``revisited`` (a round for a scenario refused for the budget earlier, where it fits now)."""
    projected_s: float | None = None
    """The budget check's number: the run's projected wall with the added round, and the fair
    share kept for the scenarios still queued (:func:`harness.execution.wallplan.project`)."""


class MoreRounds:
    """Decides, after each scenario's last round so far, whether it gets one more."""

    def __init__(
        self,
        *,
        run_dir: Path,
        found: dict[str, Scenario],
        variants: Callable[[str], list[str]],
        target: float,
        planned: int,
        max_rounds: int,
        fits: Callable[[str, list[str], Sequence[Unit], int], tuple[bool, float | None]],
        measure: Callable[[Path, Scenario, Sequence[str]], dict[str, float]] | None = None,
    ) -> None:
        self.run_dir = run_dir
        self.found = found
        self.variants = variants
        self.target = target
        self.planned = planned
        """The rounds every scenario gets (``harness.repeats``): none is added before them."""
        self.max_rounds = max_rounds
        self.fits = fits
        """(scenario, variants of the round, the units still queued, which added round it is)
        -> (whether the round fits the budget, the number held against it)."""
        self.measure = measure or widths
        """(run folder, scenario, variants) -> each pair's half-width (:func:`widths`)."""
        self.decisions: list[Decision] = []

    def after(self, scenario: str, phase: str, queue: Sequence[Unit]) -> list[Unit]:
        """The units of one more round of ``scenario`` after its timing round ``phase``, or,
        where it gets none, of a scenario refused for the budget earlier (:meth:`_revisit`), or
        none (more rounds queued, every pair narrow, out of rounds or budget)."""
        r = rf.timing_round(phase)
        if r is None or r < self.planned or self._later(scenario, r, queue):
            return []
        decision = self._decide(scenario, r, queue)
        if not decision.added:
            decision = self._revisit(scenario, queue) or decision
        nxt = rf.timing_phase(decision.after_round + 1)
        return [Unit(decision.scenario, v, nxt) for v in decision.added]

    def _decide(self, scenario: str, r: int, queue: Sequence[Unit]) -> Decision:
        """Whether ``scenario`` gets a round after its round ``r`` (recorded)."""
        names = self.variants(scenario)
        got = self.measure(self.run_dir, self.found[scenario], names)
        chosen = self._wide(names, got)
        decision = Decision(scenario=scenario, after_round=r, widths=got)
        if not chosen:
            decision.why = "unmeasured" if any(math.isnan(w) for w in got.values()) else "narrow"
        elif r >= self.max_rounds:
            decision.why = "max_rounds"
        else:
            ok, projected = self.fits(scenario, chosen, queue, r + 1 - self.planned)
            decision.projected_s = projected
            decision.why = "added" if ok else "budget"
            if ok:
                decision.added = round_order(chosen, r + 1)
        self.decisions.append(decision)
        self.write()
        return decision

    def _revisit(self, current: str, queue: Sequence[Unit]) -> Decision | None:
        """One more round of a scenario whose last decision was ``budget``, widest pair first,
        where it fits now (recorded as ``revisited``): the check is cautious while scenarios
        are still to run, so the time the later ones left unused goes back to the earlier ones
        it refused. Their pairs are read again (nothing of them ran since)."""
        last: dict[str, Decision] = {}
        for d in self.decisions:
            last[d.scenario] = d
        refused = [d for s, d in last.items() if s != current and d.why == "budget"
                   and not self._later(s, d.after_round, queue)]  # fmt: skip
        for d in sorted(refused, key=lambda d: -max(_known(d.widths), default=0.0)):
            chosen = self._wide(self.variants(d.scenario), d.widths)
            ok, projected = self.fits(d.scenario, chosen, queue, d.after_round + 1 - self.planned)
            if ok:
                again = Decision(scenario=d.scenario, after_round=d.after_round, widths=d.widths,
                                 added=round_order(chosen, d.after_round + 1), why="revisited",
                                 projected_s=projected)  # fmt: skip
                self.decisions.append(again)
                self.write()
                return again
        return None

    def _wide(self, names: Sequence[str], got: dict[str, float]) -> list[str]:
        """The variants of ``names`` in a pair wider than the target, in their order."""
        members = {v for p, w in got.items() if w > self.target for v in p.split("/")}
        return [v for v in names if v in members]

    def _later(self, scenario: str, r: int, queue: Sequence[Unit]) -> bool:
        """A later round of ``scenario`` is queued or has started (its folder exists)."""
        if any(u.scenario == scenario and rf.is_timing(u.phase) for u in queue):
            return True
        later = rf.timing_phase(r + 1)
        return any(rf.unit_dir(self.run_dir, scenario, v, later).exists()
                   for v in self.variants(scenario))  # fmt: skip

    def record(self) -> dict[str, Any]:
        """``rounds.json``: the settings and every decision (a width of fewer than two paired
        rounds, infinite or NaN, as null)."""
        decisions = []
        for d in self.decisions:
            row = asdict(d)
            row["widths"] = {k: (v if math.isfinite(v) else None) for k, v in d.widths.items()}
            decisions.append(row)
        return {"target_half_width": self.target, "max_rounds": self.max_rounds,
                "decisions": decisions}  # fmt: skip

    def write(self) -> None:
        """``rounds.json`` in the run folder (atomic)."""
        write_json(self.run_dir / ROUNDS_FILE, self.record())


def _known(widths: dict[str, float]) -> list[float]:
    """The widths that were measured (NaN: a pair with no round paired)."""
    return [w for w in widths.values() if not math.isnan(w)]
