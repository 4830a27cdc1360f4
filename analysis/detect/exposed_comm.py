"""exposed_comm: NCCL collectives that no compute kernel overlaps.

Rule, per GPU (``deviceId``): exposed_d = time covered by device d's NCCL kernels - the part of
it covered by device d's own non-NCCL kernels. A report may hold several ranks (DDP, one GPU
each); judging each device on its own keeps rank A's NCCL wait from looking hidden behind rank
B's compute. ``nccl_exposed_share`` = mean over the devices that run NCCL kernels in the window
of exposed_d / window, and the rule fires when it is >= ``min_nccl_exposed_share``. The mean,
not the max: with ranks in lockstep every rank's step waits for the collective, so the mean is
what the step time feels, and one straggler's wait does not count as everyone's. With one GPU
it is that GPU's share (as before). impact = the exposed share. NCCL kernels are those with
``nccl`` in the name.

Per-device shares are reported as ``nccl_exposed_share_gpu<deviceId>`` with their
``nccl_exposed_share_max`` / ``_min``. The export cannot tell a rank waiting for a late peer
from one moving bytes (both are time inside the NCCL kernel), but the spread is a hint: a
collective ends on all ranks together, so the rank that arrives last sees the shortest kernel;
``_min`` is roughly what every rank pays (transfer, or a wait common to all), ``_max - _min``
the part one rank spends waiting for others (skew, stragglers, load imbalance).
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
    if not C.has_gpu(trace):
        return C.missing(KLASS, C.KERNEL, "GPU activity")
    st, act = C.steady_activity(trace, thresholds)
    is_k = act.kind == C.KIND_KERNEL
    nccl = is_k & act.nccl
    compute = is_k & ~act.nccl
    devices = np.unique(act.device[nccl])  # the GPUs that take part in collectives
    nccl_ns: list[int] = []
    exposed_ns: list[int] = []
    # per exposed NCCL interval (union per device): start, end, exposed ns, device
    iv_s, iv_e, iv_x, iv_d = [], [], [], []
    for d in devices:
        on = act.device == d
        ns, ne = C.union(act.start[nccl & on], act.end[nccl & on])
        cs, ce = C.union(act.start[compute & on], act.end[compute & on])
        exposed_each = (ne - ns) - C.overlap_each(ns, ne, cs, ce)
        nccl_ns.append(C.length(ns, ne))
        exposed_ns.append(int(exposed_each.sum()))
        iv_s.append(ns)
        iv_e.append(ne)
        iv_x.append(exposed_each)
        iv_d.append(np.full(ns.size, d, np.int64))
    per_dev = [x / st.span_ns for x in exposed_ns]
    metrics: dict[str, float] = {
        "nccl_share": float(np.mean(nccl_ns)) / st.span_ns if nccl_ns else 0.0,
        "nccl_exposed_share": float(np.mean(per_dev)) if per_dev else 0.0,
    }
    n_nccl = int(nccl.sum())
    name, value = st.rate("nccl_kernels", n_nccl)
    metrics[name] = value
    metrics["nccl_exposed_share_max"] = max(per_dev, default=0.0)
    metrics["nccl_exposed_share_min"] = min(per_dev, default=0.0)
    for d, share in zip(devices, per_dev, strict=True):
        metrics[f"nccl_exposed_share_gpu{int(d)}"] = share
    evidence = []
    if iv_s:
        s, e = np.concatenate(iv_s), np.concatenate(iv_e)
        x, dev = np.concatenate(iv_x), np.concatenate(iv_d)
        top = C.top(x)
        evidence = [
            C.stamp(st, s[i], e[i], exposed_ns=int(x[i]), device=int(dev[i]))
            for i in top
            if x[i] > 0
        ]
    fired = metrics["nccl_exposed_share"] >= th["min_nccl_exposed_share"]
    per_gpu = ""
    if devices.size > 1:
        per_gpu = (
            f" (mean over {devices.size} GPUs, each against its own compute; per GPU "
            f"{metrics['nccl_exposed_share_min']:.1%} to {metrics['nccl_exposed_share_max']:.1%})"
        )
    reason = (
        f"{n_nccl} NCCL kernels in the window; not overlapped by compute "
        f"{metrics['nccl_exposed_share']:.1%} of the window{per_gpu} (threshold "
        f"{th['min_nccl_exposed_share']:.0%}); {st.note}"
    )
    return Finding(
        KLASS, fired, metrics["nccl_exposed_share"] if fired else 0.0, metrics, evidence, reason
    )
