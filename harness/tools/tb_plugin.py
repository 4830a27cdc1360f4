"""``tb-plugin``: the PyTorch profiler TensorBoard plugin's tensor-core rule, on the nsys export.

The plugin (torch-tb-profiler) splits the GPU kernel time of a Kineto trace into kernels on
tensor cores and not, and the kernels of tensor-core eligible operators (GEMMs, convolutions);
where eligible work runs and none of it is on tensor cores, its overview recommends Automatic
Mixed Precision. This adapter is that rule on what an nsys export holds, its kernels (names
and times; nothing else is read): the GEMM and convolution kernels by name family, split by
what their names say about the pipe (:func:`analysis.kernel_names.gemm_pipe`: cuBLAS's
``*_ffma_*``/``sgemm``, CUTLASS's ``simt`` on the FMA units; HMMA/GMMA, ``s16816``, TF32,
bf16/fp16 and ``nvjet`` on the tensor cores). ``fp32_math`` is flagged when the GEMM time off
the tensor cores passes ``tools.tb_plugin.fp32_min_gemm_share`` of the kernel time. TF32 runs
on the tensor cores: the plugin counts it as used, and so does this rule (the evidence gives
its share).

The plugin reads kernels, not the GPU's idle time: a data-stalled program whose GEMMs run in
fp32 is flagged as the plugin would flag it. The plugin's own allowlist of tensor-core kernel
names predates cuBLAS's ``xmma`` naming (it counts any ``xmma_gemm`` as tensor-core work, the
fp32 ``*_ffma_*`` ones included); the rule here reads the names as the suite does. Every
other class is ``n/a``: the plugin's other recommendations (data loader share, DDP, GPU
utilisation) read the profiler's operator tree, which an nsys export does not hold.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from analysis import kernel_names as KN
from analysis.trace import kernels
from bottlenecks import Klass
from harness.core.tools_config import TbPluginRules
from harness.tools import base
from harness.tools.base import Call, Calls, Context, Flag, Traces, all_na, every_class, register

#: Why a class other than fp32_math is n/a.
UNSEEN = "the plugin's tensor-core rule speaks to fp32_math only (its other rules read operators)"


@dataclass(frozen=True)
class TensorCoreSplit:
    """The plugin's numbers: GPU kernel time and how much of it each kind of GEMM took (ns)."""

    kernel_ns: int
    gemm_ns: int
    """GEMM and convolution kernels (the eligible ones)."""
    tensor_ns: int
    """... whose names say tensor cores (TF32 included)."""
    fma_ns: int
    """... whose names say the SIMT FMA units."""
    tf32_ns: int
    """The tensor-core share in TF32 (half the bf16 rate: the evidence names it)."""

    @property
    def fma_share(self) -> float:
        """GEMM time off the tensor cores over all kernel time."""
        return self.fma_ns / self.kernel_ns if self.kernel_ns else 0.0


def split(names: pd.Series, durations: pd.Series) -> TensorCoreSplit:
    """The split of the kernels ``names`` (demangled) with their ``durations`` (ns)."""
    per_name = durations.groupby(names.fillna("").astype(str)).sum()
    gemm = {n: int(d) for n, d in per_name.items() if KN.is_matmul(n)}
    pipes = {n: KN.gemm_pipe(n) for n in gemm}
    return TensorCoreSplit(
        kernel_ns=int(per_name.sum()),
        gemm_ns=sum(gemm.values()),
        tensor_ns=sum(d for n, d in gemm.items() if pipes[n] == KN.TENSOR),
        fma_ns=sum(d for n, d in gemm.items() if pipes[n] == KN.FMA),
        tf32_ns=sum(d for n, d in gemm.items() if pipes[n] == KN.TENSOR and KN.dtype(n) == "tf32"),
    )


def fp32_call(s: TensorCoreSplit, rules: TbPluginRules) -> Call:
    """fp32_math's call from the split (pure: testable on any split)."""
    if not s.gemm_ns:
        return Call(Flag.CLEAR, "no tensor-core eligible (GEMM or convolution) kernels")

    def pct(ns: int) -> str:
        return f"{ns / s.kernel_ns:.0%}"

    text = (
        f"GEMM/conv kernels {pct(s.gemm_ns)} of the kernel time: {pct(s.tensor_ns)} on tensor "
        f"cores (tf32 {pct(s.tf32_ns)}), {pct(s.fma_ns)} off them"
    )
    if s.tensor_ns == 0:
        text += "; none on tensor cores (the plugin's own rule: it would recommend AMP)"
    return Call(Flag.FLAGGED if s.fma_share >= rules.fp32_min_gemm_share else Flag.CLEAR, text)


@register
class TbPlugin(base.BuiltIn):
    """The plugin's tensor-core rule on the export's kernels."""

    name = "tb-plugin"
    reads = "sqlite"

    def judge(self, traces: Traces, ctx: Context) -> Calls:
        return base.on_export(traces, lambda trace: _judge(kernels(trace), ctx))


def _judge(k: pd.DataFrame, ctx: Context) -> Calls:
    """The rule's call on the export's kernels; every class but fp32_math is n/a."""
    if k.empty:
        return all_na("the export has no CUDA kernels")
    call = fp32_call(split(k["name"], k["duration_ns"]), ctx.tools.tb_plugin)
    return every_class(lambda c: call if c == Klass.FP32_MATH else Call(Flag.NA, UNSEEN))
