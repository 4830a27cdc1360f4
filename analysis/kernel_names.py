"""What a CUDA kernel's name says about it: its family (GEMM or convolution, layout conversion,
elementwise or reduction, other), the data type it spells, and whether a GEMM's name says it
runs on the tensor cores or on the SIMT FMA units.

Names are hints, never measurements: Nsight Compute's pipe readings (``harness kernels``) say
what a kernel did. They are what a trace without hardware counters has, though, and the tools
that judge tensor-core use from a trace (the PyTorch profiler's plugin, nsys-ai, HTA's
breakdown read by the suite's rules) all read them. One place for the suite's reading, so the
ncu row's ``family`` and ``dtype`` columns, the detectors and the tool adapters agree; this
module imports nothing of the suite (``harness`` may import ``analysis``, never the reverse).
"""

from __future__ import annotations

import re

__all__ = [
    "DTYPES",
    "ELEMENTWISE",
    "LAYOUT",
    "MATMUL",
    "dtype",
    "family_of",
    "gemm_pipe",
    "is_matmul",
]

#: Name fragments of matrix kernels (GEMM, GEMV and convolution families): cuBLAS (``*gemm*``,
#: ``sm80_xmma_*``, ``nvjet*``), CUTLASS, cuDNN (implicit GEMMs, ``*conv*`` passes), Triton's
#: templates and matmuls (Inductor's ``triton_tem_*``, ``triton_*mm*``); ``conv`` not followed
#: by ``ert`` (a conversion kernel is no convolution).
MATMUL = re.compile(
    r"gemm|gemv|xmma|nvjet|wgmma|hmma|imma|tensorop|s16816|s1688|h16816|h1688|"
    r"implicit_?gemm|conv(?!ert)|fprop|dgrad|wgrad|winograd|matmul|"
    r"triton_tem_|triton_\w*?(?:add|b)?mm(?:_|\d|$)",
    re.IGNORECASE,
)

#: Name fragments of layout conversions: cuDNN's NCHW <-> NHWC transforms, transposes.
LAYOUT = re.compile(r"nchw_?to_?nhwc|nhwc_?to_?nchw|nchw2nhwc|nhwc2nchw|transpose", re.IGNORECASE)

#: Name fragments of elementwise and reduction kernels: PyTorch's elementwise, reduce and
#: normalisation kernels, Triton's pointwise (``poi``) and reduction (``red``, ``per``) kernels.
ELEMENTWISE = re.compile(
    r"elementwise|reduce_kernel|reduction|triton_(poi|red|per)_|norm|softmax|dropout|"
    r"activation|gelu|silu|cat_?array|fill_kernel|copy_kernel",
    re.IGNORECASE,
)

#: Data types a kernel's name spells, most specific first (``tf32`` before ``f32``, ``bf16``
#: before ``f16``; ``fp32`` before ``fp64``: an fp32 kernel's demangled signature often takes
#: ``double`` scalars, an optimizer's learning rate).
DTYPES = (
    ("fp8", re.compile(r"e4m3|e5m2|fp8|f8f8", re.IGNORECASE)),
    ("tf32", re.compile(r"tf32", re.IGNORECASE)),
    ("bf16", re.compile(r"bf16|bfloat16", re.IGNORECASE)),
    ("fp16", re.compile(r"(?<![a-z])(f16|fp16|half|hgemm)|h16816|h1688|h884", re.IGNORECASE)),
    ("int8", re.compile(r"int8|imma|i8i8|s8s8", re.IGNORECASE)),
    ("fp32", re.compile(r"f32|fp32|sgemm|(?<![a-z])float", re.IGNORECASE)),
    ("fp64", re.compile(r"f64|fp64|dgemm|double", re.IGNORECASE)),
)

#: A GEMM whose name says the SIMT units do its multiply-adds: cuBLAS's ``*_ffma_*`` and
#: ``f32f32_f32f32`` xmma kernels and legacy ``sgemm``/``dgemm``, CUTLASS's ``simt``, GEMVs and
#: dot products (never tensor-core work), cuDNN's ``*convolve_sgemm`` (even on bf16 operands:
#: NCHW fallbacks) and PyTorch's depthwise convolutions. Read before the tensor-core hints: a
#: bf16 ``precomputed_convolve_sgemm`` runs on the FMA pipe.
FMA_HINTS = re.compile(
    r"ffma|f32f32_f32f32|f64f64_f64f64|sgemm|dgemm|simt|gemv|dot_kernel|depthwise",
    re.IGNORECASE,
)

#: A GEMM whose name says it runs on the tensor cores: HMMA/IMMA/(W)GMMA instructions,
#: CUTLASS's ``tensorop``, the mma shapes cuBLAS and CUTLASS spell (``s16816``, ``h1688``,
#: ``i8816``, ``*884gemm``, ``tensor16x8x8``), Hopper's ``nvjet`` GEMMs, and the 16-bit, TF32,
#: fp8 and int8 operand types (no SIMT kernel of those families spells them: see FMA_HINTS).
TENSOR_HINTS = re.compile(
    r"hmma|imma|gmma|tensorop|tensor\d|mma_sync|[shic]1688|[shic]16816|i8816|884gemm|nvjet|"
    r"tf32|bf16|bfloat16|(?<![a-z])f16|fp16|half|e4m3|e5m2|int8",
    re.IGNORECASE,
)

#: :func:`gemm_pipe`'s answers.
TENSOR, FMA, UNKNOWN = "tensor", "fma", "unknown"


def dtype(name: str) -> str:
    """The data type ``name`` spells, or ''."""
    return next((label for label, pattern in DTYPES if pattern.search(name)), "")


def is_matmul(name: str) -> bool:
    """Whether ``name`` belongs to a GEMM or convolution family."""
    return bool(MATMUL.search(name))


def family_of(name: str) -> str:
    """``matmul``, ``layout``, ``elementwise`` or ``other`` (the values of
    ``harness.kernels.tables.Family``), from the name."""
    if is_matmul(name):
        return "matmul"
    if LAYOUT.search(name):
        return "layout"
    if ELEMENTWISE.search(name):
        return "elementwise"
    return "other"


def gemm_pipe(name: str) -> str:
    """For a GEMM or convolution kernel (:func:`is_matmul`), the pipe its name says its
    multiply-adds ran on: ``tensor``, ``fma`` (the SIMT units: fp32 without TF32, fp64, GEMVs,
    SIMT fallbacks), or ``unknown`` where the name says neither (a Triton matmul names no
    type). A name that spells no tensor-core hint but an fp32 or fp64 type is ``fma``: cuBLAS
    and cuDNN name their tensor-core kernels by instruction, shape or 16-bit/TF32 type."""
    if FMA_HINTS.search(name):
        return FMA
    if TENSOR_HINTS.search(name):
        return TENSOR
    return FMA if dtype(name) in ("fp32", "fp64") else UNKNOWN
