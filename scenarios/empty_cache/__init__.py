"""empty_cache: transformer layers on batches whose sequence length changes every step, with
``torch.cuda.empty_cache()`` called every K steps (class ``allocator_churn``).

The lengths come from one seeded sequence (the same for every variant).
PyTorch's caching allocator keeps freed blocks for reuse, so a loop normally stops calling
``cudaMalloc`` once its cache has grown to fit it. ``empty_cache`` hands every unused cached
segment back to the driver: ``cudaFree`` synchronises the device (the host loses its lead on
the GPU) and then blocks per segment while the GPU idles, and the next step's forward asks the
driver again for every activation of 10 MB or more (one segment each) and for the small pools.
Users call it because variable shapes make the cache fragment and reserved memory climb. The
fixes each drop the call: ``no_empty_cache`` alone (the cache grows to its fragmented steady
state), ``bucketed`` (lengths padded up to a few buckets, so the cache sees few sizes and stays
compact; the padding costs ~3% more tokens) and ``expandable_segments`` (the allocator grows
segments in place, ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``, set through
``torch.cuda.memory._set_allocator_settings`` before the variant's first allocation).
``ideal`` drops the call and warms the cache with a step at the longest length in set-up.

Only the allocator may pay for the changing lengths. Attention runs on the flash or
memory-efficient SDPA kernels, not cuDNN's, which builds and JIT-compiles a plan on the host
for every new length (the GPU idle, in every variant alike); every other kernel is
precompiled. And each variant's window reads the lengths from its first step on, so all
windows see the same lengths whatever their warm-ups ran.

Why this size (from FLOPs and bytes and the driver costs of the first GPU run:
docs/scenario-measurements.md). 16 pre-norm layers of width 512 (8 heads, MLP 2048) and an
8192-token vocabulary, batch 16, lengths 512-1536 in steps of 64 (16384 tokens on average),
bf16 autocast, fused AdamW: ~33 ms of GPU work a step. Each layer keeps ~8 activations of 10
MB or more for the backward, so a step after ``empty_cache`` makes ~120 ``cudaMalloc`` calls
and the next ``empty_cache`` ~120 ``cudaFree`` calls, ~10-20 ms of driver time each way, the
frees after a device sync with the GPU idle.

| variant | step | speedup |
| --- | ---: | ---: |
| baseline (K = 1) | ~55 ms | 1 |
| no_empty_cache | ~34 ms | ~1.6x |
| bucketed | ~35 ms (3% padding) | ~1.55x |
| expandable_segments | ~34 ms | ~1.6x |
| ideal | ~34 ms | ~1.6x |

The severity knob (K) is where to turn it. A full variant's warm-up and window (4 + 24 steps)
take ~1.5 s in the baseline and ~1 s in the others; reserved memory stays under ~16 GB.
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
class EmptyCacheSize(Size):
    """Work per variant for empty_cache."""

    warmup_steps: int = 4
    """Steps before the window."""
    steps: int = 24
    """Steps in the measured window: the same 24 lengths in every variant's window, the variants
    compared step for step, so the lengths' spread leaves the ratios."""
    batch_size: int = 16
    """Sequences per step."""
    min_len: int = 512
    """Shortest sequence length of the seeded sequence, tokens."""
    max_len: int = 1536
    """Longest sequence length, tokens."""
    len_multiple: int = 64
    """Every length is a multiple of this (as tokenizers' padding to 64 makes them)."""
    buckets: int = 8
    """Length buckets of the ``bucketed`` variant, evenly spaced up to ``max_len``."""
    width: int = 512
    """Model width."""
    heads: int = 8
    """Attention heads (head size width / heads)."""
    layers: int = 16
    """Transformer layers."""
    vocab: int = 8192
    """Token vocabulary (embedding and LM head)."""
    num_sequences: int = 64
    """Token sequences of ``max_len + 1`` made on the device in set-up; batches cycle over them."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("batch_size", "len_multiple", "buckets", "width", "heads", "layers"):
            if getattr(self, name) < 1:
                raise ValueError(f"size field '{name}' must be >= 1, got {getattr(self, name)}")
        if not 0 < self.min_len <= self.max_len:
            raise ValueError(f"need 0 < min_len <= max_len, got {self.min_len}, {self.max_len}")
        if self.min_len % self.len_multiple or self.max_len % self.len_multiple:
            raise ValueError("min_len and max_len must be multiples of len_multiple")
        if self.width % self.heads:
            raise ValueError(f"heads={self.heads} must divide width={self.width}")
        if self.vocab < 2 or self.num_sequences < self.batch_size:
            raise ValueError("need vocab >= 2 and num_sequences >= batch_size")


@dataclass(kw_only=True)
class EmptyCacheConfig(ScenarioConfig):
    """Config schema for empty_cache."""

    severity: float = 1
    """Steps between two ``torch.cuda.empty_cache()`` calls in the baseline (1: every step)."""
    smoke: EmptyCacheSize = field(
        default_factory=lambda: EmptyCacheSize(
            warmup_steps=2,
            steps=6,
            batch_size=2,
            min_len=16,
            max_len=48,
            len_multiple=8,
            buckets=2,
            width=32,
            heads=2,
            layers=2,
            vocab=64,
            num_sequences=4,
        )
    )
    """CPU size: seconds per variant (empty_cache is a no-op without CUDA)."""
    full: EmptyCacheSize = field(default_factory=EmptyCacheSize)
    """GPU size: 16 layers of width 512, batch 16, lengths 512-1536."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.severity != int(self.severity):
            raise ValueError(
                f"scenario.empty_cache.severity={self.severity} must be a whole number of steps"
            )


SCENARIO = Scenario(
    name="empty_cache",
    bottleneck=Klass.ALLOCATOR_CHURN,
    title="torch.cuda.empty_cache() in a loop of changing shapes",
    variants=(
        Variant(
            name="baseline",
            kind="baseline",
            summary="torch.cuda.empty_cache() every K steps, sequence lengths 512-1536 changing "
            "every step",
        ),
        Variant(
            name="no_empty_cache",
            kind="fix",
            summary="the call dropped: the caching allocator keeps what it has (reserved memory "
            "grows to its fragmented steady state)",
        ),
        Variant(
            name="bucketed",
            kind="fix",
            summary="lengths padded up to 8 buckets (padding ignored by the loss) and the call "
            "dropped: few distinct sizes, a compact cache",
            expect=Expectation(
                role="clean",
                because="no churn once each bucket has been seen; the padding adds ~3% tokens, "
                "compute that is not the allocator's",
            ),
        ),
        Variant(
            name="expandable_segments",
            kind="fix",
            summary="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (set before the first "
            "allocation) and the call dropped: segments grow in place",
            needs_gpu="an allocator setting of the CUDA caching allocator",
        ),
        Variant(
            name="ideal",
            kind="ideal",
            summary="no empty_cache, and a cache warmed in set-up by a step at the longest length",
        ),
    ),
    severity=Severity(
        meaning="steps between two torch.cuda.empty_cache() calls in the loop",
        unit="steps",
        low=1,
        high=1000,
        why_default="empty_cache() after every step is the common reaction to reserved memory "
        "that climbs with variable-length batches (or to an out-of-memory error once), copied "
        "from forum answers into the training loop",
    ),
    teaching=Teaching(
        symptom="Every K steps the CUDA API row shows a burst of cudaFree calls after a "
        "synchronisation, with the GPU idle beside them, and the next step's forward is "
        "sprinkled with cudaMalloc calls (about one per large activation); with --cuda-memory-usage the "
        "device's reserved memory drops and climbs back every period.",
        cause="torch.cuda.empty_cache() returns every unused cached segment to the driver. "
        "cudaFree synchronises the device and costs tens of microseconds a segment, and every "
        "activation of the next step then needs a fresh cudaMalloc: the caching allocator's "
        "whole point, not synchronising on free and not asking the driver again, is undone.",
        fix="Drop the call. If reserved memory is the worry, pad sequence lengths to a few "
        "buckets (few distinct sizes keep the cache compact) or set "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (segments grow in place instead of "
        "fragmenting). Fixed, cudaMalloc appears only in the first steps and cudaFree not at "
        "all.",
    ),
    config_cls=EmptyCacheConfig,
    build=f"{__name__}.workload:build",
    expected_diagnosis="baseline: cudaFree bursts after a device sync every K steps and a "
    "cudaMalloc per large activation every step, GPU idle beside them; fixes and ideal: no "
    "cudaFree and (after the first steps) no cudaMalloc in the window; expandable_segments: "
    "the same, its few growths as cuMemCreate/cuMemMap",
)
