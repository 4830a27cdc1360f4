"""The one decide step: a class's candidate finding, its prediction, and its state.

A detector (``registry``) returns its class's *candidate*: the metrics and evidence of what the
GPU and the host did, and a state that says whether the class is a candidate at all (host_sync
needs a blocking sync per step; the others always are), or, where the detector's own number
decides (a CPU capture's shares, ``exposed_comm``, ``stage_imbalance``, which also set their own
prediction), the verdict. :func:`judge` runs the detector and :func:`decide` settles it:

- for a class the time model replays (``timemodel.CAUSE_OF``: data_stall, pageable_copy,
  launch_bound, host_sync, gil_contention) on a GPU capture, one number decides: the saving its
  prediction gives, ``1 - 1 / predicted_speedup``. The class fires when that saving is at or
  over its section's ``min_saving_share`` (and its detector found it a candidate); the impact is
  that saving and the reason prints it. Where the program's untraced step is known
  (``step_ms``) the prediction is calibrated to it, and where the timed host's speed relative to
  the profiled one is measured (``host_speed``) the profiled host's time is scaled to it first
  (:mod:`analysis.detect.timemodel`). Where the model cannot run (fewer than two steady
  iterations, no launching thread, predictions switched off) the class is not judged and says
  why;
- a CPU capture (no GPU activity) has no model: data_stall and gil_contention keep their own
  rules there (the share of the window in input runs, which is data_stall's prediction too;
  the share of step time in GIL waits);
- every other finding keeps the state and the prediction its detector gave.

Findings are frozen: each step returns a new one.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from analysis import trace as T
from analysis.detect import timemodel as TM
from analysis.detect.config import DiagnosisConfig, load_thresholds
from analysis.detect.registry import REGISTRY
from analysis.detect.view import TraceView
from analysis.findings import PREDICTION_FIELDS, Finding, State
from bottlenecks import ClassSpec

__all__ = ["candidate", "decide", "judge", "trace_only"]


def judge(
    view: TraceView,
    spec: ClassSpec,
    *,
    step_ms: float | None = None,
    host_speed: float | None = None,
    found: Finding | None = None,
) -> Finding:
    """The class's finding on ``view``: its detector's candidate (``found``, where the caller
    has it from :func:`candidate`), decided (:func:`decide`); ``step_ms``, ``host_speed``: see
    :func:`analysis.detect.diagnose`."""
    section = getattr(view.config, spec.thresholds)
    found = candidate(view, spec) if found is None else found
    return decide(view, found, section, step_ms=step_ms, host_speed=host_speed)


def candidate(view: TraceView, spec: ClassSpec) -> Finding:
    """The class's detector's finding on ``view``, before the decide step (not judged where
    nothing on the report can be)."""
    lost = view.unjudgeable()
    if lost:
        return Finding(spec.name, State.NOT_JUDGED, reason=lost)
    return REGISTRY[spec.name](view, getattr(view.config, spec.thresholds))


def decide(
    view: TraceView,
    candidate: Finding,
    section: Any,
    *,
    step_ms: float | None = None,
    host_speed: float | None = None,
) -> Finding:
    """``candidate`` with its prediction and, for a class the time model replays on a GPU
    capture, its state from the predicted saving against ``section.min_saving_share``."""
    klass = candidate.klass
    if candidate.predicted_speedup is not None:  # the detector's own prediction stands
        return candidate
    if not candidate.judged:
        return replace(candidate, prediction_note="not judged: nothing to predict")
    if klass not in TM.CAUSE_OF:
        note = candidate.prediction_note or f"{klass}: no prediction model"
        return replace(candidate, prediction_note=note)
    if not view.has_gpu:
        note = "a CPU capture: no time model (the class's own share decides)"
        return replace(candidate, prediction_note=note)
    if not view.config.predict.enabled:
        return _not_judged(candidate, "predictions are off (diagnosis.predict.enabled=false)")
    p = TM.predict(view, klass, step_ms, host_speed)
    if p.speedup is None:
        why = f"the time model cannot predict it: {p.note}"
        return _not_judged(replace(candidate, prediction_note=p.note), why)
    predicted = _with_prediction(candidate, p)
    bar = float(section.min_saving_share)
    share = round(TM.saving(predicted.predicted_speedup), 4)
    fired = candidate.fired and share >= bar
    lo, hi = predicted.interval
    ci = f" [{lo:.2f}-{hi:.2f}]" if lo is not None and hi is not None else ""
    how = "calibrated to the untraced step" if p.calibrated else "from the trace alone"
    clause = (
        f"removing it entirely: predicted {predicted.predicted_speedup:.2f}x{ci} ({how}), a "
        f"saving of {share:.1%} of the step ({'>=' if share >= bar else '<'} {bar:.0%})"
    )
    return replace(
        predicted,
        metrics={**predicted.metrics, "predicted_saving_share": share},
        reason=f"{candidate.reason}; {clause}" if candidate.reason else clause,
        state=State.FIRED if fired else State.CLEAR,
        impact=max(0.0, min(1.0, share)) if fired else 0.0,
    )


def trace_only(trace: T.Trace, thresholds: DiagnosisConfig | Any, f: Finding) -> float | None:
    """``f``'s predicted speedup as the trace alone gives it (nsys's default cost per call, no
    measured step): what ``harness diagnose`` says of a report without ``--step-ms``.
    ``thresholds``: as :func:`analysis.detect.load_thresholds` takes them."""
    if f.klass not in TM.CAUSE_OF or not f.judged:
        return f.predicted_speedup
    view = TraceView(trace, load_thresholds(thresholds))
    if not view.config.predict.enabled or not view.has_gpu:
        return None
    return TM.predict(view, f.klass).speedup


def _with_prediction(f: Finding, p: TM.Prediction) -> Finding:
    """``f`` with the prediction's fields and the time model's own metrics."""
    r4 = lambda x: None if x is None else round(x, 4)  # noqa: E731
    values = (r4(p.speedup), r4(p.ci_low), r4(p.ci_high), r4(p.step_ms), str(p.clamp), p.note)
    metrics = dict(f.metrics)
    if p.floor_step_ms is not None:
        metrics["floor_step_ms"] = round(float(p.floor_step_ms), 4)
    if p.unclamped_speedup is not None:
        metrics["unclamped_predicted_speedup"] = round(float(p.unclamped_speedup), 4)
    if p.trace_overhead_share:
        metrics["trace_overhead_share"] = round(float(p.trace_overhead_share), 4)
    if p.host_speed != 1.0:
        metrics["host_speed_ratio"] = round(float(p.host_speed), 4)
    metrics["model_fit"] = round(float(p.model_fit or 0.0), 4)
    metrics["observed_step_ms"] = round(float(p.observed_step_ms or 0.0), 4)
    metrics["trace_overhead_us"] = round(float(p.trace_overhead_us or 0.0), 3)
    if p.stretch_scale != 1.0:
        metrics["host_stretch_scale"] = round(float(p.stretch_scale), 4)
    return replace(f, metrics=metrics, **dict(zip(PREDICTION_FIELDS, values, strict=True)))


def _not_judged(f: Finding, why: str) -> Finding:
    return replace(
        f,
        state=State.NOT_JUDGED,
        impact=0.0,
        reason=f"{f.reason}; not judged: {why}" if f.reason else f"not judged: {why}",
        prediction_note=f.prediction_note or why,
    )
