"""Every finding's predicted speedup, and for the classes the time model replays, the decision.

One number decides a class the time model replays (``_model.CAUSE_OF``: data_stall,
pageable_copy, launch_bound, host_sync, gil_contention) on a GPU capture: the saving its
prediction gives, ``1 - 1 / predicted_speedup``. The class fires when that saving is at or over
its ``min_saving_share`` (and its detector found it a candidate: host_sync needs a blocking sync
per step); the finding's impact is that saving and its reason prints it. The detectors' shares
stay as metrics, what the GPU and the host did; they do not decide. Where the program's untraced
step is known (``step_ms``) the prediction is calibrated to it (``_forecast``), else it is the
trace's alone; where the host's speed in the timed processes relative to the profiled one is
measured (``host_speed``: :func:`host_speed` of the harness's host probes), the profiled host's
time is scaled to it first. A predicted step never goes below what no removal can beat
(``_bounds``): where the replay did, the prediction is clamped and ``prediction_clamp`` says to
which floor. Where the model cannot run (fewer than two steady iterations, no launching
thread, predictions switched off), the class is not judged and says why.

A CPU capture (no GPU activity) has no model: data_stall and gil_contention keep their own rules
there (the share of step time in ``data_load`` ranges, in GIL waits), and carry no prediction.
``exposed_comm`` and ``stage_imbalance`` set their own prediction (a prediction a detector set
on its finding is kept); where they do not, it is read from their shares here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from analysis import trace as T
from analysis.detect import _common as C
from analysis.detect import _forecast as F
from analysis.detect import _model as M
from analysis.findings import Finding, State

__all__ = ["PROBE_KEYS", "attach", "host_speed", "saving", "trace_only"]

#: The host probes a harness worker runs around its window (result.json's ``host_probe``):
#: µs per asynchronous launch of a trivial op, ms of a fixed pure-Python loop.
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


def attach(
    trace: T.Trace,
    cfg: Mapping[str, Any],
    findings: list[Finding],
    step_ms: float | None = None,
    host_speed: float | None = None,
) -> None:
    """Fill in each finding's ``predicted_*`` fields and settle the state of each class the
    model replays (in place); ``step_ms``: the program's mean step measured without nsys, where
    known (the replays are calibrated to it); ``host_speed``: the timed processes' host speed
    relative to the profiled process's, where measured (:func:`host_speed`)."""
    enabled = bool(cfg.get("predict", {}).get("enabled", True))
    gpu = C.has_gpu(trace)
    for f in findings:
        if f.predicted_speedup is not None:
            continue
        if not f.judged:
            f.prediction_note = "not judged: nothing to predict"
        elif f.klass in M.CAUSE_OF and not gpu:
            f.prediction_note = "a CPU capture: no time model (the class's own share decides)"
        elif f.klass in M.CAUSE_OF and not enabled:
            _not_judged(f, "predictions are off (diagnosis.predict.enabled=false)")
        elif f.klass in M.CAUSE_OF:
            p = F.predict(trace, cfg, f.klass, step_ms, host_speed)
            _from_model(f, p)
            _decide(f, cfg, p)
        elif not f.prediction_note:
            f.prediction_note = f"{f.klass}: no prediction model"


def saving(speedup: float) -> float:
    """The share of the step a predicted speedup saves: ``1 - 1 / speedup``."""
    return 1.0 - 1.0 / max(float(speedup), 1e-9)


def trace_only(trace: T.Trace, cfg: Mapping[str, Any], f: Finding) -> float | None:
    """``f``'s predicted speedup as the trace alone gives it (nsys's default cost per call, no
    measured step): what ``harness diagnose`` says of a report without ``--step-ms``."""
    if f.klass not in M.CAUSE_OF or not f.judged:
        return f.predicted_speedup
    if not bool(cfg.get("predict", {}).get("enabled", True)) or not C.has_gpu(trace):
        return None
    return F.predict(trace, cfg, f.klass).speedup


def _from_model(f: Finding, p: F.Prediction) -> None:
    f.prediction_note = p.note
    if p.speedup is None:
        return
    f.predicted_speedup = round(p.speedup, 4)
    f.predicted_speedup_ci_low = None if p.ci_low is None else round(p.ci_low, 4)
    f.predicted_speedup_ci_high = None if p.ci_high is None else round(p.ci_high, 4)
    f.predicted_step_ms = None if p.step_ms is None else round(p.step_ms, 4)
    f.prediction_clamp = str(p.clamp)
    if p.floor_step_ms is not None:
        f.metrics["floor_step_ms"] = round(float(p.floor_step_ms), 4)
    if p.unclamped_speedup is not None:
        f.metrics["unclamped_predicted_speedup"] = round(float(p.unclamped_speedup), 4)
    if p.trace_overhead_share:
        f.metrics["trace_overhead_share"] = round(float(p.trace_overhead_share), 4)
    if p.host_speed != 1.0:
        f.metrics["host_speed_ratio"] = round(float(p.host_speed), 4)
    f.metrics["model_fit"] = round(float(p.model_fit or 0.0), 4)
    f.metrics["observed_step_ms"] = round(float(p.observed_step_ms or 0.0), 4)
    f.metrics["trace_overhead_us"] = round(float(p.trace_overhead_us or 0.0), 3)
    if p.stretch_scale != 1.0:
        f.metrics["host_stretch_scale"] = round(float(p.stretch_scale), 4)


def _decide(f: Finding, cfg: Mapping[str, Any], p: F.Prediction) -> None:
    """The state, impact and the reason's last clause from the prediction's saving. The
    detector's own state says whether the class is a candidate (host_sync: enough blocking
    syncs per step; the others always are)."""
    if f.predicted_speedup is None:
        _not_judged(f, f"the time model cannot predict it: {p.note}")
        return
    bar = float(cfg[f.klass]["min_saving_share"])
    share = round(saving(f.predicted_speedup), 4)
    f.metrics["predicted_saving_share"] = share
    fired = f.fired and share >= bar
    lo, hi = f.predicted_speedup_ci_low, f.predicted_speedup_ci_high
    ci = f" [{lo:.2f}-{hi:.2f}]" if lo is not None and hi is not None else ""
    how = "calibrated to the untraced step" if p.calibrated else "from the trace alone"
    clause = (
        f"removing it entirely: predicted {f.predicted_speedup:.2f}x{ci} ({how}), a saving of "
        f"{share:.1%} of the step ({'>=' if share >= bar else '<'} {bar:.0%})"
    )
    f.reason = f"{f.reason}; {clause}" if f.reason else clause
    f.state = State.FIRED if fired else State.CLEAR
    f.impact = max(0.0, min(1.0, share)) if fired else 0.0


def _not_judged(f: Finding, why: str) -> None:
    f.state = State.NOT_JUDGED
    f.impact = 0.0
    f.reason = f"{f.reason}; not judged: {why}" if f.reason else f"not judged: {why}"
    f.prediction_note = f.prediction_note or why
