"""The GPU-side causes: the same work at another rate, as the replay's removal of it.

``fp32`` (fp32_math), ``unfused`` (unfused_elementwise) and ``layout`` (layout_transpose) change
what the GPU's items last (:attr:`~._replay.Removal.item_scale`) and which go:

- ``fp32``: every GEMM and convolution on the SIMT FMA pipe in fp32 runs ``tensor_rate`` times
  faster (bf16 on the tensor cores; by the GPU's compute capability, :data:`TENSOR_OVER_FMA`),
  every one in TF32 on the tensor cores ``tf32_rate`` times (:data:`BF16_OVER_TF32`); with
  the FMA convolutions go cuDNN's fp32 NCHW <-> NHWC conversions around them (bf16 runs NHWC
  tensor-core kernels);
- ``unfused``: each chain of memory-bound kernels over one tensor (``_gpu_kernels.chains``)
  leaves ``ceil(fused_kernels)`` kernels taking ``fused_kernels`` passes over its tensor (its
  bytes moved about once); the others go, with their launches (``fused_launches``);
- ``layout``: the NCHW <-> NHWC conversions go and the kernels over NCHW tensors run
  ``nhwc_rate`` times faster.

The replay then finds the new overlap: a host that bounds the step keeps it, and a shorter GPU
saves nothing there. A host that ran far ahead of its GPU (a full launch queue) recorded stalls
in its gaps, not its pace; those are cut where the GPU's work changes (:func:`_throttled`).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from analysis.detect import _gpu_kernels as G
from analysis.detect import view as V
from analysis.detect.timemodel._replay import Removal
from analysis.detect.timemodel._timeline import DISPATCH, Timeline

__all__ = [
    "AHEAD_NS",
    "BF16_OVER_TF32",
    "BUSY_SHARE",
    "CAUSES",
    "TENSOR_OVER_FMA",
    "gpu_removal",
    "tensor_rate",
    "tf32_rate",
]

#: The causes this module removes.
CAUSES = ("fp32", "unfused", "layout")

#: A host whose median item starts this long (ns) after its launch ran ahead of its GPU all
#: along (a launch takes ~5-20 us to reach an idle GPU).
AHEAD_NS = 1_000_000

#: ... and whose GPU was busy at least this share of the recorded window never held it back.
BUSY_SHARE = 0.9

#: Compute capability (major, minor) -> dense bf16 (fp16 on Volta) tensor-core peak over the
#: fp32 SIMT FMA peak, the datasheets' ratio: the data-centre parts have few fp32 units beside
#: big tensor cores (sm70 ~8, sm80 ~16, sm90 ~15), the consumer parts (sm86, sm89) doubled
#: their fp32 units (~2 with fp32 accumulation); the datasheet figures: docs/detectors.md. The rate a fix reaches is
#: lower than the peak ratio (bf16 GEMMs of a model's sizes reach less of their peak than SIMT
#: GEMMs do): ``fp32_math.tensor_efficiency`` of it.
TENSOR_OVER_FMA: dict[tuple[int, int], float] = {
    (7, 0): 8.0,
    (8, 0): 16.0,
    (8, 6): 2.0,
    (8, 9): 2.0,
    (9, 0): 14.8,
}


#: Compute capability -> dense bf16 tensor-core peak over the dense TF32 peak, the datasheets'
#: ratio (2x on sm80, sm86, sm89 and sm90; docs/detectors.md): TF32 reads fp32 operands at
#: half the bf16 rate. Volta has no TF32. The rate a fix reaches is
#: ``fp32_math.tf32_efficiency`` of it.
BF16_OVER_TF32: dict[tuple[int, int], float] = {
    (8, 0): 2.0,
    (8, 6): 2.0,
    (8, 9): 2.0,
    (9, 0): 2.0,
}


def tensor_rate(view: V.TraceView) -> float:
    """How many times faster fp32 FMA GEMMs run in bf16 on this export's GPU."""
    th = view.config.fp32_math
    return _rate(
        view, th.tensor_rate, TENSOR_OVER_FMA, th.default_tensor_rate, th.tensor_efficiency
    )


def tf32_rate(view: V.TraceView) -> float:
    """How many times faster TF32 tensor-core GEMMs run in bf16 on this export's GPU."""
    th = view.config.fp32_math
    return _rate(view, th.tf32_rate, BF16_OVER_TF32, th.default_tf32_rate, th.tf32_efficiency)


def _rate(view: V.TraceView, given: float, peaks: dict, default: float, efficiency: float) -> float:
    """``given`` where set (> 0); else the GPU's datasheet peak ratio (``peaks``, by compute
    capability) times ``efficiency``, at least 1; ``default`` for a GPU the table lacks."""
    if given > 0:
        return float(given)
    cc = G.compute_capability(view.trace)
    peak = peaks.get(cc) if cc is not None else None
    if peak is None:
        return float(default)
    return max(1.0, peak * efficiency)


def gpu_removal(view: V.TraceView, tl: Timeline, cause: str) -> Removal:
    """The removal of GPU-side ``cause`` (see the module docstring), with a throttled host's
    stalls taken out (:func:`_throttled`)."""
    rm = _removal(view, tl, cause)
    changed = rm.item_gone is not None and rm.item_gone.any()
    changed |= rm.item_scale is not None and bool((rm.item_scale != 1.0).any())
    cut = _throttled(tl, view.config.predict.data_dispatch_percentile) if changed else None
    return replace(rm, gap_cut=cut) if cut is not None else rm


def _throttled(tl: Timeline, percentile: float) -> np.ndarray | None:
    """Per call, the part of its gap over ``percentile`` of the window's dispatch gaps, where
    the recorded host ran ahead of its GPU all along (the median item started more than
    :data:`AHEAD_NS` after its launch, a hundred launch latencies: the queue never ran dry): a
    host held back by a full launch queue sleeps in its launches and wakes late, so its recorded
    gaps are stalls, not its own pace, which a GPU that finishes sooner would see. None where
    the host kept pace or the GPU idled for it (under :data:`BUSY_SHARE` busy: its gaps are
    its own)."""
    has = tl.item_op >= 0
    if not has.any():
        return None
    lat = tl.item_start[has] - tl.op_start[tl.item_op[has]]
    dispatch = tl.gap[tl.gap_kind == DISPATCH]
    if np.median(lat) <= AHEAD_NS or dispatch.size == 0 or _busy(tl) < BUSY_SHARE:
        return None
    cap = int(np.percentile(dispatch, percentile))
    return np.where(tl.gap_kind == DISPATCH, np.maximum(0, tl.gap - cap), 0)


def _busy(tl: Timeline) -> float:
    """The share of the recorded window (its first to its last edge) the GPU's items cover."""
    lo, hi = int(tl.edges[0]), int(tl.edges[-1])
    s, e = np.clip(tl.item_start, lo, hi), np.clip(tl.item_end, lo, hi)
    keep = e > s
    if hi <= lo or not keep.any():
        return 0.0
    ws, we = V.union(s[keep], e[keep])
    return float((we - ws).sum()) / (hi - lo)


def _removal(view: V.TraceView, tl: Timeline, cause: str) -> Removal:
    k = G.kernel_info(view.trace, tl.item_kind, _rowids(tl), V.KIND_KERNEL)
    scale = np.ones(tl.item_op.size, float)
    if cause == "fp32":
        scale[G.fp32_memory(k.name)] = 1.0 / max(1.0, view.config.fp32_math.memory_rate)
        fma, tf32 = G.fp32_gemms(k.name)
        scale[fma] = 1.0 / tensor_rate(view)
        scale[tf32] = 1.0 / tf32_rate(view)
        if not fma.any():
            return Removal(item_scale=scale)
        return Removal(item_scale=scale, item_gone=G.fp32_layout_conversion(k.name))
    if cause == "unfused":
        th = view.config.unfused_elementwise
        scale, gone = fused(tl, k, th.min_kernels, th.size_ratio, th.fused_kernels)
        if not th.fused_launches:
            return Removal(item_scale=scale * ~gone)
        calls = _calls_gone(tl, gone)  # their launches, and the dispatch before each, go
        return Removal(item_scale=scale, item_gone=gone, own_zero=calls,
                       gap_zero=calls & (tl.gap_kind == DISPATCH))  # fmt: skip
    if cause == "layout":
        th = view.config.layout_transpose
        scale[G.nchw_kernel(k.name)] = 1.0 / max(1.0, th.nhwc_rate)
        gone = G.layout_conversion(k.name)
        return Removal(item_scale=scale, item_gone=gone)
    raise ValueError(f"unknown GPU-side cause {cause!r}; known: {CAUSES}")


def fused(
    tl: Timeline, k: G.Kernels, min_kernels: int, size_ratio: float, fused_kernels: float
) -> tuple[np.ndarray, np.ndarray]:
    """Per item: the factor on its duration and whether it goes, so that each chain leaves its
    first ``ceil(fused_kernels)`` kernels holding ``fused_kernels`` times the mean time of its
    kernels over the full tensor (``_gpu_kernels.full_size``: one pass over its bytes), never
    more than the chain took, and the others gone."""
    elem, red = G.memory_bound(k.name)
    chain = G.chains(elem, red, k.threads, tl.item_stream, min_kernels=min_kernels,
                     size_ratio=size_ratio)  # fmt: skip
    scale = np.ones(chain.size, float)
    gone = np.zeros(chain.size, bool)
    on = np.flatnonzero(chain >= 0)
    if on.size == 0:
        return scale, gone
    dur = (tl.item_end - tl.item_start).astype(float)
    full = G.full_size(chain, k.threads, red, size_ratio)[on]
    c = chain[on]
    total = np.bincount(c, weights=dur[on])
    n_full = np.bincount(c, weights=full.astype(float), minlength=total.size)
    t_full = np.bincount(c, weights=dur[on] * full, minlength=total.size)
    pass_ns = np.where(n_full > 0, t_full / np.maximum(n_full, 1.0), total / np.bincount(c))
    rank = _ranks(c)
    keep = np.minimum(np.bincount(c), max(1, int(np.ceil(fused_kernels))))
    kept = rank < keep[c]
    kept_ns = np.bincount(c, weights=dur[on] * kept, minlength=total.size)
    want = np.minimum(total, fused_kernels * pass_ns)  # never more than the chain took
    factor = np.where(kept_ns > 0, want / np.maximum(kept_ns, 1.0), 1.0)
    scale[on] = np.where(kept, factor[c], 1.0)
    gone[on] = ~kept
    return scale, gone


def _ranks(c: np.ndarray) -> np.ndarray:
    """Per element: how many earlier elements share its value."""
    order = np.argsort(c, kind="stable")
    sc = c[order]
    r = np.empty(c.size, np.int64)
    r[order] = np.arange(c.size) - np.searchsorted(sc, sc, side="left")
    return r


def _calls_gone(tl: Timeline, gone: np.ndarray) -> np.ndarray:
    """Non-blocking calls all of whose items are ``gone`` (and which launched at least one)."""
    has = tl.item_op >= 0
    n_items = np.bincount(tl.item_op[has], minlength=tl.n_ops)
    n_gone = np.bincount(tl.item_op[has & gone], minlength=tl.n_ops)
    return (n_items > 0) & (n_gone == n_items) & ~tl.block


def _rowids(tl: Timeline) -> np.ndarray:
    """The timeline's item rowids (-1 for every item where the timeline has none)."""
    if tl.item_rowid.size == tl.item_op.size:
        return tl.item_rowid
    return np.full(tl.item_op.size, -1, np.int64)
