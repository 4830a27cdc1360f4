"""What the GPU-side detectors and their replay causes read of each kernel: its demangled name
(the family, data type and pipe :mod:`analysis.kernel_names` reads from it), its launch size, and
the GPU it ran on.

One reading for both: the detector (its share, its evidence) and the time model's removal of its
cause (which items run faster, which go) must pick the same kernels. Names are hints, read the
same way as everywhere in the suite; the launch size (threads) is what ties an elementwise chain
to one tensor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analysis import kernel_names as KN
from analysis import trace as T
from analysis.detect import view as V
from analysis.detect.view._reads import KERNEL, trace_cache

__all__ = [
    "Kernels",
    "chains",
    "compute_capability",
    "fp32_fma",
    "fp32_gemms",
    "kernel_info",
    "layout_conversion",
    "memory_bound",
    "nchw_kernel",
    "tf32_tensor",
]

#: PyTorch's and cuDNN's kernels that run a convolution, pooling or normalisation over an NCHW
#: tensor where an NHWC (channels_last) tensor gets a kernel of its own: PyTorch's depthwise and
#: NCHW pooling kernels, its batch-norm kernels (the channels-last ones say so), cuDNN's
#: ``*_nchw*`` implicit GEMMs and its fallbacks (``implicit_convolve_sgemm``, ``*2d_grouped_*``).
NCHW = re.compile(
    r"nchw(?!_?to_?nhwc)(?!2nhwc)|conv_depthwise2d|implicit_convolve_sgemm|batch_norm_"
    r"(?!.*channels_last)|grouped_direct",
    re.IGNORECASE,
)

#: Fused attention kernels (PyTorch's memory-efficient and flash attention, cuDNN's fmha): their
#: GEMMs run on the tensor cores in 16-bit types, on the FMA pipe in fp32.
ATTENTION = re.compile(r"fmha|flash_?attn|flash_fwd|flash_bwd|attention_?kernel", re.IGNORECASE)

#: Types whose convolutions cuDNN runs in NHWC only (an NCHW tensor is converted around them).
HALF_TYPES = ("bf16", "fp16", "")

#: A library's own fused normalisation or softmax kernel (PyTorch's batch, layer and group norm,
#: its softmax, cuDNN's): already one pass a direction, it ends a hand-written chain.
LIBRARY = re.compile(
    r"batch_?norm|layer_?norm|group_?norm|rms_?norm|GammaBeta|softmax_warp|cunn_Soft|"
    r"SoftMax|cudnn::|bn_fw|bn_bw",
    re.IGNORECASE,
)

#: A reduction or normalisation kernel: it reads a chain's tensor, its grid says nothing of it.
REDUCTION = re.compile(r"reduce|reduction|norm|softmax|triton_(red|per)_", re.IGNORECASE)


@dataclass(frozen=True)
class Kernels:
    """Per item (aligned with the arrays it was read for): the kernel's demangled name ('' for
    copies, memsets, graph replays and unknown rows) and its threads (grid x block, 0 there)."""

    name: np.ndarray
    threads: np.ndarray


def kernel_info(trace: T.Trace, kind: np.ndarray, rowid: np.ndarray, kernel_kind: int) -> Kernels:
    """The :class:`Kernels` of items of ``kind`` (``kernel_kind``: the kernel code) at ``rowid``
    of their tables, read once per export for all its kernels."""
    names = np.full(kind.size, "", object)
    threads = np.zeros(kind.size, np.int64)
    is_k = kind == kernel_kind
    if not is_k.any() or not trace.has(KERNEL):
        return Kernels(names, threads)
    table = _kernel_table(trace)
    ids = rowid[is_k].astype(np.int64)
    pos = np.searchsorted(table[0], ids)
    pos = np.minimum(pos, max(table[0].size - 1, 0))
    ok = table[0].size > 0
    hit = (table[0][pos] == ids) if ok else np.zeros(ids.size, bool)
    names[np.flatnonzero(is_k)[hit]] = table[1][pos[hit]]
    threads[np.flatnonzero(is_k)[hit]] = table[2][pos[hit]]
    return Kernels(names, threads)


def _kernel_table(trace: T.Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every kernel row's rowid (sorted), demangled name and threads (cached on the trace)."""
    cache = trace_cache(trace)
    if "gpu_kernels" not in cache:
        name = "demangledName" if trace.has(KERNEL, "demangledName") else "shortName"
        grid = "t.gridX * t.gridY * t.gridZ * t.blockX * t.blockY * t.blockZ"
        if not trace.has(KERNEL, "gridX"):
            grid = "0"
        _, rows = trace.query(
            f"SELECT t.rowid, COALESCE(s.value, ''), {grid} FROM {KERNEL} AS t "
            f"LEFT JOIN StringIds AS s ON s.id = t.{name} ORDER BY t.rowid"
        )
        cache["gpu_kernels"] = (
            np.array([r[0] for r in rows], np.int64),
            np.array([r[1] for r in rows], object),
            np.array([r[2] or 0 for r in rows], np.int64),
        )
    return cache["gpu_kernels"]


def _mask(names: np.ndarray, test) -> np.ndarray:
    """``test`` on each distinct name, spread back over the items."""
    inv, uniq = pd.factorize(names, use_na_sentinel=False)  # by hash: no fixed-width copy
    return np.array([bool(n) and bool(test(str(n))) for n in uniq], bool)[inv]


#: cuDNN's FFT convolution passes (cuFFT's own kernels are ``regular_fft``/``vector_fft``): an
#: fp32 convolution's algorithm where bf16 runs an implicit GEMM on the tensor cores.
FFT_CONV = re.compile(r"fft2d_|fft_rt_|flip_filter", re.IGNORECASE)


def fp32_memory(names: np.ndarray) -> np.ndarray:
    """fp32 memory-bound kernels: elementwise, reductions, normalisations and layout
    conversions over fp32 tensors (mixed precision moves their bytes as bf16)."""

    def test(n: str) -> bool:
        return KN.family_of(n) in ("elementwise", "layout") and KN.dtype(n) == "fp32"

    return _mask(names, test)


def fp32_fma(names: np.ndarray) -> np.ndarray:
    """GEMMs and convolutions whose multiply-adds run on the SIMT FMA pipe in fp32 (or a type
    the name does not spell): what bf16 on the tensor cores would run faster. A bf16 kernel on
    the FMA pipe (a depthwise or NCHW fallback) is a layout or algorithm matter, not this one."""

    def test(n: str) -> bool:
        if ATTENTION.search(n) or FFT_CONV.search(n):  # fused attention, FFT convolutions:
            return KN.dtype(n) == "fp32"  # on the pipe their type says
        return KN.is_matmul(n) and KN.gemm_pipe(n) == KN.FMA and KN.dtype(n) in ("fp32", "")

    return _mask(names, test)


def tf32_tensor(names: np.ndarray) -> np.ndarray:
    """GEMMs and convolutions on the tensor cores in TF32 (cuBLAS's ``*tf32*`` xmma kernels,
    CUTLASS's and cuDNN's, nvjet's): fp32 tensors the tensor cores read at half their bf16 rate,
    what bf16 would run faster."""
    return _mask(names, lambda n: KN.is_matmul(n) and KN.dtype(n) == "tf32")


def fp32_gemms(names: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """fp32_math's GEMMs and convolutions: those on the FMA pipe (:func:`fp32_fma`) and those in
    TF32 on the tensor cores (:func:`tf32_tensor`), apart (they gain at different rates)."""
    fma = fp32_fma(names)
    return fma, tf32_tensor(names) & ~fma


def layout_conversion(names: np.ndarray) -> np.ndarray:
    """cuDNN's NCHW <-> NHWC conversions and other transposes (:data:`kernel_names.LAYOUT`) of
    16-bit tensors (an fp32 network's are fp32_math's: its convolutions are)."""
    return _mask(
        names, lambda n: not KN.is_matmul(n) and KN.LAYOUT.search(n) and KN.dtype(n) in HALF_TYPES
    )


def nchw_kernel(names: np.ndarray) -> np.ndarray:
    """Kernels over 16-bit NCHW tensors that channels_last replaces by NHWC ones
    (:data:`NCHW`); not the conversions themselves."""

    def test(n: str) -> bool:
        return bool(NCHW.search(n)) and not KN.LAYOUT.search(n) and KN.dtype(n) in HALF_TYPES

    return _mask(names, test)


def memory_bound(names: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Elementwise and reduction kernels (little arithmetic per byte: PyTorch's elementwise and
    reduce kernels, Triton's pointwise and reduction kernels), and which of them reduce; a
    library's fused normalisation or softmax (:data:`LIBRARY`) is no link of a chain."""
    elem = _mask(names, lambda n: KN.family_of(n) == "elementwise" and not LIBRARY.search(n))
    return elem, elem & _mask(names, REDUCTION.search)


def chains(
    elem: np.ndarray,
    reduce: np.ndarray,
    threads: np.ndarray,
    stream: np.ndarray,
    *,
    min_kernels: int,
    size_ratio: float,
) -> np.ndarray:
    """Per item (in launch order): the id of the chain it belongs to, -1 for none. A chain is a
    run, on one stream, of at least ``min_kernels`` consecutive memory-bound kernels (``elem``)
    over one tensor and what is derived from it: an elementwise kernel more than ``size_ratio``
    times the run's largest launch (a larger tensor) starts a new run; smaller ones (a row's
    statistics, a broadcast operand) and reductions (``reduce``: their grid is the output's)
    join it. Any other item on the stream (a GEMM, a copy) ends the run."""
    out = np.full(elem.size, -1, np.int64)
    nxt = 0
    for sid in np.unique(stream):
        run: list[int] = []
        big = 0
        for i in [*np.flatnonzero(stream == sid).tolist(), -1]:
            t = int(threads[i]) if i >= 0 else 0
            larger = i >= 0 and elem[i] and not reduce[i] and big and t > size_ratio * big
            if i >= 0 and elem[i] and not larger:
                run.append(i)
                big = max(big, 0 if reduce[i] else t)
                continue
            if len(run) >= min_kernels:
                out[run] = nxt
                nxt += 1
            run = [i] if larger else []
            big = t if larger else 0
    return out


def full_size(chain: np.ndarray, threads: np.ndarray, reduce: np.ndarray, size_ratio: float):
    """Per chained item: whether it runs over its chain's full tensor (an elementwise kernel
    within ``size_ratio`` of the chain's largest launch), the kernels whose time a fused pass
    over the tensor is measured by."""
    on = chain >= 0
    top = np.zeros(int(chain.max()) + 1 if on.any() else 0, np.int64)
    np.maximum.at(top, chain[on], np.where(reduce[on], 0, threads[on]))
    out = np.zeros(chain.size, bool)
    out[on] = ~reduce[on] & (threads[on] * size_ratio >= top[chain[on]])
    return out


def compute_capability(trace: T.Trace) -> tuple[int, int] | None:
    """The (major, minor) compute capability of the export's first GPU, None where the export
    does not say (no TARGET_INFO_GPU)."""
    info = T.gpu_info(trace)
    if info.empty or info["compute_major"].isna().all():
        return None
    row = info.dropna(subset=["compute_major"]).iloc[0]
    return int(row["compute_major"]), int(row.get("compute_minor", 0) or 0)


def names_of(trace: T.Trace, kind: np.ndarray, rowid: np.ndarray, kernel_kind: int) -> list[str]:
    """Distinct kernel names among the items (for evidence), most frequent first."""
    k = kernel_info(trace, kind, rowid, kernel_kind).name
    k = k[k != ""]
    if k.size == 0:
        return []
    uniq, counts = np.unique(k.astype(str), return_counts=True)
    return [str(u) for u in uniq[np.argsort(-counts, kind="stable")]]


@dataclass(frozen=True)
class Reading:
    """A GPU-side detector's reading of the steady window: the kernels it picked (``picked``,
    over ``act``), their time and its shares."""

    act: V.Activity
    kernels: Kernels
    picked: np.ndarray
    picked_ns: int
    kernel_ns: int
    span_ns: int

    @property
    def gpu_share(self) -> float:
        """The picked kernels' share of the window's kernel time."""
        return self.picked_ns / self.kernel_ns if self.kernel_ns else 0.0

    @property
    def window_share(self) -> float:
        return self.picked_ns / self.span_ns if self.span_ns else 0.0

    def top(self, st: Any, n: int = 5) -> list[dict[str, Any]]:
        """Evidence: the picked kernel names holding the most time, each with its count, its
        time and its first run in the window."""
        dur = self.act.end - self.act.start
        names = self.kernels.name[self.picked].astype(str)
        idx = np.flatnonzero(self.picked)
        if idx.size == 0:
            return []
        uniq, inv = np.unique(names, return_inverse=True)
        total = np.bincount(inv, weights=dur[idx].astype(float))
        out = []
        for u in np.argsort(-total, kind="stable")[:n]:
            first = idx[np.flatnonzero(inv == u)[0]]
            out.append(
                V.stamp(st, self.act.start[first], self.act.end[first], kernel=str(uniq[u])[:160],
                      kernels=int((inv == u).sum()), total_ms=round(float(total[u]) / 1e6, 3))
            )  # fmt: skip
        return out


def reading(view: V.TraceView, pick: Any) -> Reading:
    """The steady window's kernels and which of them ``pick`` (names and threads -> mask)
    picks."""
    st, act = view.steady(), view.activity()
    k = kernel_info(view.trace, act.kind, act.rowid, V.KIND_KERNEL)
    picked = pick(k, act)
    dur = (act.end - act.start).astype(np.int64)
    is_k = act.kind == V.KIND_KERNEL
    return Reading(act, k, picked, int(dur[picked].sum()), int(dur[is_k].sum()), int(st.span_ns))
