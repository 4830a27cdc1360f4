"""unfused_elementwise: chains of memory-bound elementwise and reduction kernels over
same-sized tensors, each reading and writing the whole tensor, where one fused kernel would move
it once.

The steady window's kernels are read in launch order per stream (``_gpu_kernels.chains``): a
run of at least ``min_kernels`` elementwise or reduction kernels (PyTorch's elementwise, reduce
and normalisation kernels, Triton's pointwise and reduction kernels; names as hints) whose
launch sizes agree within ``size_ratio`` (one tensor) is a chain; a GEMM, a copy or any other
kernel ends it. ``unfused_elementwise_share`` is the chains' share of the window's GPU time. The
class is a candidate where the chains hold at least ``min_window_share`` of the window (less,
and the GPU idles between them: launch_bound's matter): the decide step replays the window with each chain
at ``fused_kernels`` passes over its tensor (``timemodel._gpu_causes``, cause ``unfused``).
"""

from __future__ import annotations

import numpy as np

from analysis.detect import _gpu_kernels as G
from analysis.detect import view as V
from analysis.detect.config import UnfusedElementwiseThresholds
from analysis.findings import Finding, missing
from bottlenecks import Klass

KLASS = Klass.UNFUSED_ELEMENTWISE


def detect(view: V.TraceView, th: UnfusedElementwiseThresholds) -> Finding:
    """The chains' share of the window's GPU time, as a candidate (see the module)."""
    if not view.has_gpu:
        return missing(KLASS, V.KERNEL, "GPU activity")
    found: dict[str, np.ndarray] = {}

    def pick(k: G.Kernels, act: V.Activity) -> np.ndarray:
        elem, red = G.memory_bound(k.name)
        c = G.chains(elem, red, k.threads, act.stream, min_kernels=th.min_kernels,
                     size_ratio=th.size_ratio)  # fmt: skip
        found["chain"] = c
        return c >= 0

    r = G.reading(view, pick)
    chain = found["chain"]
    n = int(chain.max()) + 1 if chain.size else 0
    sizes = np.bincount(chain[chain >= 0]) if n else np.zeros(0, np.int64)
    metrics = {
        "unfused_elementwise_share": round(r.gpu_share, 4),
        "unfused_window_share": round(r.window_share, 4),
        "chains": float(n),
        "mean_chain_kernels": round(float(sizes.mean()), 2) if n else 0.0,
    }
    st = view.steady()
    if not n:
        why = f"no chain of {th.min_kernels} or more memory-bound kernels over one tensor"
        return Finding(KLASS, False, 0.0, metrics, [], why)
    if r.window_share < th.min_window_share:
        why = (
            f"{n} chains of memory-bound kernels hold {r.window_share:.1%} of the window, under "
            f"{th.min_window_share:.0%}: the GPU idles between them (a launch matter)"
        )
        return Finding(KLASS, False, 0.0, metrics, r.top(st), why)
    reason = (
        f"{n} chains of memory-bound kernels over one tensor (mean "
        f"{metrics['mean_chain_kernels']:.1f} kernels) hold {r.gpu_share:.1%} of the window's "
        f"GPU time; {st.note}"
    )
    return Finding(KLASS, True, r.window_share, metrics, r.top(st), reason)
