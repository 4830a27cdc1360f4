"""Summaries of per-step times and speedups with bootstrap confidence intervals."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


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


def speedup_ci(
    baseline_ms: Sequence[float],
    variant_ms: Sequence[float],
    *,
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """Throughput ratio variant/baseline (= ratio of mean step times) and its bootstrap CI.

    Mean step time, not median: throughput is what a training job gets, and a loader that makes
    one step in four wait shows up in the mean but not in the median. Both samples are
    resampled independently (percentile bootstrap).
    """
    b = np.asarray(baseline_ms, dtype=float)
    v = np.asarray(variant_ms, dtype=float)
    if b.size == 0 or v.size == 0:
        raise ValueError("speedup needs step times for both variants")
    point = float(b.mean() / v.mean())
    rng = np.random.default_rng(seed)
    bi = rng.integers(0, b.size, size=(resamples, b.size))
    vi = rng.integers(0, v.size, size=(resamples, v.size))
    ratios = b[bi].mean(axis=1) / v[vi].mean(axis=1)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(ratios, [alpha, 1.0 - alpha])
    return point, float(lo), float(hi)
