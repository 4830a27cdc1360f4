"""The kernels row's tables and their vocabulary, in one place: file names, columns and the
values of their state columns.

``kernels.csv``, ``kernel_limits.csv`` and ``kernels_run.json`` are written by
:mod:`harness.kernels.step`; the judge's second witness (:mod:`harness.judge.witness`), the
report's Kernels section (:mod:`harness.report.kernels`) and the roofline pictures read them
by the names here. Stdlib and :mod:`bottlenecks` only: whoever reads the tables imports no
ncu code.
"""

from __future__ import annotations

import bottlenecks
from harness.core.enums import StrEnum

__all__ = [
    "ARITHMETIC_PIPES",
    "KERNELS_CSV",
    "KERNEL_COLUMNS",
    "LIMITS_CSV",
    "LIMIT_COLUMNS",
    "RUN_JSON",
    "WITNESSED",
    "Bound",
    "Family",
    "Pipe",
    "RowState",
    "StepState",
]

KERNELS_CSV = "kernels.csv"
LIMITS_CSV = "kernel_limits.csv"
RUN_JSON = "kernels_run.json"


class _Value(StrEnum):
    """A kernels.csv value."""


class Bound(_Value):
    """What limits a kernel, by its speed-of-light shares (``kernels.csv``'s ``bound``)."""

    COMPUTE = "compute"
    MEMORY = "memory"
    LATENCY = "latency"
    UNKNOWN = "unknown"


class Pipe(_Value):
    """The SM pipe a kernel's arithmetic ran on (``kernels.csv``'s ``pipe``): the busiest of
    the arithmetic pipes above a floor (``none`` below it), for a matrix kernel the larger of
    the tensor and FMA pipes (:func:`harness.kernels.classify.pipe`)."""

    TENSOR = "tensor"
    """Tensor cores (HMMA/HGMMA: fp16, bf16, tf32, fp8, int8 matrix math)."""
    FMA = "fma"
    """The SIMT floating-point multiply-add pipe (fp32 math, and fp16x2)."""
    ALU = "alu"
    """Integer and logic operations, comparisons, conversions: address and index arithmetic."""
    FP64 = "fp64"
    """Double precision."""
    XU = "xu"
    """The transcendental unit (exp, tanh, rsqrt, sin...)."""
    NONE = "none"
    """No arithmetic pipe was busy enough to name: the kernel's time went to memory or
    latency."""
    UNKNOWN = "unknown"
    """ncu collected no pipe reading."""


#: The arithmetic pipes a kernel can be said to run on, in the order ties are broken.
ARITHMETIC_PIPES: tuple[Pipe, ...] = (Pipe.TENSOR, Pipe.FMA, Pipe.ALU, Pipe.FP64, Pipe.XU)


class Family(_Value):
    """What a kernel is, by its name (``kernels.csv``'s ``family``): a hint; the pipe and bound
    columns say what it did."""

    MATMUL = "matmul"
    """GEMM and convolution families (cuBLAS xmma/nvjet/sgemm, CUTLASS, cuDNN implicit GEMMs)."""
    LAYOUT = "layout"
    """Layout conversions (cuDNN's nchwToNhwc / nhwcToNchw, transposes)."""
    ELEMENTWISE = "elementwise"
    """Elementwise and reduction kernels (PyTorch's elementwise / reduce kernels, Triton's
    pointwise and reductions, norms, softmax)."""
    OTHER = "other"
    """Anything else (optimizer steps, copies, custom kernels)."""


class RowState(_Value):
    """How a variant's row ended (``kernel_limits.csv``'s ``state``)."""

    OK = "ok"
    """Its kernels were profiled (by its own ncu run, or reused from another variant's)."""
    NO_KERNELS = "no_kernels"
    FAILED = "failed"
    TIMEOUT = "timeout"
    OVER_BUDGET = "over_budget"
    SKIPPED = "skipped"


class StepState(_Value):
    """How the step ended (``kernels_run.json``'s ``state``)."""

    DONE = "done"
    SKIPPED = "skipped"
    FAILED = "failed"


#: The classes whose mechanism shows at kernel level, so the row is a second witness of their
#: measured truth (the rules: :mod:`harness.judge.witness`). Their scenarios' variants are
#: profiled first when the budget cannot take every variant.
WITNESSED: frozenset[str] = frozenset(
    k.value
    for k in (
        bottlenecks.Klass.FP32_MATH,
        bottlenecks.Klass.UNFUSED_ELEMENTWISE,
        bottlenecks.Klass.LAYOUT_TRANSPOSE,
        bottlenecks.Klass.LAUNCH_BOUND,
    )
)

#: kernels.csv's columns, in order: the variant, the kernel's plan (its nsys time), ncu's
#: readings, the classification, the at-bound time, where it was measured, its names.
KERNEL_COLUMNS: tuple[str, ...] = (
    "scenario", "variant", "kind", "rank", "kernel", "family", "grid", "block", "planned",
    "launches_per_step", "kernel_ms_per_step", "share", "duration_us",
    "sm_throughput_pct", "memory_throughput_pct", "dram_throughput_pct", "l1_throughput_pct",
    "l2_throughput_pct", "sol_pct", "bound", "tensor_pipe_pct", "fma_pipe_pct",
    "alu_pipe_pct", "fp64_pipe_pct", "xu_pipe_pct", "pipe", "pipe_pct", "matmul", "dtype",
    "achieved_occupancy_pct", "theoretical_occupancy_pct", "registers_per_thread",
    "dram_bytes", "dram_gbps", "sm_frequency_ghz", "passes", "backed_up_bytes",
    "at_bound_ms_per_step", "measured_in", "mangled", "demangled",
)  # fmt: skip

#: kernel_limits.csv's columns, in order: the variant and how its row ended, its coverage,
#: the step's roofline limit beside its measured GPU time, the bound shares, then its ncu
#: process (when it started, how long it ran, its worker's parts).
LIMIT_COLUMNS: tuple[str, ...] = (
    "scenario", "variant", "kind", "state", "reason", "selection", "steps",
    "kernels_planned", "kernels_profiled", "kernels_matched", "kernels_reused",
    "coverage_share", "kernel_ms_per_step", "profiled_kernel_ms_per_step",
    "at_bound_ms_per_step", "roofline_ms_per_step", "gpu_busy_ms_per_step", "step_ms_mean",
    "roofline_share_of_busy", "roofline_share_of_step", "compute_bound_share",
    "memory_bound_share", "latency_bound_share", "tensor_pipe_share", "launches",
    "start_s", "wall_s", "worker_cuda_init_s", "worker_setup_s", "worker_warmup_s",
    "worker_window_s",
)  # fmt: skip
