"""Summaries of per-step times and speedups with bootstrap confidence intervals.

Steps of one process are not independent draws of "the variant's speed": a process carries its
own allocator layout, clocks, loader-worker timing, CPU placement, so two processes of one
variant can differ by more than their steps scatter (sync_loading's baseline on the H100: the
profiled process ran 13% faster than the timed ones, whose pooled-step interval was +-7%). The
intervals here therefore resample at two levels (processes, then steps within each process):
the hierarchical bootstrap, whose interval carries the between-process spread.

What the interval covers with few processes: with 2 processes per variant, resampling processes
draws (A, A), (A, B) or (B, B), so the 95% interval spans about the range between the two
processes' means, widened by each one's step noise. It says "the speedup lies within what these
processes showed"; it is not a calibrated 95% interval over all possible processes (a third
process may fall outside it), and with 1 process it reduces to the within-process (step)
bootstrap.

runs.csv's speedups and shares of ``ideal`` are paired instead (:func:`paired_ratio_ci`): the
variants of a scenario run back to back in every timing round, so the ratio is taken within
each round, where the host's drift over minutes cancels, and the interval resamples rounds.
The unpaired :func:`ratio_ci` remains for what cannot be paired: the probe effect (a profiled
process against the timed ones), and a speedup whose sides share no round.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

Samples = Sequence[float] | Sequence[Sequence[float]]
"""Step times in ms: one flat sequence (one process), or one sequence per process."""


def summarize(step_ms: Sequence[float]) -> dict[str, float]:
    """Median, p10, p90 and mean of step times in milliseconds."""
    a = np.asarray(step_ms, dtype=float)
    if a.size == 0:
        raise ValueError("no step times to summarize")
    return {
        "step_ms_median": float(np.median(a)),
        "step_ms_p10": float(np.percentile(a, 10)),
        "step_ms_p90": float(np.percentile(a, 90)),
        "step_ms_mean": float(a.mean()),
    }


def as_groups(samples: Samples) -> list[np.ndarray]:
    """One float array per process; a flat sequence is one process. Empty processes dropped."""
    seq = list(samples)
    if seq and all(np.ndim(s) == 0 for s in seq):
        groups = [np.asarray(seq, dtype=float)]
    else:
        groups = [np.asarray(s, dtype=float).ravel() for s in seq]
    return [g for g in groups if g.size]


def pooled_mean(groups: Sequence[np.ndarray]) -> float:
    """Mean over every step of every process (each step weighs the same)."""
    return float(np.concatenate(groups).mean())


def _resampled_sums(steps: np.ndarray, draws: int, rng: np.random.Generator) -> np.ndarray:
    """``draws`` sums of ``steps`` resampled with replacement (as many steps as there are)."""
    return steps[rng.integers(0, steps.size, size=(draws, steps.size))].sum(axis=1)


def hierarchical_means(
    groups: Sequence[np.ndarray], resamples: int, rng: np.random.Generator
) -> np.ndarray:
    """``resamples`` bootstrap replicates of the pooled mean: draw as many processes as there
    are, with replacement, then each drawn process's steps with replacement."""
    n_proc = len(groups)
    total = np.zeros(resamples)
    count = np.zeros(resamples)
    for _slot in range(n_proc):
        pick = rng.integers(0, n_proc, size=resamples)
        for g, steps in enumerate(groups):
            rows = np.flatnonzero(pick == g)
            if rows.size == 0:
                continue
            total[rows] += _resampled_sums(steps, rows.size, rng)
            count[rows] += steps.size
    return total / count


def ratio_ci(
    numerator: Samples,
    denominator: Samples,
    *,
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """mean(numerator) / mean(denominator) and its hierarchical percentile-bootstrap CI.

    Both sides are resampled independently (processes, then steps within them); the seed makes
    the interval reproducible.
    """
    num, den = as_groups(numerator), as_groups(denominator)
    if not num or not den:
        raise ValueError("a ratio needs step times on both sides")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be within (0, 1), got {confidence}")
    point = pooled_mean(num) / pooled_mean(den)
    rng = np.random.default_rng(seed)
    ratios = hierarchical_means(num, resamples, rng) / hierarchical_means(den, resamples, rng)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(ratios, [alpha, 1.0 - alpha])
    return float(point), float(lo), float(hi)


def speedup_ci(
    baseline_ms: Samples,
    variant_ms: Samples,
    *,
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """Throughput ratio variant/baseline (= baseline mean step time / variant mean) and its CI.

    Pass one sequence of step times per process (``[t["step_ms"] for t in timings]``) so the
    interval carries the spread between processes (module docstring); a flat sequence is one
    process, i.e. the plain step bootstrap. Mean step time, not median: throughput is what a
    training job gets, and a loader that makes one step in four wait shows up in the mean but
    not in the median.
    """
    return ratio_ci(baseline_ms, variant_ms, resamples=resamples, confidence=confidence, seed=seed)


def probe_effect_ci(
    profiled_ms: Samples,
    timed_ms: Samples,
    *,
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """Probe effect: profiled mean step time / unprofiled mean, with the same hierarchical CI.

    The profiled side is usually one process (its steps are resampled); the timed side is one
    sequence per timing process. Above 1: nsys slowed the variant down.
    """
    return ratio_ci(profiled_ms, timed_ms, resamples=resamples, confidence=confidence, seed=seed)


# -- rounds: ratios paired within a timing round -------------------------------------------------

Rounds = Mapping[int, Sequence[float]]
"""Step times in ms per timing round (``timing-<r>`` -> its steps): one process per round."""


def paired_rounds(numerator: Rounds, denominator: Rounds) -> list[int]:
    """The rounds both sides ran (with steps), in order: only these are paired."""
    return sorted(r for r in numerator if r in denominator and numerator[r] and denominator[r])


def round_ratios(numerator: Rounds, denominator: Rounds) -> dict[int, float]:
    """Per paired round: mean(numerator) / mean(denominator) of that round's steps."""
    return {
        r: float(np.mean(numerator[r])) / float(np.mean(denominator[r]))
        for r in paired_rounds(numerator, denominator)
    }


def paired_ratio_ci(
    numerator: Rounds,
    denominator: Rounds,
    *,
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """The ratio of mean step times paired within each timing round, and its CI.

    Why paired: the variants of a scenario are timed back to back in every round, so the host's
    drift over minutes (a KVM guest ran the same Python loop 1.65x faster for a while) moves
    both sides of a round alike and cancels in that round's ratio, while it does not cancel
    between rounds. The point is the geometric mean of the per-round ratios; the interval
    resamples rounds (both sides of a drawn round together), then the steps within each side.
    With one round it reduces to the step bootstrap of that round.
    """
    rounds = paired_rounds(numerator, denominator)
    if not rounds:
        raise ValueError("a paired ratio needs at least one round timed on both sides")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be within (0, 1), got {confidence}")
    num = [np.asarray(numerator[r], dtype=float) for r in rounds]
    den = [np.asarray(denominator[r], dtype=float) for r in rounds]
    logs = np.log([n.mean() / d.mean() for n, d in zip(num, den, strict=True)])
    point = float(np.exp(logs.mean()))
    rng = np.random.default_rng(seed)
    total = np.zeros(resamples)
    for _slot in range(len(rounds)):
        pick = rng.integers(0, len(rounds), size=resamples)
        for i, (n, d) in enumerate(zip(num, den, strict=True)):
            rows = np.flatnonzero(pick == i)
            if rows.size == 0:
                continue
            n_mean = _resampled_sums(n, rows.size, rng) / n.size
            d_mean = _resampled_sums(d, rows.size, rng) / d.size
            total[rows] += np.log(n_mean / d_mean)
    ratios = np.exp(total / len(rounds))
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(ratios, [alpha, 1.0 - alpha])
    return point, float(min(lo, point)), float(max(hi, point))


def round_spread(rounds: Rounds) -> float:
    """max / min - 1 of the rounds' mean step times (0 with one round): above
    ``UNSTABLE_SPREAD`` a variant is flagged unstable (pyperf and torch.utils.benchmark warn
    at 10%)."""
    means = [float(np.mean(s)) for s in rounds.values() if len(s)]
    if len(means) < 2:
        return 0.0
    return max(means) / min(means) - 1.0


#: A variant whose rounds' mean step times spread by more than this is ``unstable``.
UNSTABLE_SPREAD = 0.10
