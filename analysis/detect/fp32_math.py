"""fp32_math: GEMMs and convolutions on the SIMT FMA pipe in fp32 where bf16 tensor cores would
run them many times faster.

The kernels the GPU ran in the steady window are read by name (``_gpu_kernels.fp32_fma``:
cuBLAS's ``*_ffma_*`` and ``f32f32_f32f32`` xmma GEMMs, ``sgemm``, CUTLASS's ``simt``, cuDNN's
fp32 implicit GEMMs and direct convolutions; a kernel whose name says the tensor cores, TF32 or
a 16-bit type does not count). ``fp32_math_share`` is their share of the window's GPU (kernel)
time. The class is a candidate wherever such kernels ran: the decide step replays the window
with them at the bf16 tensor-core rate (``timemodel._gpu_causes``, cause ``fp32``) and fires it
on the saving that gives.
"""

from __future__ import annotations

from analysis.detect import _gpu_kernels as G
from analysis.detect import view as V
from analysis.detect.config import Fp32MathThresholds
from analysis.detect.timemodel import _gpu_causes as GC
from analysis.findings import Finding, missing
from bottlenecks import Klass

KLASS = Klass.FP32_MATH


def detect(view: V.TraceView, th: Fp32MathThresholds) -> Finding:
    """The fp32 FMA GEMMs' share of the window's GPU time, as a candidate (see the module)."""
    if not view.has_gpu:
        return missing(KLASS, V.KERNEL, "GPU activity")
    r = G.reading(view, lambda k, act: G.fp32_fma(k.name))
    metrics = {
        "fp32_math_share": round(r.gpu_share, 4),
        "fp32_math_window_share": round(r.window_share, 4),
        "fp32_fma_kernels": float(r.picked.sum()),
    }
    st = view.steady()
    if not r.picked.any():
        return Finding(
            KLASS, False, 0.0, metrics, [], "no GEMM or convolution ran on the FMA pipe in fp32"
        )
    rate = GC.tensor_rate(view)
    metrics["tensor_rate"] = round(rate, 3)
    reason = (
        f"GEMMs and convolutions on the SIMT FMA pipe in fp32 hold {r.gpu_share:.1%} of the "
        f"window's GPU time ({int(r.picked.sum())} kernels), replayed {rate:.3g}x faster in "
        f"bf16 on the tensor cores; {st.note}"
    )
    return Finding(KLASS, True, r.window_share, metrics, r.top(st), reason)
