"""Predictions from the time model (the replay, ``_replay``): one cause removed, the speedup and its interval.

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

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from analysis.detect import view as V
from analysis.detect.config import PredictConfig
from analysis.detect.timemodel import _bounds as B
from analysis.detect.timemodel import _gpu_causes as GC
from analysis.detect.timemodel import _replay as M
from analysis.detect.timemodel import _timeline as TL

__all__ = [
    "PROBE_KEYS",
    "Fit",
    "Prediction",
    "calibrated_overhead",
    "calibrated_scale",
    "fit",
    "host_speed",
    "predict",
    "saving",
    "usable_speed",
]


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
    """nsys's cost per traced call taken off the host in both replays (at the timed pace)."""
    trace_overhead_share: float = 0.0
    """... and the share of each call's recorded host time taken off as nsys's cost."""
    stretch_scale: float = 1.0
    """The scale applied to the host's stretches in both replays (1: as traced)."""
    calibrated: bool = False
    """Both replays were fitted to the program's measured untraced step."""
    host_speed: float = 1.0
    """The host's time in both replays divided by this: the timed processes' host speed
    relative to the profiled process's (1: as traced, or not measured)."""
    clamp: B.Clamp = B.Clamp.NONE
    """The floor the predicted step was raised to (:mod:`_bounds`), ``none`` where the
    replay's own step stands."""
    unclamped_speedup: float | None = None
    """The replay's speedup before the clamp (None where nothing was clamped)."""
    floor_step_ms: float | None = None
    """The highest of the floors no step can go below (:mod:`_bounds`), in ms."""
    note: str = ""


@dataclass(frozen=True)
class Fit:
    """How the replays are made untraced: nsys's cost per call, the host stretches' scale and
    the host's speed."""

    overhead_ns: int
    scale: float = 1.0
    calibrated: bool = False
    note: str = ""
    """What was fitted, or why the default cost was kept ('; ...', appended to the note)."""
    speed: float = 1.0
    """The host's time divided by this in every replay (:func:`usable_speed`)."""
    share: float = 0.0
    """nsys's cost per call as a share of the call's recorded dispatch gap and own time, on
    top of ``overhead_ns`` (``predict.trace_overhead_share``; 0 where the cost was fitted)."""


def predict(
    view: V.TraceView,
    klass: str,
    step_ms: float | None = None,
    host_speed: float | None = None,
) -> Prediction:
    """The prediction for ``klass`` (see :data:`~._replay.CAUSE_OF`), from the replay of the
    view's steady window (``predict`` settings of its config); ``step_ms``: the program's mean
    step measured without nsys, where known (it calibrates both replays); ``host_speed``: the
    timed processes' host speed relative to the profiled process's, where measured (the host's
    time in both replays is divided by it)."""
    cause = M.CAUSE_OF.get(klass)
    if cause is None:
        return Prediction(None, note=f"{klass}: no replay model")
    tl = TL.timeline(view)
    if tl is None:
        return Prediction(None, note="no GPU activity or CUDA calls of a launching thread")
    if tl.n_iterations < 2:
        return Prediction(None, note="fewer than 2 steady iterations: nothing to replay")
    pc = view.config.predict
    cache = V.trace_cache(view.trace)
    steps = steps_per_iteration(tl, pc)
    if step_ms and steps != 1.0:  # the measured time of one iteration: several steps
        step_ms *= steps
    key = ("fit", id(tl), step_ms, host_speed, repr(pc))
    if key not in cache:
        cache[key] = fit(tl, pc, step_ms, host_speed)
    how: Fit = cache[key]
    untraced = (how.overhead_ns, how.scale, how.speed, how.share)
    key = ("replayed", id(tl), *untraced)
    if key not in cache:  # the same two replays serve every class
        recorded = M.replay(tl)
        changed = how.overhead_ns or how.scale != 1.0 or how.speed != 1.0 or how.share
        cache[key] = (recorded, M.replay(tl, None, *untraced) if changed else recorded)
    recorded, base = cache[key]
    pct = pc.data_dispatch_percentile
    if cause in GC.CAUSES:  # the same GPU work at another rate
        rm = GC.gpu_removal(view, tl, cause)
    else:
        rm = M.removal(tl, cause, dispatch_percentile=pct, graph_turn_share=pc.graph_turn_share)
    after = M.replay(tl, rm, *untraced)
    found = _prediction(tl, recorded, base, after, pc)
    if found.speedup is None:
        return found
    found = _clamped(found, tl, rm, cause, base, after, how, pc, step_ms)
    return replace(
        _per_step(found, steps),
        trace_overhead_us=how.overhead_ns / 1e3,
        trace_overhead_share=how.share,
        stretch_scale=how.scale,
        calibrated=how.calibrated,
        host_speed=how.speed,
        note=found.note + how.note + _steps_words(steps, step_ms),
    )


def steps_per_iteration(tl: TL.Timeline, pc: PredictConfig | None = None) -> float:
    """How many of the loop's steps the window's iterations hold on average: 1, unless the
    median iteration (on the GPU's clock: anchor items) launches at least ``predict.multi_step``
    times the items of the smallest, then the window's items over the smallest's. A step
    launches the same work each time (its shapes may change, its kernel count hardly does), so
    an anchor that recurs only every few steps (a kernel one bucket length picks) gives
    iterations of 1, 2, 3 and 5 steps' items; a measured step is then a fraction of each, and
    fitting nsys's cost to it as to one iteration reads several steps' host time as nsys's. A
    save's or a log's extra items in one iteration leave the median where it was; iterations
    that are no whole multiples of the smallest (steps whose kernel count changes with their
    shapes) give no count of steps, and 1 stands (``predict.multiple_tolerance``)."""
    pc = pc or PredictConfig()
    n = tl.n_iterations
    if tl.edge_side != "gpu" or n < 2:
        return 1.0
    at = np.searchsorted(tl.edges, tl.item_start, side="right") - 1
    on = (at >= 0) & (at < n)
    count = np.bincount(at[on], minlength=n)
    low = int(count.min())
    if low <= 0 or np.median(count) < pc.multi_step * low:
        return 1.0
    ratio = count / low
    if (np.abs(ratio - np.rint(ratio)) > pc.multiple_tolerance).any():
        return 1.0
    first = 1 if n >= 3 else 0  # the replay's measured iterations (M._sim_edges)
    last = n - 1 if M.edge_items(tl)[-1] < 0 and n - 1 - first >= 1 else n
    return float(ratio[first:last].mean())


def _steps_words(steps: float, iteration_ms: float | None) -> str:
    """The note's words for an iteration of several steps ('' for one)."""
    if steps == 1.0:
        return ""
    said = f"; its iterations hold {steps:.3g} steps each on average (their items over the fewest"
    said += " an iteration holds)"
    if iteration_ms:
        said += f", so the measured step is {iteration_ms / steps:.4g} ms of {iteration_ms:.4g}"
    return said


def _per_step(found: Prediction, steps: float) -> Prediction:
    """``found`` with its per-iteration steps given per step (an iteration of ``steps``)."""
    if steps == 1.0:
        return found

    def each(ms: float | None) -> float | None:
        return None if ms is None else ms / steps

    return replace(
        found,
        step_ms=each(found.step_ms),
        observed_step_ms=each(found.observed_step_ms),
        floor_step_ms=each(found.floor_step_ms),
    )


def _floors(tl, rm, cause, base, after, how: Fit) -> dict[B.Clamp, float]:
    """What no removal can beat, per iteration (ns; :mod:`_bounds`)."""
    n = after.iterations
    lo, hi = B.measured_calls(tl, after.measured)
    gap, own, block, _, _ = M.replay_inputs(
        tl, rm, how.overhead_ns, how.scale, how.speed, how.share
    )
    floors = {
        B.Clamp.GPU_WORK: B.gpu_work_ns(tl, rm, after.measured, n),
        B.Clamp.HOST_WORK: B.host_work_ns(gap, own, block, lo, hi, n),
    }
    if cause == "launch":
        floors[B.Clamp.GPU_IDLE] = B.gpu_busy_ns(tl, base)
    return floors


def _clamped(found, tl, rm, cause, base, after, how: Fit, pc, step_ms) -> Prediction:
    """``found`` with its step raised to the highest floor (:mod:`_bounds`) where it went
    below it by more than ``predict.clamp_tolerance_share``, and the note saying so. The step
    the prediction gives is the step before (the measured ``step_ms`` where the replays were
    calibrated to it, else the base replay's) over the speedup: a fit that stopped at its
    bound short of the measured step leaves a speedup the measured step cannot take. A floor
    that step is below itself is none for it (the pageable_copies baseline's traced copies
    took longer than its timed ones'), and nothing is clamped."""
    floors = _floors(tl, rm, cause, base, after, how)
    which = max(floors, key=lambda k: floors[k])
    floor = floors[which]
    out = replace(found, floor_step_ms=floor / 1e6)
    before = base.total_ns / max(1, base.iterations)
    if how.calibrated and step_ms:
        before = step_ms * 1e6
    step = before / float(found.speedup)
    tol = pc.clamp_tolerance_share
    if not pc.clamp or floor <= 0 or step >= floor * (1 - tol):
        return out
    if before <= floor:  # the step before is below it too: no floor for that step (the
        return out  # traced GPU work was slower than the timed one's: pageable copies)
    speed = before / floor
    over = "the measured step" if before != base.total_ns / max(1, base.iterations) else "it"
    return replace(
        out,
        speedup=speed,
        ci_low=None if found.ci_low is None else min(found.ci_low * speed / found.speedup, speed),
        ci_high=None if found.ci_high is None else min(found.ci_high, speed),
        step_ms=floor / 1e6,
        clamp=which,
        unclamped_speedup=found.speedup,
        note=found.note + f"; clamped: {found.speedup:.3g}x over {over} gives "
        f"{step / 1e6:.4g} ms a step, below {B.WHAT[which]}, {floor / 1e6:.4g} ms a step, "
        f"which no removal can beat: {speed:.3g}x",
    )


#: The host probes a harness worker runs around its window (result.json's ``host_probe``):
#: us per asynchronous launch of a trivial op, ms of a fixed pure-Python loop.
PROBE_KEYS = ("launch_us", "python_ms")


def host_speed(
    profiled: Mapping[str, float | None], timed: Mapping[str, float | None]
) -> float | None:
    """The timed processes' host speed relative to the profiled process's: profiled probe /
    timed probe (> 1: the timed host was faster), the geometric mean over the probes of
    :data:`PROBE_KEYS` both sides measured (a host-bound step is launches and Python both);
    None where no probe was measured on both sides."""
    ratios = []
    for key in PROBE_KEYS:
        p, t = profiled.get(key), timed.get(key)
        if p is None or t is None:
            continue
        p, t = float(p), float(t)
        if math.isfinite(p) and math.isfinite(t) and p > 0 and t > 0:
            ratios.append(math.log(p / t))
    return math.exp(sum(ratios) / len(ratios)) if ratios else None


def saving(speedup: float) -> float:
    """The share of the step a predicted speedup saves: ``1 - 1 / speedup``."""
    return 1.0 - 1.0 / max(float(speedup), 1e-9)


def usable_speed(pc: PredictConfig, host_speed: float | None) -> tuple[float, str]:
    """The host speed the replays use, and the note's words for it: 1.0 where none was
    measured, ``predict.host_speed`` is off, or it lies outside 1 / ``max_host_speed`` ..
    ``max_host_speed`` (a probe misread, not a host: the note says so)."""
    if host_speed is None or not np.isfinite(host_speed) or host_speed <= 0:
        return 1.0, ""
    if not pc.host_speed:
        return (
            1.0,
            f"; the measured host speed {host_speed:.3g} not used (predict.host_speed=false)",
        )
    top = pc.max_host_speed
    if not 1.0 / top <= host_speed <= top:
        return 1.0, (
            f"; the measured host speed {host_speed:.3g} not used (outside 1/{top:g}-{top:g}: "
            "predict.max_host_speed)"
        )
    return float(host_speed), (
        f"; the profiled process's host time divided by {host_speed:.3g}, the timed processes' "
        "host speed relative to its own"
    )


def fit(
    tl: TL.Timeline, pc: PredictConfig, step_ms: float | None, host_speed: float | None = None
) -> Fit:
    """nsys's cost per call and the stretches' scale for this window: fitted to ``step_ms``
    where it can tell them, else the default cost (``predict.trace_overhead_us``); the host's
    time first divided by ``host_speed`` where measured (:func:`usable_speed`)."""
    v, said = usable_speed(pc, host_speed)
    got = _fit(tl, pc, step_ms, v)
    if v != 1.0 and got.calibrated and step_ms:
        miss = _miss(tl, got, step_ms, v)
        if abs(miss) > pc.host_speed_max_miss:
            plain = _fit(tl, pc, step_ms, 1.0)
            if abs(_miss(tl, plain, step_ms, 1.0)) < abs(miss):
                said = (
                    f"; the measured host speed {v:.3g} not used: with it the replay misses the "
                    f"measured step by {miss:+.0%} at the fit's bound (predict.host_speed_max_miss)"
                )
                return replace(plain, speed=1.0, note=said + plain.note)
    return replace(got, speed=v, note=said + got.note)


def _miss(tl: TL.Timeline, got: Fit, step_ms: float, v: float) -> float:
    """How far the replay with nothing removed, made as ``got`` says, is from ``step_ms``."""
    return _per_iteration(tl, got.overhead_ns, got.scale, v, got.share) / (step_ms * 1e6) - 1.0


def _fit(tl: TL.Timeline, pc: PredictConfig, step_ms: float | None, v: float) -> Fit:
    if not pc.untraced:
        return Fit(0, note="; for the traced run (predict.untraced=false)")
    phi = pc.trace_overhead_share
    default = 0 if phi > 0 else int(pc.trace_overhead_us * 1e3)
    cost = _cost_words(default, phi)
    if step_ms is None or step_ms <= 0:
        return Fit(default, note=f"; {cost} (no untraced step to calibrate it)", share=phi)
    if not pc.calibrate:
        return Fit(default, note=f"; {cost} (predict.calibrate=false)", share=phi)
    why = _not_the_step(tl, pc, step_ms)
    if why:
        return Fit(default, note=f"; {cost} ({why})", share=phi)
    step_ns = int(step_ms * 1e6)
    rate = _calls_per_ms(tl, step_ms)
    o, p, words = default, phi, cost
    flat = (
        f"{cost}, kept: the GPU's work sets the replayed step, which neither it nor the "
        "host's stretches move"
    )
    if rate >= pc.calibrate_min_calls_per_ms:
        top = int(pc.calibrate_max_overhead_us * 1e3)
        if _flat(lambda x: _per_iteration(tl, int(x), 1.0, v, phi), 0, top, step_ns):
            if _flat(
                lambda k: _per_iteration(tl, o, k, v, p),
                1.0 / pc.calibrate_max_stretch_scale,
                pc.calibrate_max_stretch_scale,
                step_ns,
            ):
                return Fit(o, 1.0, True, _fitted(tl, o, 1.0, step_ms, v, p) + f" ({flat})", share=p)
        else:
            o, p = calibrated_overhead(tl, step_ns, top, v), 0.0
            words = f"nsys's cost fitted to it: {o / 1e3:.3g} us a call"
            if abs(_per_iteration(tl, o, 1.0, v) / step_ns - 1.0) <= 0.01:
                return Fit(o, 1.0, True, _fitted(tl, o, 1.0, step_ms, v) + f" ({words})")
    else:
        words += f" ({rate:.2g} calls per ms of step: too few to fit it)"
    if not (tl.gap_kind != TL.DISPATCH).any():  # no host stretch to take the rest
        if p:
            return Fit(
                o, note=f"; {words}, and no host stretch to fit the measured step to", share=p
            )
        return Fit(o, 1.0, True, _fitted(tl, o, 1.0, step_ms, v) + f" ({words})")
    top = pc.calibrate_max_stretch_scale
    k = calibrated_scale(tl, step_ns, o, top, v, p)
    said = _fitted(tl, o, k, step_ms, v, p) + f" ({words}; the host's stretches scaled by {k:.3g})"
    return Fit(o, k, True, said, share=p)


def _cost_words(overhead_ns: int, share: float) -> str:
    """The note's words for the default cost of nsys per call."""
    if share:
        return f"nsys's cost {share:.0%} of each call's recorded dispatch and call time"
    return f"nsys's cost {overhead_ns / 1e3:g} us a call"


def _fitted(
    tl: TL.Timeline, overhead_ns: int, scale: float, step_ms: float, v: float, share: float = 0.0
) -> str:
    """The note's words for a fit: the measured step, and how far the replay got to it."""
    r = M.replay(tl, None, overhead_ns, scale, v, share)
    got = r.total_ns / max(1, r.iterations) / 1e6
    off = got / step_ms - 1.0
    miss = "" if abs(off) <= 0.01 else f", which the replay misses by {off:+.0%} at the fit's bound"
    return f"; calibrated to the measured untraced step, {step_ms:.4g} ms{miss}"


def _not_the_step(tl: TL.Timeline, pc: PredictConfig, step_ms: float) -> str:
    """Why the measured step is not the traced iteration's ('' when it is): one layer of a
    step, say, found as the iteration."""
    traced_ms = _traced_ms(tl)
    top = pc.calibrate_max_probe
    if not 0.5 <= traced_ms / step_ms <= top:
        return (
            f"the traced iteration, {traced_ms:.3g} ms, is not the measured {step_ms:.3g} ms step"
        )
    return ""


def _traced_ms(tl: TL.Timeline) -> float:
    rec = _recorded_edges(tl)
    return float(rec[-1] - rec[0]) / max(1, tl.n_iterations) / 1e6


def _calls_per_ms(tl: TL.Timeline, step_ms: float) -> float:
    inside = (tl.op_start >= tl.edges[0]) & (tl.op_start < tl.edges[-1])
    return np.count_nonzero(inside) / max(1, tl.n_iterations) / step_ms


def _per_iteration(
    tl: TL.Timeline, overhead_ns: int, scale: float, v: float = 1.0, share: float = 0.0
) -> float:
    r = M.replay(tl, None, overhead_ns, scale, v, share)
    return r.total_ns / max(1, r.iterations)


def _flat(replayed, lo: float, hi: float, step_ns: int) -> bool:
    """Whether the replayed step (``replayed(x)``, ns) moves by at most 1% of ``step_ns`` from
    ``lo`` to ``hi``: a step the GPU's work sets does not depend on the host's cost per call or
    its stretches, so the measured step cannot fit either (a search would stop at a bound, the
    largest cost, and a removal that leaves the host the bound would then find it nearly
    free)."""
    return abs(replayed(hi) - replayed(lo)) <= 0.01 * step_ns


def calibrated_overhead(tl: TL.Timeline, step_ns: int, top_ns: int, v: float = 1.0) -> int:
    """The cost per call (ns, in 0..``top_ns``) at which the replay with nothing removed takes
    ``step_ns`` per iteration: the replayed step falls as the cost rises (piecewise linearly),
    so a bracketing search finds it to 0.2% of the step. Where even ``top_ns`` leaves the
    replay slower (nsys slowed something other than its calls: its GIL trace lengthens the GIL
    waits), or 0 leaves it faster, the bound is taken (the note says by how much it misses).
    ``v``: the host speed the replays run at."""
    return int(
        _solve(lambda o: _per_iteration(tl, int(o), 1.0, v) - step_ns, 0, top_ns, step_ns, 100, -1)
    )


def calibrated_scale(
    tl: TL.Timeline, step_ns: int, overhead_ns: int, top: float, v: float = 1.0, share: float = 0.0
) -> float:
    """The scale (in 1/``top``..``top``) of the host's stretches at which the replay with
    nothing removed takes ``step_ns`` per iteration (the replayed step rises with it), to 0.2%
    of the step; the bound where none in the range does."""
    return float(
        _solve(
            lambda k: _per_iteration(tl, overhead_ns, k, v, share) - step_ns,
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


def _recorded_edges(tl: TL.Timeline) -> np.ndarray:
    """The recorded GPU-clock edges: the recorded start of each iteration's first item."""
    k = M.edge_items(tl)
    done = int(tl.item_end.max()) if tl.item_end.size else int(tl.edges[-1])
    return np.maximum.accumulate(np.where(k >= 0, tl.item_start[np.maximum(k, 0)], done))


def _interval(base: np.ndarray, after: np.ndarray, speed: float, pc: PredictConfig):
    """95% interval of the speedup from the per-iteration spread: the ratio sum(base) /
    sum(after) over iterations resampled with replacement, relative to its value on all of
    them, applied to ``speed`` (fixed seed: the same report gives the same interval)."""
    n = base.size
    if n < 3 or n != after.size or (base <= 0).any() or (after <= 0).any():
        return None, None
    rng = np.random.default_rng(pc.seed)
    idx = rng.integers(0, n, size=(pc.bootstrap, n))
    num = base[idx].sum(axis=1).astype(float)
    den = np.maximum(1.0, after[idx].sum(axis=1).astype(float))
    point = float(base.sum()) / float(after.sum())
    lo, hi = np.percentile(num / den / point, [2.5, 97.5])
    return float(speed * lo), float(speed * hi)
