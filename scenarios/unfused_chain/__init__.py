"""unfused_chain: a hand-written RMSNorm and tanh-GELU around bf16 matmuls, each op its own
kernel forward and backward (class ``unfused_elementwise``).

Each block is ``x + scale * fc2(gelu(fc1(rms_norm(x))))`` in bf16 (no dropout), with
``rms_norm`` and ``gelu`` written out the way model code writes them (the LLaMA reference's
upcast RMSNorm; GPT-2's tanh GELU). Eager autograd runs every ``pow``, ``mean``, ``rsqrt``,
``mul``, ``add`` and ``tanh`` as its own kernel that reads and writes a whole activation, and
the backward runs about twice as many: the chains move their tensors ~50 times where one
fused kernel would move them once each way. The fixes: ``torch.compile`` of the two functions
(Inductor fuses each into one kernel forward and about one backward; compiled in set-up) and
the library's fused ops (``F.rms_norm``, a fused CUDA kernel in recent PyTorch, and
``F.gelu(approximate="tanh")``). ``ideal`` keeps the same matmuls and replaces each chain by
one elementwise pass that moves the chain's bytes once (a custom autograd function: one kernel
forward, one backward): the measured limit.

Why this size (an estimate from FLOPs and bytes; the first GPU run's numbers are in
docs/scenario-measurements.md). ``depth`` (severity, 12) blocks of width 1024 and hidden 4096
on 16384 tokens: 100 M bf16 parameters. Per block the GEMMs are 824 GFLOP (1.2 ms at ~700
TFLOP/s). The hand-written GELU moves ~46 passes of its 134 MB tensor (18 forward, 28
backward), the RMSNorm ~54 bf16-sized passes of its 34 MB one, the residual and scale ~14: 8.4
GB a block, ~2.4 ms at ~3.6 TB/s. Fused, the two chains move ~25 passes of the 34 MB tensor in
all plus the residual's: ~1.4 GB, ~0.4 ms.

| variant | per block | step (12 blocks, AdamW, loss) | speedup |
| --- | ---: | ---: | ---: |
| baseline | ~3.6 ms | ~44 ms | 1 |
| torch_compile | ~1.6 ms | ~20 ms | ~2.2x |
| fused_ops | ~1.6 ms | ~20 ms | ~2.2x |
| ideal | ~1.6 ms | ~19.6 ms | ~2.25x |

The tokens are many so that every variant is bound by the GPU. The baseline launches ~60
kernels a block (~730 a step, ~6 ms of host time). ``torch_compile`` launches few, but each
call of a compiled function costs the host its guards, the autograd wrapper and its Triton
launches (48 calls a step, forward and backward): ~12 ms of host time a step, which at half
these tokens sat above its GPU time and made the fix partly launch-bound. A full variant's
warm-up and window take ~0.85 s in the baseline (19 steps); the activations need ~10 GB.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bottlenecks import Klass
from scenarios._base import (
    Scenario,
    ScenarioConfig,
    Severity,
    Size,
    Teaching,
    Variant,
)


@dataclass(kw_only=True)
class UnfusedChainSize(Size):
    """Work per variant for unfused_chain."""

    warmup_steps: int = 3
    """Steps before the window."""
    steps: int = 16
    """Steps in the measured window: every variant is GPU-bound, its steps repeat within 1%."""
    tokens: int = 16384
    """Rows of every activation (a batch of 16 sequences of 1024 tokens, flattened)."""
    width: int = 1024
    """Model width: the residual stream's features, the RMSNorm's size."""
    hidden: int = 4096
    """Feed-forward hidden width, the GELU's size (4 x width)."""
    num_batches: int = 4
    """Distinct input batches made on the device in set-up; the steps cycle over them."""
    compile_steps: int = 2
    """Training steps run in set-up by the compiled variant: the first compiles."""
    depth_override: int = 0
    """Blocks at this size when > 0, overriding severity (keeps the CPU run in seconds); 0
    takes the depth from severity."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("tokens", "width", "hidden", "num_batches", "compile_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"size field '{name}' must be >= 1, got {getattr(self, name)}")


@dataclass(kw_only=True)
class UnfusedChainConfig(ScenarioConfig):
    """Config schema for unfused_chain."""

    severity: float = 12
    """Blocks, each with a hand-written RMSNorm and tanh-GELU chain (the model's depth)."""
    smoke: UnfusedChainSize = field(
        default_factory=lambda: UnfusedChainSize(
            warmup_steps=2,
            steps=6,
            tokens=64,
            width=32,
            hidden=64,
            num_batches=2,
            depth_override=2,
        )
    )
    """CPU size: 2 blocks, seconds per variant (the compiled one compiles two small functions:
    ~30 s on a 2-core box with a cold Inductor cache)."""
    full: UnfusedChainSize = field(default_factory=UnfusedChainSize)
    """GPU size: 12 blocks of 1024 x 4096 on 16384 tokens in bf16."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.severity != int(self.severity):
            raise ValueError(
                f"scenario.unfused_chain.severity={self.severity} must be a whole number of blocks"
            )

    def depth(self, size: UnfusedChainSize) -> int:
        """Blocks in the model at ``size``."""
        return size.depth_override or int(self.severity)


SCENARIO = Scenario(
    name="unfused_chain",
    bottleneck=Klass.UNFUSED_ELEMENTWISE,
    title="Hand-written RMSNorm and GELU: one kernel per op",
    variants=(
        Variant(
            name="baseline",
            kind="baseline",
            summary="hand-written RMSNorm (upcast, pow, mean, rsqrt, mul) and tanh-GELU in eager "
            "autograd around bf16 matmuls",
        ),
        Variant(
            name="torch_compile",
            kind="fix",
            summary="torch.compile of the two functions (compiled in set-up): one fused kernel "
            "each forward, about one backward",
            compiles=True,
        ),
        Variant(
            name="fused_ops",
            kind="fix",
            summary="the library's fused ops: F.rms_norm and F.gelu(approximate='tanh')",
        ),
        Variant(
            name="ideal",
            kind="ideal",
            summary="the same matmuls, each chain replaced by one elementwise kernel forward and "
            "one backward that move its bytes once",
        ),
    ),
    severity=Severity(
        meaning="blocks with a hand-written RMSNorm and tanh-GELU (width 1024, hidden 4096)",
        unit="blocks",
        low=1,
        high=64,
        why_default="a 12-block model whose norm and activation are copied from a reference "
        "implementation as plain tensor ops, the way many research code bases and tutorials "
        "write RMSNorm and GELU, and trained eagerly",
    ),
    teaching=Teaching(
        symptom="Between the GEMMs the GPU row is a dense run of short elementwise and "
        "reduction kernels (pow, mean, rsqrt, mul, add, tanh and their backward: "
        "'vectorized_elementwise_kernel', 'reduce_kernel'), each over a tensor of the same "
        "size, together longer than the matmuls; the GPU is busy, the host is not the limit.",
        cause="Every eager op is one kernel that reads its inputs from HBM and writes its "
        "output back, and autograd saves intermediates and runs a backward kernel per op: a "
        "ten-op formula moves its tensor dozens of times, where the arithmetic would take one "
        "pass.",
        fix="Fuse the chain: torch.compile the function (Inductor emits one kernel forward and "
        "about one backward), or call the fused library op (F.rms_norm, F.gelu(approximate="
        "'tanh')). Fixed, each chain is one or two kernels between the GEMMs and the step "
        "approaches the GEMMs' time.",
    ),
    config_cls=UnfusedChainConfig,
    build=f"{__name__}.workload:build",
    expected_diagnosis="baseline: runs of ~8-16 elementwise/reduction kernels over same-sized "
    "tensors between the GEMMs, forward and backward, taking more GPU time than the GEMMs; "
    "torch_compile: one Triton kernel per chain each way; fused_ops: one fused norm and one "
    "gelu kernel each way; ideal: one elementwise kernel per chain each way",
)
