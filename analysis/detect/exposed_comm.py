"""exposed_comm: NCCL collectives that no compute kernel overlaps.

Rule: (time covered by NCCL kernels - the part of it covered by non-NCCL kernels) / window
>= ``min_nccl_exposed_share``. NCCL kernels are those with ``nccl`` in the name. impact = the
exposed share.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from analysis import trace as T
from analysis.detect import _common as C
from analysis.findings import Finding

KLASS = "exposed_comm"


def detect(trace: T.Trace, thresholds: Mapping[str, Any]) -> Finding:
    th = thresholds[KLASS]
    if not trace.has(C.KERNEL):
        return C.missing(KLASS, C.KERNEL, "CUDA kernels")
    st, act = C.steady_activity(trace, thresholds)
    k = act[act["kind"] == "kernel"]
    nccl = k[k["is_nccl"]]
    ns, ne = C.union(nccl["start_ns"], nccl["end_ns"])
    cs, ce = C.union(k.loc[~k["is_nccl"], "start_ns"], k.loc[~k["is_nccl"], "end_ns"])
    hidden = C.overlap_each(ns, ne, cs, ce)
    exposed_each = (ne - ns) - hidden
    metrics: dict[str, float] = {
        "nccl_share": C.length(ns, ne) / st.span_ns,
        "nccl_exposed_share": float(exposed_each.sum()) / st.span_ns,
    }
    name, value = st.rate("nccl_kernels", len(nccl))
    metrics[name] = value
    top = np.argsort(-exposed_each, kind="stable")[:3]
    evidence = [
        C.stamp(st, ns[i], ne[i], exposed_ns=int(exposed_each[i]))
        for i in top
        if exposed_each[i] > 0
    ]
    fired = metrics["nccl_exposed_share"] >= th["min_nccl_exposed_share"]
    reason = (
        f"{len(nccl)} NCCL kernels in the window; not overlapped by compute "
        f"{metrics['nccl_exposed_share']:.1%} of the window (threshold "
        f"{th['min_nccl_exposed_share']:.0%}); {st.note}"
    )
    return Finding(
        KLASS, fired, metrics["nccl_exposed_share"] if fired else 0.0, metrics, evidence, reason
    )
