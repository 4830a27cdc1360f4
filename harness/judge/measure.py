"""Measurements: what removing a scenario's cause saved each variant, timed, with its interval.

The findings speak of savings (a finding's impact is the share of the step that removing its
cause entirely would save), so the truth is measured in that currency: ``saving = 1 -
t(removal) / t(variant)``. The ratio is paired within timing rounds
(:func:`harness.core.stats.paired_ratio_ci`): the variants of a scenario are timed back to back
in each round, so the host's drift over minutes cancels within a round. The removal is

- the scenario's removing variant (``Scenario.removed_by``, ``ideal``), timed in the same
  rounds;
- or, where the scenario has none (``removed_by == "limit"``), a limit the run measured of the
  variant itself: ``Scenario.limit_metric`` from its result.json per round
  (pipeline_imbalance's ``balanced_bound_ms``), else its own GPU work per step from its trace
  (:func:`launch_limit_ms`). A limit has no rounds of its own: it is held fixed against the
  variant's rounds, and the interval is the variant's side alone.

Beside the saving, :func:`extra_wait_share` measures how much longer the variant's step loop
waited for a core (runnable, on a run queue: :mod:`harness.core.schedwait`) than the removal's,
and :func:`extra_cpu_share` how much longer it ran on one, paired within the same rounds: the
truth tells CPU oversubscription from the class's cause with them
(:func:`harness.judge.truth.oversubscribed`).

The statistics are :mod:`harness.core.stats`'s only; the result files are read by
:mod:`harness.core.results`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.core.results import VariantResults, read_variant
from harness.core.stats import paired_ratio_ci, paired_rounds
from scenarios import Scenario

__all__ = [
    "LIMIT",
    "Saving",
    "extra_cpu_share",
    "extra_wait_share",
    "launch_limit_ms",
    "measure_scenario",
    "measured_saving",
    "saving_between",
    "saving_to_limit",
]

#: LIMIT as ``Scenario.removed_by``: a limit measured of each variant removes the cause.
LIMIT = "limit"

#: The gpu_work column that is a launch-bound variant's limit (:func:`launch_limit_ms`).
LAUNCH_LIMIT_COLUMN = "gpu_busy_ms_per_step"


@dataclass(frozen=True)
class Saving:
    """``1 - t(removal) / t(variant)`` with its 95% interval: the share of the variant's step
    that removing the cause saved (negative when the removal was slower)."""

    share: float
    low: float
    high: float
    by: str
    """What removed the cause: a variant's name, or ``own <limit>`` for a measured limit."""
    rounds: int
    """Timing rounds the ratio paired."""

    @property
    def speedup(self) -> float:
        """t(variant) / t(removal): the same measurement as a speedup."""
        return _speedup(self.share)

    @property
    def speedup_low(self) -> float:
        return _speedup(self.low)

    @property
    def speedup_high(self) -> float:
        return _speedup(self.high)


def _speedup(share: float) -> float:
    return 1.0 / (1.0 - share) if share < 1.0 else math.inf


def _from_ratio(ratio: tuple[float, float, float], by: str, rounds: int) -> Saving:
    point, lo, hi = ratio
    return Saving(share=1.0 - point, low=1.0 - hi, high=1.0 - lo, by=by, rounds=rounds)


def saving_between(variant: VariantResults, removal: VariantResults, by: str) -> Saving | None:
    """The saving of ``removal`` (a variant of the same rounds) over ``variant``; None when no
    round timed both."""
    n = len(paired_rounds(removal.rounds, variant.rounds))
    if not n:
        return None
    return _from_ratio(paired_ratio_ci(removal.rounds, variant.rounds), by, n)


def saving_to_limit(
    variant: VariantResults, limit_ms: Mapping[int, float], by: str
) -> Saving | None:
    """The saving of a limit (ms per step, per round; held fixed within a round) over the
    variant's timed rounds; None when no round has both or a limit is not positive."""
    fixed = {r: (float(v),) for r, v in limit_ms.items() if v is not None and v > 0}
    n = len(paired_rounds(fixed, variant.rounds))
    if not n:
        return None
    return _from_ratio(paired_ratio_ci(fixed, variant.rounds), by, n)


def launch_limit_ms(work: Mapping[str, float] | None) -> float | None:
    """A launch-bound variant's step with its launch overhead removed entirely: the GPU's own
    busy time per step in **that variant's** trace (``gpu_busy_ms_per_step``).

    Why its own and not the baseline's kernel sum: removing the launch overhead of
    ``torch_compile`` leaves torch_compile's fused kernels, fewer and shorter than the
    baseline's, so the baseline's kernel sum would understate what is left to save. Why busy
    time and not the kernel sum: it is the union of kernels, copies and memsets on every
    stream, what the GPU cannot do without, with overlapping streams counted once; and a
    variant traced at graph level (CUDA graphs) has no kernel rows, but its replays' spans are
    in its busy time."""
    value = (work or {}).get(LAUNCH_LIMIT_COLUMN)
    if value is None or not math.isfinite(value) or value <= 0:
        return None
    return float(value)


def measured_saving(
    scen: Scenario,
    variant: str,
    timed: Mapping[str, VariantResults],
    work: Mapping[str, float] | None = None,
) -> tuple[Saving | None, str]:
    """(saving, '') of removing ``scen``'s cause from ``variant``, or (None, why not).

    ``timed``: the scenario's variants' results by name; ``work``: the variant's own GPU work
    per step (a gpu_work row), for a scenario whose removal is the launch limit."""
    mine = timed.get(variant)
    if mine is None or not mine.timed:
        return None, f"{variant} has no timed round"
    by = scen.removal_for(variant)
    if by != LIMIT:
        if variant == by:  # the removal itself: nothing left to remove, by construction
            n = len(mine.rounds)
            return Saving(share=0.0, low=0.0, high=0.0, by=by, rounds=n), ""
        other = timed.get(by)
        if other is None or not other.timed:
            return None, f"{by} has no timed round"
        s = saving_between(mine, other, by)
        return (s, "") if s is not None else (None, f"no round timed both {variant} and {by}")
    if scen.limit_metric:
        per_round = mine.metric_by_round(scen.limit_metric)
        s = saving_to_limit(mine, per_round, f"own {scen.limit_metric}")
        return (s, "") if s is not None else (None, f"no {scen.limit_metric} measured")
    limit = launch_limit_ms(work)
    if limit is None:
        return None, f"no {LAUNCH_LIMIT_COLUMN} in {variant}'s trace"
    s = saving_to_limit(mine, dict.fromkeys(mine.rounds, limit), f"own {LAUNCH_LIMIT_COLUMN}")
    return s, ""


def ideal_saving(
    scen: Scenario, variant: str, timed: Mapping[str, VariantResults]
) -> Saving | None:
    """The saving of the scenario's ``ideal`` variant (every cause removed) over ``variant``,
    where both were timed in the same rounds; None otherwise. It bounds what any cause of the
    variant may save, where the class's own removal cannot: on the removal itself that saving
    is 0 by construction, and other causes may remain (fp32_matmul's ``bf16_autocast``)."""
    ideal = next((v.name for v in scen.variants if v.kind == "ideal"), None)
    mine, other = timed.get(variant), timed.get(ideal) if ideal else None
    if ideal is None or ideal == variant or not (mine and mine.timed and other and other.timed):
        return None
    return saving_between(mine, other, ideal)


def extra_wait_share(
    scen: Scenario, variant: str, timed: Mapping[str, VariantResults]
) -> float | None:
    """The variant's step loop's run-queue wait per step beyond its removing variant's, as a
    share of the variant's step: per round that recorded both (``round_wait_ms``), ``(wait -
    removal's wait) / the variant's mean step``, averaged over those rounds. 0 for the removal
    itself; None for a measured limit (it has no process of its own) or where no round
    recorded both (no schedstat on the host, an older run)."""
    return _extra_share(scen, variant, timed, lambda r: r.round_wait_ms)


def extra_cpu_share(
    scen: Scenario, variant: str, timed: Mapping[str, VariantResults]
) -> float | None:
    """As :func:`extra_wait_share`, for the step loop's CPU time per step (``round_cpu_ms``):
    how much longer the loop ran on a core than the removal's loop did."""
    return _extra_share(scen, variant, timed, lambda r: r.round_cpu_ms)


def _extra_share(
    scen: Scenario,
    variant: str,
    timed: Mapping[str, VariantResults],
    per_round: Callable[[VariantResults], Mapping[int, float]],
) -> float | None:
    by = scen.removal_for(variant)
    mine, other = timed.get(variant), timed.get(by)
    if by == LIMIT or mine is None or other is None:
        return None
    if variant == by:
        return 0.0
    ours, theirs = per_round(mine), per_round(other)
    shares = []
    for r, ms in ours.items():
        steps = mine.rounds.get(r)
        if r in theirs and steps:
            shares.append((ms - theirs[r]) / (sum(steps) / len(steps)))
    return sum(shares) / len(shares) if shares else None


def measure_scenario(
    run_dir: Path, scen: Scenario, variants: list[str]
) -> dict[str, VariantResults]:
    """Each listed variant's results (the removing variant's too, listed or not)."""
    names = list(dict.fromkeys([*variants, *scen.removals]))
    return {v: read_variant(run_dir, scen.name, v) for v in names if v in scen.variant_names}
