"""Summaries of per-step times, and speedups with their 95% intervals.

Steps of one process are not independent draws of "the variant's speed": a process carries its
own allocator layout, clocks, loader-worker timing, CPU placement, so two processes of one
variant can differ by more than their steps scatter (docs/measurement.md). The unpaired
intervals here therefore resample at two levels (processes, then steps within each process):
the hierarchical bootstrap, whose interval carries the between-process spread.

What the interval covers with few processes: with 2 processes per variant, resampling processes
draws (A, A), (A, B) or (B, B), so the 95% interval spans about the range between the two
processes' means, widened by each one's step noise. It says "the speedup lies within what these
processes showed"; it is not a calibrated 95% interval over all possible processes (a third
process may fall outside it), and with 1 process it reduces to the within-process (step)
bootstrap.

runs.csv's speedups and shares of ``ideal``, and the judge's measured savings, are paired
instead (:func:`paired_ratio_ci`): the variants of a scenario are timed in the same rounds, so the
ratio is taken within each round, where the host's drift cancels, and the interval is a
Student-t interval on the rounds' log ratios with n - 1 degrees of freedom. A bootstrap over 3
rounds has 10 distinct draws and spans about the range of the three ratios; it is no 95%
interval, and a rerun falls outside it far more often than 5% of the time. The t interval
widens as few rounds demand (4.3 standard errors with 3 rounds, 2.8 with 5), so it holds its
coverage with 2 to 10 rounds when the rounds are independent draws of one distribution
(docs/measurement.md measures that). The unpaired :func:`ratio_ci` remains for what cannot be
paired: the probe effect (a profiled process against the timed ones), and a speedup whose
sides share no round.
"""

from __future__ import annotations

import math
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


speedup_ci = ratio_ci
"""Throughput ratio variant/baseline (= baseline mean step time / variant mean) and its CI:
``speedup_ci(baseline_ms, variant_ms)``.

Pass one sequence of step times per process (``[t["step_ms"] for t in timings]``) so the
interval carries the spread between processes (module docstring); a flat sequence is one
process, i.e. the plain step bootstrap. Mean step time, not median: throughput is what a
training job gets, and a loader that makes one step in four wait shows up in the mean but
not in the median.
"""

probe_effect_ci = ratio_ci
"""Probe effect: profiled mean step time / unprofiled mean, with the same hierarchical CI:
``probe_effect_ci(profiled_ms, timed_ms)``.

The profiled side is usually one process (its steps are resampled); the timed side is one
sequence per timing process. Above 1: nsys slowed the variant down.
"""


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


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (bisection on its CDF,
    to 1e-10: no scipy in the harness's dependencies)."""
    if df < 1:
        raise ValueError(f"Student's t needs at least one degree of freedom, got {df}")
    if not 0 < p < 1:
        raise ValueError(f"a quantile needs 0 < p < 1, got {p}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-10 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


def t_cdf(t: float, df: int) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom (the regularized incomplete
    beta function)."""
    x = df / (df + t * t)
    tail = 0.5 * _betainc(0.5 * df, 0.5, x)
    return 1.0 - tail if t >= 0 else tail


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b) (Lentz's continued fraction)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x > (a + 1.0) / (a + b + 2.0):  # the fraction converges fast on this side only
        return 1.0 - _betainc(b, a, 1.0 - x)
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    out = d
    for m in range(1, 300):
        for num in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            out *= c * d
        if abs(c * d - 1.0) < 1e-14:
            break
    return front * out / a


def log_t_interval(logs: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """(point, low, high) of exp(mean) of ``logs`` (one log ratio per round) with its Student-t
    interval, n - 1 degrees of freedom; at least two values."""
    a = np.asarray(logs, dtype=float)
    if a.size < 2:
        raise ValueError("a t interval needs at least two rounds")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be within (0, 1), got {confidence}")
    mean = float(a.mean())
    half = t_quantile(0.5 + confidence / 2.0, a.size - 1) * float(a.std(ddof=1)) / math.sqrt(a.size)
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def half_width(low: float, high: float) -> float:
    """An interval's relative half-width, as rounds are added until it is small enough:
    sqrt(high / low) - 1 (the half-width of the log interval, as a factor)."""
    if not (low > 0 and high > 0):
        return math.inf
    return math.sqrt(high / low) - 1.0


def log_se(low: float, high: float, rounds: int, confidence: float = 0.95) -> float | None:
    """The standard error of the log ratio behind a Student-t interval of ``rounds`` rounds
    (its half-width over the t quantile); None where it cannot be told (fewer than two rounds,
    a missing bound)."""
    if rounds < 2 or not (low > 0 and high > 0) or not math.isfinite(high / low):
        return None
    return math.log(high / low) / (2.0 * t_quantile(0.5 + confidence / 2.0, rounds - 1))


def agree(
    a: float, se_a: float | None, n_a: int, b: float, se_b: float | None, n_b: int,
    confidence: float = 0.95,
) -> bool | None:  # fmt: skip
    """Whether two runs' ratios agree at ``confidence``: Welch's two-sample t test on their
    logs (Welch-Satterthwaite degrees of freedom). The question "does this repeat" asks of two
    estimates, each with its own noise: one point inside the other's confidence interval is a
    stricter test that a calibrated interval passes only 88-93% of the time with 2-5 rounds
    (docs/measurement.md). None where a standard error is missing."""
    if se_a is None or se_b is None or not (a > 0 and b > 0):
        return None
    var = se_a**2 + se_b**2
    if var == 0:
        return a == b
    den = se_a**4 / max(1, n_a - 1) + se_b**4 / max(1, n_b - 1)
    df = max(1, int(var**2 / den)) if den > 0 else max(1, n_a + n_b - 2)
    return abs(math.log(a / b)) <= t_quantile(0.5 + confidence / 2.0, df) * math.sqrt(var)


def paired_ratio_ci(
    numerator: Rounds,
    denominator: Rounds,
    *,
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """The ratio of mean step times paired within each timing round, and its interval.

    Why paired: the variants of a scenario are timed in the same rounds, so the host's drift
    moves both sides of a round alike and cancels in that round's ratio, while it does not
    cancel between rounds. The point is the geometric mean of the per-round ratios; with two
    or more rounds the interval is Student-t on their logs with n - 1 degrees of freedom
    (:func:`log_t_interval`). One round has no spread between rounds to go by: its interval
    is the step bootstrap of that round (``resamples``), which says nothing about a rerun.
    """
    rounds = paired_rounds(numerator, denominator)
    if not rounds:
        raise ValueError("a paired ratio needs at least one round timed on both sides")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be within (0, 1), got {confidence}")
    num = [np.asarray(numerator[r], dtype=float) for r in rounds]
    den = [np.asarray(denominator[r], dtype=float) for r in rounds]
    logs = np.log([n.mean() / d.mean() for n, d in zip(num, den, strict=True)])
    if len(rounds) >= 2:
        return log_t_interval(logs, confidence)
    point = float(np.exp(logs[0]))
    rng = np.random.default_rng(seed)
    n_mean = _resampled_sums(num[0], resamples, rng) / num[0].size
    d_mean = _resampled_sums(den[0], resamples, rng) / den[0].size
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(n_mean / d_mean, [alpha, 1.0 - alpha])
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
