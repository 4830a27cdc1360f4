"""The steady window in whole periods of the loop's periodic work.

A checkpoint every N steps, an activation dump, a flush of buffered logs: the loop thread
writes files every N iterations, and throughput pays for it once a period. A window that
holds 16 iterations and one save of a 10-step period spreads the save over 16 steps, not 10.
The loop thread's runs of file writes (``window.period_calls``, at most ``period_gap_ms``
apart, at least ``min_period_run_ms`` long) across the loop, counted in the loop's iterations
(the optimizer's rhythm where one is found: it runs past the exact repeats), give the period;
the window keeps the latest whole number of periods, and one iteration before them (the
replay's first iteration warms its queue up and is not measured).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from analysis import trace as T
from analysis.detect.config import WindowThresholds
from analysis.detect.view import _steady as S

__all__ = ["whole_periods"]


def _runs(trace: T.Trace, w: WindowThresholds, tid: int, lo: int) -> np.ndarray:
    """Starts of the thread's material write runs from ``lo`` on."""
    s, e = S.period_calls(trace, w.period_calls, lo, tid=tid)
    if not s.size:
        return s
    e = np.maximum.accumulate(e)
    cut = np.flatnonzero(s[1:] - e[:-1] > int(w.period_gap_ms * 1e6))
    first, last = np.concatenate([[0], cut + 1]), np.concatenate([cut, [s.size - 1]])
    keep = e[last] - s[first] >= int(w.min_period_run_ms * 1e6)
    return s[first][keep]


def period(trace: T.Trace, w: WindowThresholds, counted: np.ndarray, tid: int) -> int | None:
    """Iterations from one write run to the next (``counted``: the iterations' starts that
    count them), where the runs recur every same number of iterations (>= 2); else None."""
    runs = _runs(trace, w, tid, int(counted[0]))
    if runs.size < 2:
        return None
    per = np.diff(np.searchsorted(counted, runs))
    if per.size == 0 or per.min() < 2 or per.max() - per.min() > 1:
        return None
    return int(np.median(per))


def whole_periods(
    trace: T.Trace, w: WindowThresholds, it: S.Iterations, counted: np.ndarray, tid: int | None
) -> S.Iterations:
    """``it`` cut to its latest whole number of write periods plus one iteration (unchanged
    where the loop thread writes no periodic runs, or the window holds less than that)."""
    if tid is None or counted.size < 3:
        return it
    p = period(trace, w, counted, tid)
    n = it.starts.size - 1
    if p is None or n <= p or (n - 1) % p == 0:
        return it
    k = (n - 1) // p  # and one iteration before them: the time model's replay warms up on it
    source = f"{it.source}; {k} whole period(s) of {p} iterations of the loop's periodic writes"
    return replace(it, starts=it.starts[n - k * p - 1 :], source=source)
