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
"""

from __future__ import annotations

from collections.abc import Sequence

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
            idx = rng.integers(0, steps.size, size=(rows.size, steps.size))
            total[rows] += steps[idx].sum(axis=1)
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
