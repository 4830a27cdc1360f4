"""launch_bound: kernels so short that the host cannot launch them as fast as the GPU runs them.

For each kernel, the GPU-idle gap before it (its start minus the latest end of any earlier GPU
activity) is a *launch gap* when it is shorter than ``max_gap_us`` and the kernel's own launch
call (joined by correlation id) had not yet returned when the GPU went idle: the GPU waited for
the launching thread. Rule: median kernel duration <= ``max_median_kernel_us`` AND launch gaps
cover >= ``min_launch_gap_share`` of the window. impact = launch_gap_share.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from analysis import trace as T
from analysis.detect import _common as C
from analysis.findings import Finding

KLASS = "launch_bound"


def detect(trace: T.Trace, thresholds: Mapping[str, Any]) -> Finding:
    th = thresholds[KLASS]
    if not trace.has(C.KERNEL):
        return C.missing(KLASS, C.KERNEL, "CUDA kernels")
    st, act = C.steady_activity(trace, thresholds)
    metrics: dict[str, float] = {}
    is_k = act.kind == C.KIND_KERNEL
    n_kernels = int(is_k.sum())
    name, value = st.rate("kernels", n_kernels)
    metrics[name] = value
    dur = act.end - act.start
    metrics["median_kernel_us"] = float(np.median(dur[is_k]) / 1e3) if n_kernels else 0.0
    # idle gap before each activity: its start minus the running max of earlier ends
    prev_end = np.concatenate([[st.lo], np.maximum.accumulate(act.end)[:-1]]).astype(np.int64)
    gap = act.start - prev_end
    launch = C.launches(trace, st.lo, st.hi)
    launch_end = C.launch_end_of(launch, act.corr)
    waited = launch_end >= prev_end  # the launch call had not returned when the GPU ran dry
    lg = is_k & (gap > 0) & (gap <= th["max_gap_us"] * 1e3) & waited
    metrics["launch_gap_share"] = float(gap[lg].sum()) / st.span_ns
    bs, be = C.busy(trace, st, act)
    metrics["gpu_idle_share"] = C.length(*C.gaps(bs, be, st.lo, st.hi)) / st.span_ns
    in_launch = C.union(np.clip(launch["start"], st.lo, None), np.clip(launch["end"], None, st.hi))
    metrics["launch_api_share"] = C.length(*in_launch) / st.span_ns
    idx = np.flatnonzero(lg)
    top = idx[np.argsort(-gap[idx], kind="stable")[:3]]
    names = C.kernel_names(trace, act.rowid[top])
    evidence = [
        C.stamp(st, prev_end[i], act.start[i], next_kernel=str(n))
        for i, n in zip(top, names, strict=True)
    ]
    fired = (
        n_kernels > 0
        and metrics["median_kernel_us"] <= th["max_median_kernel_us"]
        and metrics["launch_gap_share"] >= th["min_launch_gap_share"]
    )
    reason = (
        f"median kernel {metrics['median_kernel_us']:.1f} us (launch-bound needs <= "
        f"{th['max_median_kernel_us']} us); launch gaps (< {th['max_gap_us']} us, GPU waiting "
        f"on the launch call) {metrics['launch_gap_share']:.1%} of the window (threshold "
        f"{th['min_launch_gap_share']:.0%}); {st.note}"
    )
    return Finding(
        KLASS, fired, metrics["launch_gap_share"] if fired else 0.0, metrics, evidence, reason
    )
