"""fp32_math: GEMMs and convolutions in fp32 on the SIMT FMA pipe, or in TF32 on the tensor
cores, where bf16 tensor cores would run them faster.

The kernels the GPU ran in the steady window are read by name (``_gpu_kernels.fp32_gemms``:
cuBLAS's ``*_ffma_*`` and ``f32f32_f32f32`` xmma GEMMs, ``sgemm``, CUTLASS's ``simt``, cuDNN's
fp32 implicit GEMMs and direct convolutions on the FMA pipe; the GEMMs and convolutions whose
name says TF32 on the tensor cores; a kernel whose name says a 16-bit type does not count).
``fp32_math_share`` is their share of the window's GPU (kernel) time. The class is a candidate
wherever such kernels ran: the decide step replays the window with them at the bf16
tensor-core rate (``timemodel._gpu_causes``, cause ``fp32``: the FMA ones ``tensor_rate``
times faster, the TF32 ones ``tf32_rate`` times) and fires it on the saving that gives.
"""

from __future__ import annotations

import numpy as np

from analysis.detect import _gpu_kernels as G
from analysis.detect import timemodel as TM
from analysis.detect import view as V
from analysis.detect.config import Fp32MathThresholds
from analysis.findings import Finding, missing
from bottlenecks import Klass

KLASS = Klass.FP32_MATH


def detect(view: V.TraceView, th: Fp32MathThresholds) -> Finding:
    """The fp32 FMA and TF32 GEMMs' share of the window's GPU time, as a candidate (see the
    module)."""
    if not view.has_gpu:
        return missing(KLASS, V.KERNEL, "GPU activity")
    parts: dict[str, np.ndarray] = {}

    def pick(k: G.Kernels, act: V.Activity) -> np.ndarray:
        parts["fma"], parts["tf32"] = G.fp32_gemms(k.name)
        return parts["fma"] | parts["tf32"]

    r = G.reading(view, pick)
    dur = (r.act.end - r.act.start).astype(np.int64)
    tf32_ns = int(dur[parts["tf32"]].sum())
    metrics = {
        "fp32_math_share": round(r.gpu_share, 4),
        "fp32_math_window_share": round(r.window_share, 4),
        "fp32_fma_kernels": float(parts["fma"].sum()),
        "tf32_kernels": float(parts["tf32"].sum()),
        "tf32_share": round(tf32_ns / r.kernel_ns, 4) if r.kernel_ns else 0.0,
    }
    st = view.steady()
    if not r.picked.any():
        return Finding(KLASS, False, 0.0, metrics, [], "no GEMM or convolution ran in fp32 or TF32")
    rate, tf32 = TM.tensor_rate(view), TM.tf32_rate(view)
    metrics["tensor_rate"] = round(rate, 3)
    metrics["tf32_rate"] = round(tf32, 3)
    reason = (
        f"GEMMs and convolutions in fp32 or TF32 hold {r.gpu_share:.1%} of the window's GPU time "
        f"({int(parts['fma'].sum())} on the SIMT FMA pipe, replayed {rate:.3g}x faster in bf16; "
        f"{int(parts['tf32'].sum())} in TF32 on the tensor cores, {metrics['tf32_share']:.1%}, "
        f"replayed {tf32:.3g}x faster); {st.note}"
    )
    return Finding(KLASS, True, r.window_share, metrics, r.top(st), reason)
