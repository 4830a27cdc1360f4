"""fp32_matmul: a feed-forward stack trained in fp32 at PyTorch's defaults, its GEMMs on the
SIMT FMA units (class ``fp32_math``).

PyTorch multiplies fp32 matrices in full fp32 unless told otherwise
(``torch.get_float32_matmul_precision() == "highest"``, ``allow_tf32`` False since 1.12), so a
model built and fed in fp32 runs every GEMM on the FMA pipes, not the tensor cores. The fixes
are one line each: TF32 (``set_float32_matmul_precision("high")``: tensor cores at reduced
mantissa, about half the bf16 rate) or bf16 autocast. ``ideal`` runs the same GEMMs with model
and data in bf16 and no casts at all: the measured limit.

Why this size (an estimate from FLOPs and bytes, not a measurement). The model is ``depth``
(severity, 3) blocks ``x + fc2(gelu(fc1(x)))`` of width 1024 and hidden 4096: 25.2 M
parameters; 16384 tokens a step. GEMM work per step ``6 * params * tokens`` = 2.47 TFLOP.
Elementwise work (gelu, residual): ~2.6 GB a step in fp32, ~1.4 GB in bf16; fused AdamW: 28 B
a parameter in fp32 (0.7 GB), 14 B in bf16. At an fp32 SIMT rate of ~55 TFLOP/s, TF32 ~395,
bf16 ~700 and ~4 TB/s for the memory-bound kernels:

| variant | GEMMs | other | step | speedup |
| --- | ---: | ---: | ---: | ---: |
| baseline | 45 ms | 0.8 ms | ~46 ms | 1 |
| tf32 | 6.3 ms | 0.8 ms | ~7.1 ms | ~6.5x |
| bf16_autocast | 3.5 ms | 0.6 ms (casts 0.07) | ~4.1 ms | ~11x |
| ideal | 3.5 ms | 0.4 ms | ~3.9 ms | ~12x |

bf16_autocast sits ~5% above ideal (its fp32 master weights and optimizer, the weight casts):
clean. It is also the cause removed and nothing else, so the truth is timed against it
(``removed_by``): its GEMMs run at the bf16 rate while its other GPU work stays the baseline's
(the casts it adds about offset the bf16 activation function), which is what the detector's
prediction removes. ``ideal`` removes more than the cause: with model and data in bf16, its
elementwise kernels and optimizer move half the bytes (the kernel split per variant:
docs/scenario-measurements.md). tf32 sits ~45% above bf16_autocast: the class is still there, at
half strength (partial). The tokens are many for the parameters so that those fixed per-parameter costs stay small beside
the GEMMs. A full variant's warm-up and window take ~0.9 s at most (baseline: 19 steps of ~48
ms, docs/scenario-measurements.md); the activations need ~2 GB.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bottlenecks import Klass
from scenarios._base import (
    Expectation,
    Scenario,
    ScenarioConfig,
    Severity,
    Size,
    Teaching,
    Variant,
)


@dataclass(kw_only=True)
class Fp32MatmulSize(Size):
    """Work per variant for fp32_matmul."""

    warmup_steps: int = 3
    """Steps before the window (cuBLAS picks its kernels, the allocator fills)."""
    steps: int = 16
    """Steps in the measured window: every variant is GPU-bound, its steps repeat within 1%."""
    tokens: int = 16384
    """Rows of every GEMM a step (a batch of 16 sequences of 1024 tokens, flattened)."""
    width: int = 1024
    """Model width: the residual stream's features."""
    hidden: int = 4096
    """Feed-forward hidden width (4 x width, as in GPT-2 and ViT)."""
    num_batches: int = 4
    """Distinct input batches made on the device in set-up; the steps cycle over them."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("tokens", "width", "hidden", "num_batches"):
            if getattr(self, name) < 1:
                raise ValueError(f"size field '{name}' must be >= 1, got {getattr(self, name)}")


@dataclass(kw_only=True)
class Fp32MatmulConfig(ScenarioConfig):
    """Config schema for fp32_matmul."""

    severity: float = 3
    """Feed-forward blocks whose GEMMs run in the variant's precision (the model's depth)."""
    smoke: Fp32MatmulSize = field(
        default_factory=lambda: Fp32MatmulSize(
            warmup_steps=2, steps=6, tokens=64, width=32, hidden=64, num_batches=2
        )
    )
    """CPU size: seconds per variant."""
    full: Fp32MatmulSize = field(default_factory=Fp32MatmulSize)
    """GPU size: 3 blocks of 1024 x 4096 on 16384 tokens (2.47 TFLOP of GEMMs a step)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.severity != int(self.severity):
            raise ValueError(
                f"scenario.fp32_matmul.severity={self.severity} must be a whole number of blocks"
            )


SCENARIO = Scenario(
    name="fp32_matmul",
    bottleneck=Klass.FP32_MATH,
    title="GEMMs in fp32 on the FMA units",
    variants=(
        Variant(
            name="baseline",
            kind="baseline",
            summary="model and data in fp32, PyTorch's default matmul precision ('highest': "
            "no TF32), no autocast",
        ),
        Variant(
            name="tf32",
            kind="fix",
            summary="torch.set_float32_matmul_precision('high'): the fp32 GEMMs on the tensor "
            "cores in TF32",
            expect=Expectation(
                role="partial",
                because="TF32 runs on the tensor cores at about half the bf16 rate, so the "
                "GEMMs stay roughly twice as long as in bf16: part of the class is left",
            ),
        ),
        Variant(
            name="bf16_autocast",
            kind="fix",
            summary="torch.autocast(dtype=bfloat16) around the forward: bf16 GEMMs, fp32 master "
            "weights and optimizer",
        ),
        Variant(
            name="ideal",
            kind="ideal",
            summary="the same GEMMs with model and data in bf16: no casts, the bf16 tensor-core "
            "rate",
        ),
    ),
    severity=Severity(
        meaning="feed-forward blocks (width 1024, hidden 4096) whose GEMMs run in fp32",
        unit="blocks",
        low=1,
        high=32,
        why_default="three transformer feed-forward blocks trained the way a first script "
        "trains them: model and batch in fp32 and nothing else set, so PyTorch's default "
        "'highest' matmul precision keeps every GEMM off the tensor cores",
    ),
    teaching=Teaching(
        symptom="The GPU row is solid (busy ~100%) with a few long GEMM kernels whose names "
        "carry 'sgemm', 'f32f32' or 'ffma' and no tensor-core tile ('hmma', 'bf16', 'tf32', "
        "'nvjet' ... 'h'); nothing on the CPU side waits. The timeline looks healthy: the GPU "
        "is busy, but on the slow pipe.",
        cause="fp32 matrices are multiplied in full fp32 unless TF32 or a 16-bit type is asked "
        "for: PyTorch's default matmul precision is 'highest', so cuBLAS runs FMA (SIMT) "
        "kernels at a small fraction of what the tensor cores do in bf16.",
        fix="Train under torch.autocast(device_type='cuda', dtype=torch.bfloat16), or at least "
        "set torch.set_float32_matmul_precision('high') for TF32. Fixed, the same GEMMs run "
        "as tensor-core kernels an order of magnitude shorter, and elementwise kernels and "
        "the optimizer become a visible share of the step.",
    ),
    removed_by="bf16_autocast",
    config_cls=Fp32MatmulConfig,
    build=f"{__name__}.workload:build",
    expected_diagnosis="baseline: nearly all GPU time in fp32 SIMT GEMM kernels (no tensor-core "
    "kernel), GPU busy; tf32: tensor-core TF32 GEMMs, still about twice the bf16 time; "
    "bf16_autocast and ideal: bf16 tensor-core GEMMs",
)
