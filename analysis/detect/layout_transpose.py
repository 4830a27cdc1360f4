"""layout_transpose: convolutions in NCHW under bf16/fp16, with cuDNN's layout conversions around
them and the slower NCHW kernels beside them.

The steady window's kernels are read by name: the NCHW <-> NHWC conversions cuDNN runs around
each NCHW convolution (``nchwToNhwcKernel``, ``nhwcToNchwKernel``, transposes) and the kernels
over NCHW tensors that channels_last replaces (``_gpu_kernels.NCHW``: depthwise, pooling and
batch-norm kernels, cuDNN's NCHW convolutions). ``layout_transpose_share`` is the conversions'
share of the window's GPU time; the class is a candidate wherever a conversion ran (no
conversion, no NCHW convolution under cuDNN). The decide step replays the window with the
conversions gone and the NCHW kernels ``nhwc_rate`` times faster (``timemodel._gpu_causes``,
cause ``layout``).
"""

from __future__ import annotations

from analysis.detect import _gpu_kernels as G
from analysis.detect import view as V
from analysis.detect.config import LayoutTransposeThresholds
from analysis.findings import Finding, missing
from bottlenecks import Klass

KLASS = Klass.LAYOUT_TRANSPOSE


def detect(view: V.TraceView, th: LayoutTransposeThresholds) -> Finding:
    """The conversions' share of the window's GPU time, as a candidate (see the module)."""
    if not view.has_gpu:
        return missing(KLASS, V.KERNEL, "GPU activity")
    conv = G.reading(view, lambda k, act: G.layout_conversion(k.name))
    nchw = G.reading(view, lambda k, act: G.nchw_kernel(k.name))
    metrics = {
        "layout_transpose_share": round(conv.gpu_share, 4),
        "layout_window_share": round(conv.window_share, 4),
        "nchw_kernel_share": round(nchw.gpu_share, 4),
        "conversions": float(conv.picked.sum()),
    }
    st = view.steady()
    if not conv.picked.any():
        return Finding(KLASS, False, 0.0, metrics, [], "no layout conversion ran in the window")
    reason = (
        f"layout conversions hold {conv.gpu_share:.1%} of the window's GPU time "
        f"({int(conv.picked.sum())} kernels), kernels over NCHW tensors beside them "
        f"{nchw.gpu_share:.1%} (replayed with the conversions gone, those {th.nhwc_rate:.3g}x "
        f"faster); {st.note}"
    )
    return Finding(KLASS, True, conv.window_share, metrics, conv.top(st) + nchw.top(st, 3), reason)
