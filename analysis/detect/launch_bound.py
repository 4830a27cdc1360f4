"""launch_bound: the host cannot issue GPU work as fast as the GPU finishes it.

Kernels too short for their launch cost, a Python loop over time steps, batch-1 inference,
per-parameter optimizer loops: the GPU waits between kernels while the main thread runs Python,
autograd and launch calls. The GPU's idle time is attributed to what the main thread does
(``_host``); the part spent dispatching (inside and between closely spaced CUDA calls) and in
other host work between launches (stretches without input evidence), net of what the syncs
explain, is ``host_bound_share``: a reading off the window of what a host that issued work
instantly (CUDA graphs, fusion) would save. It, ``launch_gap_share`` (idle gaps shorter than
``max_gap_us`` in which the kernel's own launch call had not returned) and the median kernel are
metrics; they do not decide. The class is always a candidate (the state this module returns on
a GPU capture): :func:`analysis.detect.diagnose` fires it when the saving the time model predicts
for an instant host, ``1 - 1 / predicted_speedup``, is at least ``min_saving_share``, and that
saving is the impact (``predict``).
"""

from __future__ import annotations

import numpy as np

from analysis import trace as T
from analysis.detect import view as V
from analysis.detect._needs import host_lacking
from analysis.detect.config import LaunchBoundThresholds
from analysis.findings import Finding
from bottlenecks import Klass

KLASS = Klass.LAUNCH_BOUND


def detect(view: V.TraceView, th: LaunchBoundThresholds) -> Finding:
    lacking = host_lacking(view, KLASS)
    if lacking is not None:
        return lacking
    trace, st, act, host = view.trace, view.steady(), view.activity(), view.host()
    metrics: dict[str, float] = {}
    is_k = (act.kind == V.KIND_KERNEL) | (act.kind == V.KIND_GRAPH)
    name, value = st.rate("kernels", int(is_k.sum()))
    metrics[name] = value
    dur = act.end - act.start
    metrics["median_kernel_us"] = float(np.median(dur[is_k]) / 1e3) if is_k.any() else 0.0
    gap, prev_end, lg = _launch_gaps(trace, st, act, th)
    metrics["launch_gap_share"] = float(gap[lg].sum()) / st.span_ns
    metrics["gpu_idle_share"] = host.idle_ns / host.span_ns
    metrics["host_dispatch_share"] = host.share("dispatch")
    metrics["host_work_share"] = host.share("host")
    metrics["host_bound_share"] = metrics["host_dispatch_share"] + metrics["host_work_share"]
    idx = np.flatnonzero(lg)
    top = idx[V.top(gap[idx])]
    names = V.kernel_names(trace, act.rowid[top])
    evidence = [
        V.stamp(st, prev_end[i], act.start[i], next_kernel=str(n))
        for i, n in zip(top, names, strict=True)
    ]
    reason = (
        f"GPU idle {metrics['gpu_idle_share']:.1%} of the window while the main thread issues "
        f"work ({value:.0f} {name.replace('_', ' ')}, median {metrics['median_kernel_us']:.1f} us; "
        f"short launch gaps {metrics['launch_gap_share']:.1%}; idle read as dispatch "
        f"{metrics['host_dispatch_share']:.1%}, as other host work between launches "
        f"{metrics['host_work_share']:.1%}); {st.note}"
    )
    # a candidate: the decide step settles it on the predicted saving
    return Finding(KLASS, True, metrics["host_bound_share"], metrics, evidence, reason)


def _launch_gaps(trace: T.Trace, st: V.Steady, act: V.Activity, th: LaunchBoundThresholds):
    """Idle gap before each activity and which of them are short launch gaps (the kernel's own
    launch call had not returned when the GPU ran dry)."""
    prev_end = np.empty(max(1, len(act)), np.int64)  # the latest end before each activity
    prev_end[0] = st.lo
    np.maximum.accumulate(act.end[:-1], out=prev_end[1:])
    gap = act.start - prev_end
    launch_end = V.activity_launch_ends(trace, st, act)
    waited = launch_end >= prev_end
    is_k = (act.kind == V.KIND_KERNEL) | (act.kind == V.KIND_GRAPH)
    lg = is_k & (gap > 0) & (gap <= th.max_gap_us * 1e3) & waited
    return gap, prev_end, lg
