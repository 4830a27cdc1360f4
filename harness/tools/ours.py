"""``ours``: the suite's own detectors (``analysis.detect.diagnose``) on the nsys export, as one
tool among the others; the evidence is each finding's main metric and impact. In a run's tools
step the diagnosis's own calls on the same export (diagnosis.csv, findings.csv) come in
``Traces.extra["findings"]`` instead of running the detectors a second time."""

from __future__ import annotations

from analysis.detect import diagnose, load_thresholds
from analysis.detect.config import MAIN_METRIC
from analysis.findings import Finding
from analysis.trace import Trace
from harness.tools.base import BuiltIn, Call, Calls, Context, Flag, Traces, on_export, register


def _evidence(f: Finding) -> str:
    """``gpu_idle_share=0.42; impact 0.38``: the class's main metric and the step share."""
    metric = MAIN_METRIC.get(f.klass, "")
    parts = [f"{metric}={f.metrics[metric]:.3g}"] if metric in f.metrics else []
    if f.fired:
        parts.append(f"impact {f.impact:.2f}")
    return "; ".join(parts)


@register
class Ours(BuiltIn):
    """The detectors: a class is flagged when its detector fires (not only the primary)."""

    name = "ours"
    reads = "sqlite"

    def judge(self, traces: Traces, ctx: Context) -> Calls:
        judged = traces.extra.get("findings")  # the run's diagnosis judged this export already
        if judged and traces.sqlite is not None:
            return dict(judged)  # type: ignore[call-overload]
        return on_export(traces, lambda trace: _calls(trace, traces, ctx))


def _calls(trace: Trace, traces: Traces, ctx: Context) -> Calls:
    """The detectors' findings as the tool's calls: n/a where a class was not judged."""
    found = diagnose(trace, load_thresholds(ctx.diagnosis), step_ms=traces.step_ms)
    out: Calls = {}
    for f in found:
        if not f.judged:
            out[f.klass] = Call(Flag.NA, f.reason)
        else:
            out[f.klass] = Call(Flag.FLAGGED if f.fired else Flag.CLEAR, _evidence(f))
    return out
