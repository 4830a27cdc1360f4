"""exposed_comm: communication that no compute overlaps.

Every NCCL kernel is split into its wait and its transfer by matching it across the ranks of the
report, and every wait is charged to what the rank it waited for was doing (:func:`~analysis.detect.view.charges`). The
communication of a GPU is its **transfers** (the part of its NCCL kernels after the last
participant arrived) and its **coupling waits**: waits on a rank that was issuing the same work
at the same pace, which the collectives cause by making equal ranks meet (each collective's issue
cost and latency, and the skew between ranks that each one passes on; a loop of hundreds of tiny
all-reduces lives there). Rule, per GPU (``deviceId``): exposed_d = the union of those, minus the
part the GPU's own compute (non-NCCL kernels, copies, memsets) covers; ``nccl_exposed_share`` =
the mean of exposed_d over the GPUs that run NCCL kernels in the window, as a share of the window.
It fires at ``min_nccl_exposed_share``, impact = that share, and the prediction is the same
number: the communication removed, everything else kept, ``1 / (1 - share)``. The mean, not the
max: with ranks in lockstep every rank's step feels the collectives.

Not communication, and not counted: waits on a late rank that computed or issued more work
(unequal work: ``stage_imbalance``), and waits on a late rank whose host was blocked in a sync or
busy without CUDA calls (input or other host work: that rank's own class). A kernel matched to
no peer (one GPU, or streams that do not line up) is all transfer. NCCL kernels are those with
``nccl`` in the name.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from analysis import trace as T
from analysis.detect import view as V
from analysis.detect.config import ExposedCommThresholds
from analysis.findings import Finding, missing
from bottlenecks import Klass

KLASS = Klass.EXPOSED_COMM


def detect(view: V.TraceView, th: ExposedCommThresholds) -> Finding:
    trace = view.trace
    if not view.has_gpu:
        return missing(KLASS, V.KERNEL, "GPU activity")
    st, act = view.steady(), view.activity()
    nccl = (act.kind == V.KIND_KERNEL) & act.nccl
    ch = V.charges(view, st)
    span = st.span_ns
    per: dict[str, list[float]] = {k: [] for k in ("nccl", "comm", *V.CHARGES)}
    iv_s, iv_e, iv_x, iv_d = [], [], [], []
    for d in ch.devices:
        on = nccl & (act.device == d)
        per["nccl"].append(V.length(*V.union(act.start[on], act.end[on])) / span)
        for what in V.CHARGES:
            per[what].append(ch.ns(d, what) / span)
        s, e = ch.union(d, "transfer", "coupling")
        per["comm"].append(V.length(s, e) / span)
        iv_s.append(s)
        iv_e.append(e)
        iv_x.append(e - s)
        iv_d.append(np.full(s.size, d, np.int64))
    devices = np.array(ch.devices, np.int64)
    metrics = _metrics(st, per, devices, int(nccl.sum()), trace, th)
    evidence = _evidence(st, iv_s, iv_e, iv_x, iv_d)
    share = metrics["nccl_exposed_share"]
    fired = share >= th.min_nccl_exposed_share
    if share < 1.0:  # the communication removed: the window less its share
        speedup: float | None = round(1.0 / (1.0 - share), 4)
        note = (
            "the communication removed (exposed transfers and the waits the collectives' "
            "coupling causes, mean over the GPUs), everything else kept"
        )
    else:
        speedup, note = None, "communication covers the whole window: no step is left to predict"
    reason = _reason(st, metrics, devices, th)
    return Finding(
        KLASS, fired, share, metrics, evidence, reason,
        predicted_speedup=speedup, prediction_note=note,
    )  # fmt: skip


def _metrics(
    st: V.Steady,
    per: dict[str, list[float]],
    devices: np.ndarray,
    n_nccl: int,
    trace: T.Trace,
    th: ExposedCommThresholds,
) -> dict[str, float]:
    mean = lambda xs: float(np.mean(xs)) if xs else 0.0  # noqa: E731
    metrics: dict[str, float] = {
        "nccl_share": mean(per["nccl"]),
        "nccl_exposed_share": mean(per["comm"]),
        "nccl_transfer_exposed_share": mean(per["transfer"]),
        "wait_coupling_share": mean(per["coupling"]),
        "wait_on_peer_compute_share": mean(per["peer_compute"]),
        "wait_on_peer_work_share": mean(per["peer_work"]),
        "wait_on_peer_host_share": mean(per["peer_host"]),
    }
    name, value = st.rate("nccl_kernels", n_nccl)
    metrics[name] = value
    metrics["nccl_exposed_share_max"] = max(per["comm"], default=0.0)
    metrics["nccl_exposed_share_min"] = min(per["comm"], default=0.0)
    for d, share in zip(devices, per["comm"], strict=True):
        metrics[f"nccl_exposed_share_gpu{int(d)}"] = share
    if devices.size:
        cm = V.comm(trace, st, th)
        if cm.start.size:
            metrics["nccl_matched_share"] = float(cm.matched.mean())
    return metrics


def _evidence(st: V.Steady, iv_s, iv_e, iv_x, iv_d) -> list[dict[str, Any]]:
    """The three transfers (per GPU union) with the most exposed time."""
    if not iv_s:
        return []
    s, e = np.concatenate(iv_s), np.concatenate(iv_e)
    x, dev = np.concatenate(iv_x), np.concatenate(iv_d)
    return [
        V.stamp(st, s[i], e[i], exposed_ns=int(x[i]), device=int(dev[i]))
        for i in V.top(x)
        if x[i] > 0
    ]


def _reason(
    st: V.Steady, m: dict[str, float], devices: np.ndarray, th: ExposedCommThresholds
) -> str:
    share, bar = m["nccl_exposed_share"], th.min_nccl_exposed_share
    per_gpu = ""
    if devices.size > 1:
        per_gpu = (
            f" (mean over {devices.size} GPUs, each against its own compute; per GPU "
            f"{m['nccl_exposed_share_min']:.1%} to {m['nccl_exposed_share_max']:.1%})"
        )
    parts = f"transfers {m['nccl_transfer_exposed_share']:.1%}"
    if devices.size > 1:
        parts += (
            f", waits of equal ranks on each other {m['wait_coupling_share']:.1%}; not counted: "
            f"waits on a late rank that computed {m['wait_on_peer_compute_share']:.1%} or "
            f"issued more work {m['wait_on_peer_work_share']:.1%} (unequal work: stage_imbalance), "
            f"or whose host was blocked or busy {m['wait_on_peer_host_share']:.1%} (its own class)"
        )
        if "nccl_matched_share" in m:
            parts += f"; {m['nccl_matched_share']:.0%} of the NCCL kernels matched across GPUs"
    verdict = ">=" if share >= bar else "<"
    rate = m.get("nccl_kernels_per_step", m.get("nccl_kernels_per_s", 0.0))
    return (
        f"{rate:.4g} NCCL kernels {'per step' if st.per_step else 'per s'}; communication not "
        f"overlapped by compute {share:.1%} of the window{per_gpu}: removing it would save "
        f"{share:.1%} ({verdict} {bar:.0%}); {parts}; {st.note}"
    )
