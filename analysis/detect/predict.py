"""Every finding's predicted speedup: what removing its cause entirely would do to the step.

The classes the time model replays (``_model.CAUSE_OF``) get their prediction from the replay;
``exposed_comm`` from its own exposed share (the collectives' unhidden time gone, nothing else
moved); ``stage_imbalance`` from the balanced split's bound its detector reads. A prediction a
detector sets on its finding itself is kept. A finding that was not judged, or that the model cannot
replay, carries no number and a ``prediction_note`` saying why. Where the prediction is
calibrated to the untraced step, a fired finding whose predicted saving falls under its class's
bar is cleared (``predict.calibrated_bar``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from analysis import trace as T
from analysis.detect import _model as M
from analysis.findings import Finding, State

__all__ = ["attach", "trace_only"]


def attach(
    trace: T.Trace, cfg: Mapping[str, Any], findings: list[Finding], step_ms: float | None = None
) -> None:
    """Fill in each finding's ``predicted_*`` fields (in place); ``step_ms``: the program's mean
    step measured without nsys, where known (the replay calibrates nsys's cost to it)."""
    enabled = bool(cfg.get("predict", {}).get("enabled", True))
    for f in findings:
        if f.predicted_speedup is not None:
            continue
        if not f.judged:
            f.prediction_note = "not judged: nothing to predict"
        elif not enabled:
            f.prediction_note = "predictions are off (diagnosis.predict.enabled=false)"
        elif f.klass in M.CAUSE_OF:
            p = M.predict(trace, cfg, f.klass, step_ms)
            _from_model(f, p)
            if p.calibrated and step_ms and cfg.get("predict", {}).get("calibrated_bar", True):
                _settle(f, cfg, step_ms)
        elif f.klass == "exposed_comm":
            _exposed(f)
        elif f.klass == "stage_imbalance":
            _balanced(f)
        elif not f.prediction_note:
            f.prediction_note = f"{f.klass}: no prediction model"


def trace_only(trace: T.Trace, cfg: Mapping[str, Any], f: Finding) -> float | None:
    """``f``'s predicted speedup as the trace alone gives it (nsys's default cost per call, no
    measured step): what ``harness diagnose`` says of a report without ``--step-ms``."""
    if f.klass not in M.CAUSE_OF or not f.judged:
        return f.predicted_speedup
    if not bool(cfg.get("predict", {}).get("enabled", True)):
        return None
    return M.predict(trace, cfg, f.klass).speedup


def _from_model(f: Finding, p: M.Prediction) -> None:
    f.prediction_note = p.note
    if p.speedup is None:
        return
    f.predicted_speedup = round(p.speedup, 4)
    f.predicted_speedup_ci_low = None if p.ci_low is None else round(p.ci_low, 4)
    f.predicted_speedup_ci_high = None if p.ci_high is None else round(p.ci_high, 4)
    f.predicted_step_ms = None if p.step_ms is None else round(p.step_ms, 4)
    f.metrics["model_fit"] = round(float(p.model_fit or 0.0), 4)
    f.metrics["observed_step_ms"] = round(float(p.observed_step_ms or 0.0), 4)
    f.metrics["trace_overhead_us"] = round(float(p.trace_overhead_us or 0.0), 3)


def _settle(f: Finding, cfg: Mapping[str, Any], step_ms: float) -> None:
    """Clear a fired finding whose calibrated prediction saves less than its class's bar of
    the measured step (``predict.calibrated_bar``): what the trace showed above that was
    nsys's own cost per call, which the untraced program does not pay."""
    bar = cfg.get(f.klass, {}).get("min_saving_share")
    if not f.fired or f.predicted_speedup is None or bar is None:
        return
    saving = 1.0 - 1.0 / max(f.predicted_speedup, 1e-9)
    if saving >= float(bar):
        return
    f.state = State.CLEAR
    f.reason += (
        f"; cleared: calibrated to the untraced step ({step_ms:.3g} ms), removing it saves an "
        f"estimated {100 * saving:.1f}% (< {100 * float(bar):g}%): the rest of the traced share "
        "was nsys's cost per call"
    )
    f.impact = round(max(saving, 0.0), 4)


def _balanced(f: Finding) -> None:
    """Stages re-split evenly: the window would take the balanced split's bound (the total
    work over the ranks plus the busiest rank's own idle, ``stage_imbalance``)."""
    share = float(f.metrics.get("balanced_share", 0.0))
    if share <= 0.0:
        f.prediction_note = "no balanced bound: the ranks' busy times were not read"
        return
    f.predicted_speedup = round(1.0 / share, 4)
    if "balanced_step_ms" in f.metrics:
        f.predicted_step_ms = round(float(f.metrics["balanced_step_ms"]), 4)
    f.prediction_note = "the stages re-split evenly: the balanced split's bound, all else kept"


def _exposed(f: Finding) -> None:
    """Collectives removed entirely: their exposed time goes, the rest stays where it was."""
    share = float(f.metrics.get("nccl_exposed_share", 0.0))
    if share >= 1.0:
        f.prediction_note = "the collectives cover the whole window: no step is left to predict"
        return
    f.predicted_speedup = round(1.0 / (1.0 - share), 4)
    f.prediction_note = (
        "the exposed collective time removed (mean over the GPUs), the rest of the window kept"
    )
