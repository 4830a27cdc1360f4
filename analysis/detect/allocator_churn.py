"""allocator_churn: the caching allocator gives device memory back and asks for it again inside
the loop.

PyTorch's caching allocator exists so that a step's tensors reuse memory it already holds: a
warm loop makes no cudaMalloc and no cudaFree at all. ``torch.cuda.empty_cache()`` every step,
fragmentation against a memory cap (the allocator frees its cached segments and retries) or
``PYTORCH_NO_CUDA_MEMORY_CACHING`` put the driver back into the step: every cudaMalloc blocks
the host for the driver's mapping of fresh pages, and every cudaFree synchronises the device
first, so the GPU runs dry while the host waits. The detector counts the device-memory calls
(:data:`~analysis.detect.view.DEVICE_ALLOC`: cudaMalloc/cudaFree, their async and driver forms,
the virtual-memory calls of expandable segments) that the threads issuing the loop's work make
inside the steady window, the host time they take and the GPU idle while they run. Frequent
calls (``min_calls_per_step``, per s without steps), or calls taking a material share of the
window however few (``min_call_share``: a capped cache's retries), make the class a candidate; the decide step
fires it on the saving the time model predicts for those calls gone (cause ``alloc``).
"""

from __future__ import annotations

import numpy as np

from analysis.detect import view as V
from analysis.detect._needs import read_or_lacking
from analysis.detect.config import AllocatorChurnThresholds
from analysis.findings import Finding
from bottlenecks import Klass

KLASS = Klass.ALLOCATOR_CHURN


def detect(view: V.TraceView, th: AllocatorChurnThresholds) -> Finding:
    if isinstance(start := read_or_lacking(view, KLASS, V.RUNTIME, "CUDA API calls"), Finding):
        return start
    trace, st, act, host = start
    every = view.calls()
    mine = V.member(every["tid"], host.issuing) & (every["start"] >= st.lo)
    mine &= every["start"] < st.hi
    names = every["name"][mine]
    alloc = V.base_name_in(trace, names, V.DEVICE_ALLOC)
    base = V.base_names(trace, names[alloc])  # of the allocator's calls alone
    s, e = every["start"][mine][alloc], every["end"][mine][alloc]
    frees = sum("Free" in str(b) for b in base)
    calls_ns = V.length(*V.union(s, e))
    bs, be = V.busy(trace, st, act)
    gs, ge = V.gaps(bs, be, st.lo, st.hi)
    idle_beside = int(V.overlap_each(gs, ge, *V.union(s, e)).sum()) if gs.size else 0
    metrics: dict[str, float] = {}
    name, value = st.rate("alloc_calls", s.size)
    metrics[name] = value
    metrics["free_calls"] = float(frees)
    metrics["allocator_churn_share"] = calls_ns / st.span_ns
    metrics["gpu_idle_in_alloc_share"] = idle_beside / st.span_ns
    min_rate = th.min_calls_per_step if st.per_step else th.min_calls_per_s
    often = value >= min_rate
    if st.mode != "nvtx":  # found iterations may be a period of several steps
        often |= s.size / (st.span_ns / 1e9) >= th.min_calls_per_s
    often |= metrics["allocator_churn_share"] >= th.min_call_share
    longest = np.argsort(-(e - s), kind="stable")[:3]
    evidence = [V.stamp(st, int(s[i]), int(e[i]), call=str(base[i])) for i in longest]
    kinds = ", ".join(sorted(set(base.tolist()))) or "none"
    reason = (
        f"{value:.2f} {name.replace('_', ' ')} of device memory on the threads issuing the "
        f"loop's work ({kinds}; {frees} frees; threshold {min_rate}"
        f"{'' if often else ': too few to fire'}); they take "
        f"{metrics['allocator_churn_share']:.1%} of the window (a candidate from "
        f"{th.min_call_share:.0%} however few), the GPU idle "
        f"{metrics['gpu_idle_in_alloc_share']:.1%} of it beside them; {st.note}"
    )
    return Finding(KLASS, bool(often), metrics["allocator_churn_share"], metrics, evidence, reason)
