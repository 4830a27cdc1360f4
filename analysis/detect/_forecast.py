"""Predictions from the time model (``_model``): one cause removed, the speedup and its interval.

The speedup is the replay with nothing removed over the replay with the cause removed, both for
the program as it runs untraced (nsys's cost per call taken off): a removal that changes nothing
predicts 1.00x, whatever the trace's own pace. Where the program's untraced mean step is known
(``step_ms``), both replays are first fitted to it (:func:`fit`), so that the replay with nothing
removed takes that step:

- in a loop of many calls per ms, by nsys's cost per call (:func:`calibrated_overhead`): what a
  traced loop loses to nsys is mostly CUPTI's work in each call;
- in a loop of few calls (a long input stretch, a big copy), by the pace of the host's own
  stretches (:func:`calibrated_scale`): there a gap between the traced and the measured step is
  mostly the spread of that host work between steps and processes (sync_loading's JPEG decode
  took 822-1113 ms a step in one traced process), which a few traced steps sample and a cost per
  call would misread as tens of us a call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from analysis import trace as T
from analysis.detect import _common as C
from analysis.detect import _model as M

__all__ = ["Fit", "Prediction", "calibrated_overhead", "calibrated_scale", "fit", "predict"]


@dataclass(frozen=True)
class Prediction:
    """What removing one cause entirely would do to the step, everything else unchanged."""

    speedup: float | None
    """Untraced step before / after; None when the model cannot say (``note`` says why)."""
    ci_low: float | None = None
    ci_high: float | None = None
    step_ms: float | None = None
    """Predicted mean step (iteration) after the removal, untraced."""
    observed_step_ms: float | None = None
    """The recorded mean step of the replayed iterations (traced)."""
    model_fit: float | None = None
    """Replayed / recorded window, nothing removed and nsys's overhead kept: 1.0 is a replay
    that reproduces the trace."""
    iterations: int = 0
    trace_overhead_us: float | None = None
    """nsys's cost per traced call taken off the host in both replays."""
    stretch_scale: float = 1.0
    """The scale applied to the host's stretches in both replays (1: as traced)."""
    calibrated: bool = False
    """Both replays were fitted to the program's measured untraced step."""
    note: str = ""


@dataclass(frozen=True)
class Fit:
    """How the replays are made untraced: nsys's cost per call and the host stretches' scale."""

    overhead_ns: int
    scale: float = 1.0
    calibrated: bool = False
    note: str = ""
    """What was fitted, or why the default cost was kept ('; ...', appended to the note)."""


def predict(
    trace: T.Trace, cfg: Mapping[str, Any], klass: str, step_ms: float | None = None
) -> Prediction:
    """The prediction for ``klass`` (see :data:`_model.CAUSE_OF`), from the replay;
    ``step_ms``: the program's mean step measured without nsys, where known (it calibrates
    both replays)."""
    cause = M.CAUSE_OF.get(klass)
    if cause is None:
        return Prediction(None, note=f"{klass}: no replay model")
    tl = M.timeline(trace, cfg)
    if tl is None:
        return Prediction(None, note="no GPU activity or CUDA calls of a launching thread")
    if tl.n_iterations < 2:
        return Prediction(None, note="fewer than 2 steady iterations: nothing to replay")
    pc = cfg.get("predict", {})
    cache = C._cache(trace)
    key = ("fit", id(tl), step_ms, repr(sorted(pc.items())))
    if key not in cache:
        cache[key] = fit(tl, pc, step_ms)
    how: Fit = cache[key]
    key = ("replayed", id(tl), how.overhead_ns, how.scale)
    if key not in cache:  # the same two replays serve every class
        recorded = M.replay(tl)
        untraced = how.overhead_ns or how.scale != 1.0
        cache[key] = (
            recorded,
            M.replay(tl, None, how.overhead_ns, how.scale) if untraced else recorded,
        )
    recorded, base = cache[key]
    pct = float(pc.get("data_dispatch_percentile", 75.0))
    rm = M.removal(tl, cause, dispatch_percentile=pct)
    after = M.replay(tl, rm, how.overhead_ns, how.scale)
    found = _prediction(tl, recorded, base, after, pc)
    if found.speedup is None:
        return found
    return replace(
        found,
        trace_overhead_us=how.overhead_ns / 1e3,
        stretch_scale=how.scale,
        calibrated=how.calibrated,
        note=found.note + how.note,
    )


def fit(tl: M.Timeline, pc: Mapping[str, Any], step_ms: float | None) -> Fit:
    """nsys's cost per call and the stretches' scale for this window: fitted to ``step_ms``
    where it can tell them, else the default cost (``predict.trace_overhead_us``)."""
    if not bool(pc.get("untraced", True)):
        return Fit(0, note="; for the traced run (predict.untraced=false)")
    default = int(float(pc.get("trace_overhead_us", 7.0)) * 1e3)
    us = default / 1e3
    if step_ms is None or step_ms <= 0:
        return Fit(
            default, note=f"; nsys's cost {us:g} us a call (no untraced step to calibrate it)"
        )
    if not bool(pc.get("calibrate", True)):
        return Fit(default, note=f"; nsys's cost {us:g} us a call (predict.calibrate=false)")
    why = _not_the_step(tl, pc, step_ms)
    if why:
        return Fit(default, note=f"; nsys's cost {us:g} us a call ({why})")
    step_ns = int(step_ms * 1e6)
    rate = _calls_per_ms(tl, step_ms)
    o, words = default, f"nsys's cost {us:g} us a call"
    if rate >= float(pc.get("calibrate_min_calls_per_ms", 5.0)):
        top = int(float(pc.get("calibrate_max_overhead_us", 50.0)) * 1e3)
        o = calibrated_overhead(tl, step_ns, top)
        words = f"nsys's cost fitted to it: {o / 1e3:.3g} us a call"
        if abs(_per_iteration(tl, o, 1.0) / step_ns - 1.0) <= 0.01:
            return Fit(o, 1.0, True, _fitted(tl, o, 1.0, step_ms) + f" ({words})")
    else:
        words += f" ({rate:.2g} calls per ms of step: too few to fit it)"
    if not (tl.gap_kind != M.DISPATCH).any():  # no host stretch to take the rest
        if o == default:
            return Fit(o, note=f"; {words}, and no host stretch to fit the measured step to")
        return Fit(o, 1.0, True, _fitted(tl, o, 1.0, step_ms) + f" ({words})")
    k = calibrated_scale(tl, step_ns, o, float(pc.get("calibrate_max_stretch_scale", 2.0)))
    return Fit(
        o,
        k,
        True,
        _fitted(tl, o, k, step_ms) + f" ({words}; the host's stretches scaled by {k:.3g})",
    )


def _fitted(tl: M.Timeline, overhead_ns: int, scale: float, step_ms: float) -> str:
    """The note's words for a fit: the measured step, and how far the replay got to it."""
    r = M.replay(tl, None, overhead_ns, scale)
    got = r.total_ns / max(1, r.iterations) / 1e6
    off = got / step_ms - 1.0
    miss = "" if abs(off) <= 0.01 else f", which the replay misses by {off:+.0%} at the fit's bound"
    return f"; calibrated to the measured untraced step, {step_ms:.4g} ms{miss}"


def _not_the_step(tl: M.Timeline, pc: Mapping[str, Any], step_ms: float) -> str:
    """Why the measured step is not the traced iteration's ('' when it is): one layer of a
    step, say, found as the iteration."""
    traced_ms = _traced_ms(tl)
    top = float(pc.get("calibrate_max_probe", 3.0))
    if not 0.5 <= traced_ms / step_ms <= top:
        return (
            f"the traced iteration, {traced_ms:.3g} ms, is not the measured {step_ms:.3g} ms step"
        )
    return ""


def _traced_ms(tl: M.Timeline) -> float:
    rec = _recorded_edges(tl)
    return float(rec[-1] - rec[0]) / max(1, tl.n_iterations) / 1e6


def _calls_per_ms(tl: M.Timeline, step_ms: float) -> float:
    inside = (tl.op_start >= tl.edges[0]) & (tl.op_start < tl.edges[-1])
    return np.count_nonzero(inside) / max(1, tl.n_iterations) / step_ms


def _per_iteration(tl: M.Timeline, overhead_ns: int, scale: float) -> float:
    r = M.replay(tl, None, overhead_ns, scale)
    return r.total_ns / max(1, r.iterations)


def calibrated_overhead(tl: M.Timeline, step_ns: int, top_ns: int) -> int:
    """The cost per call (ns, in 0..``top_ns``) at which the replay with nothing removed takes
    ``step_ns`` per iteration: the replayed step falls as the cost rises (piecewise linearly),
    so a bracketing search finds it to 0.2% of the step. Where even ``top_ns`` leaves the
    replay slower (nsys slowed something other than its calls: its GIL trace lengthens the GIL
    waits), or 0 leaves it faster, the bound is taken (the note says by how much it misses)."""
    return int(
        _solve(lambda o: _per_iteration(tl, int(o), 1.0) - step_ns, 0, top_ns, step_ns, 100, -1)
    )


def calibrated_scale(tl: M.Timeline, step_ns: int, overhead_ns: int, top: float) -> float:
    """The scale (in 1/``top``..``top``) of the host's stretches at which the replay with
    nothing removed takes ``step_ns`` per iteration (the replayed step rises with it), to 0.2%
    of the step; the bound where none in the range does."""
    return float(
        _solve(
            lambda k: _per_iteration(tl, overhead_ns, k) - step_ns,
            1.0 / top,
            top,
            step_ns,
            1e-4,
            +1,
        )
    )


def _solve(excess, lo: float, hi: float, step_ns: int, tol: float, sign: int) -> float:
    """The root of the monotone ``excess`` in [lo, hi] (``sign``: +1 rising, -1 falling), by
    regula falsi alternating with halving; the nearer bound where it has none there."""
    f_lo, f_hi = sign * excess(lo), sign * excess(hi)
    if f_lo >= 0:
        return lo
    if f_hi <= 0:
        return hi
    for i in range(24):
        mid = lo + f_lo * (hi - lo) / (f_lo - f_hi) if i % 2 == 0 else (lo + hi) / 2
        mid = min(max(mid, lo + tol), hi - tol)
        f_mid = sign * excess(mid)
        if abs(f_mid) <= 0.002 * step_ns or hi - lo <= 2 * tol:
            return mid
        if f_mid < 0:
            lo, f_lo = mid, f_mid
        else:
            hi, f_hi = mid, f_mid
    return (lo + hi) / 2


def _prediction(tl, recorded, base, after, pc) -> Prediction:
    """The speedup, base over after, both replays made the same way."""
    n = after.iterations
    rec = _recorded_edges(tl)[recorded.measured]
    obs = float(rec[-1] - rec[0])
    if min(obs, recorded.total_ns, base.total_ns, after.total_ns) <= 0:
        return Prediction(None, note="the iterations hold no GPU item their calls launched")
    speed = base.total_ns / max(1, after.total_ns)
    lo, hi = _interval(base.per_iteration_ns, after.per_iteration_ns, speed, pc)
    return Prediction(
        speedup=float(speed),
        ci_low=lo,
        ci_high=hi,
        step_ms=after.total_ns / max(1, n) / 1e6,
        observed_step_ms=obs / max(1, n) / 1e6,
        model_fit=recorded.total_ns / max(1.0, obs),
        iterations=n,
        note=f"replay of {tl.n_iterations} steady iterations, {n} measured, the cause removed",
    )


def _recorded_edges(tl: M.Timeline) -> np.ndarray:
    """The recorded GPU-clock edges: the recorded start of each iteration's first item."""
    k = M._edge_items(tl)
    done = int(tl.item_end.max()) if tl.item_end.size else int(tl.edges[-1])
    return np.maximum.accumulate(np.where(k >= 0, tl.item_start[np.maximum(k, 0)], done))


def _interval(base: np.ndarray, after: np.ndarray, speed: float, pc: Mapping[str, Any]):
    """95% interval of the speedup from the per-iteration spread: the ratio sum(base) /
    sum(after) over iterations resampled with replacement, relative to its value on all of
    them, applied to ``speed`` (fixed seed: the same report gives the same interval)."""
    n = base.size
    if n < 3 or n != after.size or (base <= 0).any() or (after <= 0).any():
        return None, None
    rng = np.random.default_rng(int(pc.get("seed", 0)))
    idx = rng.integers(0, n, size=(int(pc.get("bootstrap", 1000)), n))
    num = base[idx].sum(axis=1).astype(float)
    den = np.maximum(1.0, after[idx].sum(axis=1).astype(float))
    point = float(base.sum()) / float(after.sum())
    lo, hi = np.percentile(num / den / point, [2.5, 97.5])
    return float(speed * lo), float(speed * hi)
