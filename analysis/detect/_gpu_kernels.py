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

from analysis import kernel_names as KN
from analysis import trace as T
from analysis.detect import view as V

__all__ = [
    "Kernels",
    "chains",
    "compute_capability",
    "fp32_fma",
    "fp32_gemms",
    "fp32_layout_conversion",
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
class Names:
    """Kernel names per item as codes into the export's distinct names (``strings``, sorted,
    ``''`` first): a name test runs once per distinct name, and no item holds a string."""

    code: np.ndarray
    strings: np.ndarray

    def __getitem__(self, idx: Any) -> np.ndarray:
        """The names (an object array) of the items at ``idx``."""
        return self.strings[self.code[idx]]

    @property
    def size(self) -> int:
        return int(self.code.size)


@dataclass(frozen=True)
class Kernels:
    """Per item (aligned with the arrays it was read for): the kernel's demangled name ('' for
    copies, memsets, graph replays and unknown rows) and its threads (grid x block, 0 there)."""

    name: Names
    threads: np.ndarray


def kernel_info(trace: T.Trace, kind: np.ndarray, rowid: np.ndarray, kernel_kind: int) -> Kernels:
    """The :class:`Kernels` of items of ``kind`` (``kernel_kind``: the kernel code) at ``rowid``
    of their tables, read once per export for all its kernels."""
    cache = V.trace_cache(trace)
    seen = cache.get("kernel_info")  # the detectors ask again for the same window's items
    if seen is not None and seen[0] is kind and seen[1] is rowid and seen[2] == kernel_kind:
        return seen[3]
    code = np.zeros(kind.size, np.int64)
    threads = np.zeros(kind.size, np.int64)
    is_k = kind == kernel_kind
    if not is_k.any() or not trace.has(V.KERNEL):
        return Kernels(Names(code, np.array([""], object)), threads)
    rows, codes, strings, grid = _kernel_table(trace)
    ids = rowid[is_k].astype(np.int64)
    if rows.size and rows[-1] - rows[0] == rows.size - 1:  # rowids 1..n, as nsys writes them
        pos = np.clip(ids - rows[0], 0, rows.size - 1)
    else:
        pos = np.minimum(np.searchsorted(rows, ids), max(rows.size - 1, 0))
    hit = (rows[pos] == ids) if rows.size else np.zeros(ids.size, bool)
    at = np.flatnonzero(is_k)[hit]
    code[at] = codes[pos[hit]]
    threads[at] = grid[pos[hit]]
    out = Kernels(Names(code, strings), threads)
    cache["kernel_info"] = (kind, rowid, kernel_kind, out)
    return out


def _kernel_table(trace: T.Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every kernel row's rowid (sorted), name code, the distinct names the codes index, and
    threads (cached on the trace): integers read in bulk, the names once each."""
    cache = V.trace_cache(trace)
    if "gpu_kernels" not in cache:
        cols = V.kernel_table_rows(trace) or _read_kernel_table(trace)
        ids, inv = V.distinct(cols["name"])
        found = dict(trace.query("SELECT id, value FROM StringIds")[1]) if ids.size else {}
        text = np.array([found.get(int(i)) or "" for i in ids], object)
        strings, back = np.unique(np.concatenate([np.array([""], object), text]).astype(str),
                                  return_inverse=True)  # fmt: skip
        cache["gpu_kernels"] = (cols["row"], back[1:][inv], strings.astype(object), cols["grid"])
    return cache["gpu_kernels"]


def _read_kernel_table(trace: T.Trace) -> dict[str, np.ndarray]:
    """Every kernel row's rowid, name id and threads, where the activity's scan did not read
    them (``V.kernel_table_rows``)."""
    name = "demangledName" if trace.has(V.KERNEL, "demangledName") else "shortName"
    grid = "t.gridX * t.gridY * t.gridZ * t.blockX * t.blockY * t.blockZ"
    if not trace.has(V.KERNEL, "gridX"):
        grid = "0"
    try:
        bits = T.name_bits(trace, V.KERNEL, name)  # the name under the launch size
        return T.int_columns(
            trace,
            V.KERNEL,
            {"row": "t.rowid", "name": f"COALESCE(t.{name}, -1)", "grid": grid},
            null=0,
            pack=[] if bits is None else [("grid", "name", bits)],
        )
    except T.TraceError:  # a product past int64 (a REAL): the rows one by one
        return _kernel_rows(trace, name, grid)


def _kernel_rows(trace: T.Trace, name: str, grid: str) -> dict[str, np.ndarray]:
    """:func:`_kernel_table`'s columns read as Python rows (a launch size past int64)."""
    _, rows = trace.query(f"SELECT t.rowid, t.{name}, {grid} FROM {V.KERNEL} AS t ORDER BY t.rowid")
    return {
        "row": np.array([r[0] for r in rows], np.int64),
        "name": np.array([-1 if r[1] is None else r[1] for r in rows], np.int64),
        "grid": np.array([r[2] or 0 for r in rows], np.int64),
    }


def _mask(names: Names, test) -> np.ndarray:
    """``test`` on each distinct name, spread back over the items."""
    return np.array([bool(n) and bool(test(str(n))) for n in names.strings], bool)[names.code]


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


#: cuDNN's NCHW <-> NHWC conversions (not any transpose).
NCHW_NHWC = re.compile(r"nchw_?to_?nhwc|nhwc_?to_?nchw|nchw2nhwc|nhwc2nchw", re.IGNORECASE)


def fp32_layout_conversion(names: np.ndarray) -> np.ndarray:
    """cuDNN's NCHW <-> NHWC conversions of fp32 tensors: around the fp32 convolutions that
    run on NCHW kernels of the FMA pipe (a channels_last network converts each tensor there
    and back), which bf16 runs on NHWC tensor-core kernels without them."""
    return _mask(
        names, lambda n: not KN.is_matmul(n) and NCHW_NHWC.search(n) and KN.dtype(n) == "fp32"
    )


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
    if elem.size == 0:
        return np.full(0, -1, np.int64)
    order = np.argsort(stream, kind="stable")  # by stream (as np.unique sorts them), in order
    e, r, s = elem[order].astype(bool), reduce[order].astype(bool), stream[order]
    t = threads[order].astype(np.int64)
    # an elementwise item continues the run of the one before it on its stream ...
    cont = np.zeros(e.size, bool)
    cont[1:] = e[1:] & e[:-1] & (s[1:] == s[:-1])
    # ... unless it is over a larger tensor than the run's largest launch so far: the largest
    # launch of the run is that of all elementwise items since the last break (a larger one
    # is larger than every one before it), a running maximum within each unbroken stretch
    big = _stretch_max(np.where(e & ~r, t, 0), np.cumsum(~cont))
    before = np.zeros(e.size, np.int64)
    before[1:] = np.where(cont[1:], big[:-1], 0)
    larger = e & ~r & (before > 0) & (t > size_ratio * before)
    run = np.cumsum(e & (~cont | larger)) - 1
    length = np.bincount(run[e], minlength=int(run.max()) + 1 if e.any() else 0)
    keep = length >= min_kernels
    ids = np.where(keep, np.cumsum(keep) - 1, -1)
    out = np.full(elem.size, -1, np.int64)
    out[order[e]] = ids[run[e]]
    return out


def _stretch_max(v: np.ndarray, stretch: np.ndarray) -> np.ndarray:
    """The running maximum of ``v`` restarted at every change of ``stretch`` (non-decreasing):
    one accumulate over ``stretch`` x (the values, or their ranks where that could overflow)."""
    stretch = stretch.astype(np.int64)
    top = int(v.max()) + 1 if v.size else 1
    if v.size == 0 or v.min() < 0 or (int(stretch[-1]) + 1) * top >= 1 << 62:
        values, rank = np.unique(v, return_inverse=True)
        k = np.int64(values.size)
        return values[np.maximum.accumulate(stretch * k + rank.reshape(-1)) - stretch * k]
    return np.maximum.accumulate(stretch * top + v) - stretch * top


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
    counts = np.bincount(k.code, minlength=k.strings.size)
    counts[0] = 0  # '' (no kernel)
    present = np.flatnonzero(counts)
    return [str(k.strings[u]) for u in present[np.argsort(-counts[present], kind="stable")]]


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
        idx = np.flatnonzero(self.picked)
        if idx.size == 0:
            return []
        names = self.kernels.name
        code = names.code[idx]
        n_str = names.strings.size
        total = np.bincount(code, weights=dur[idx].astype(float), minlength=n_str)
        counts = np.bincount(code, minlength=n_str)
        present = np.flatnonzero(counts)  # in the names' sorted order, as np.unique gives them
        first = np.full(n_str, np.iinfo(np.int64).max)
        np.minimum.at(first, code, idx)  # each name's first item
        out = []
        for u in present[np.argsort(-total[present], kind="stable")][:n]:
            a = first[u]
            out.append(
                V.stamp(st, self.act.start[a], self.act.end[a], kernel=str(names.strings[u])[:160],
                      kernels=int(counts[u]), total_ms=round(float(total[u]) / 1e6, 3))
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
