"""pageable_copies: a large batch copied from pageable host memory, blocking, every step
(class ``pageable_copy``).

The host batch is already made (no decoding cost here: that is ``sync_loading``); what is left
is the transfer itself. ``x.to(device)`` on a plain CPU tensor makes the driver wait for the
stream to drain, stage the bytes through its own small pinned buffer at a fraction of the link's
speed, and return only when the copy is done, so copy and compute alternate instead of
overlapping. The fix pins the host buffers once, copies batch N+1 on a side stream while step N
computes, and orders the two streams with CUDA events.

On a CPU box there is no link and no stream: the "copy" is a memcpy into a fresh host tensor
(``clone``) so every variant still runs the same code path; the fix skips pinning and streams
and just copies one step ahead. ``h2d_gbps`` is then a host memcpy rate, and the link
micro-benchmarks (``pinned_h2d_gbps_limit``, ``pageable_h2d_gbps``) are omitted.
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
from scenarios._memory import MemoryEstimate

MB = 1e6  # the severity is in decimal megabytes, as copy rates are in decimal GB/s


@dataclass(kw_only=True)
class PageableCopiesSize(Size):
    """Work per variant for pageable_copies."""

    severity_scale: float = 1.0
    """Fraction of the severity's megabytes this size copies per step (1.0 on the GPU; the smoke
    size copies a sliver so the CPU run stays in seconds)."""
    image_size: int = 224
    """Side of the square float32 RGB images in the host batch, px; the number of images per step
    is the batch's megabytes divided by one image's bytes."""
    host_batches: int = 3
    """Distinct host batches the steps rotate over, so no copy re-reads what the last one did."""
    patch: int = 16
    """Side of the square patches the model embeds (one Linear over each flattened patch, the map
    of a ViT's stride-``patch`` convolution)."""
    dim: int = 768
    """Token width of the patch-MLP model (ViT-B's 768)."""
    hidden: int = 3072
    """Hidden width of each MLP block (4 x dim, as in ViT-B)."""
    depth: int = 3
    """Residual MLP blocks; the knob that sets compute per step against the copy (a few ms per
    block at the default batch; 3 keeps the copy near 60% of the baseline's step)."""
    num_classes: int = 1000
    """Classifier outputs."""
    bench_reps: int = 5
    """Timed copies per kind in the setup micro-benchmark (median reported)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 < self.severity_scale <= 1:
            raise ValueError(f"severity_scale must be in (0, 1], got {self.severity_scale}")
        for name in ("image_size", "host_batches", "patch", "dim", "hidden", "depth"):
            if getattr(self, name) < 1:
                raise ValueError(f"size field '{name}' must be >= 1, got {getattr(self, name)}")
        if self.num_classes < 2:
            raise ValueError(f"num_classes must be >= 2, got {self.num_classes}")
        if self.image_size % self.patch:
            raise ValueError(
                f"patch={self.patch} must divide image_size={self.image_size} "
                "(the model tiles the image into whole patches)"
            )

    def image_bytes(self) -> int:
        return 3 * self.image_size * self.image_size * 4

    def images_per_step(self, severity_mb: float) -> int:
        """Images whose float32 bytes add up to the (scaled) severity, at least one."""
        return max(1, round(severity_mb * self.severity_scale * MB / self.image_bytes()))


@dataclass(kw_only=True)
class PageableCopiesConfig(ScenarioConfig):
    """Config schema for pageable_copies."""

    severity: float = 154
    """Host batch copied per step, MB (float32). 154 MB is a 256 x 3 x 224 x 224 float32 image
    batch, what a normalised ImageNet batch in plain CPU memory weighs."""
    smoke: PageableCopiesSize = field(
        default_factory=lambda: PageableCopiesSize(
            warmup_steps=2,
            steps=6,
            severity_scale=0.02,
            image_size=32,
            host_batches=2,
            patch=8,
            dim=64,
            hidden=128,
            depth=1,
            num_classes=10,
            bench_reps=2,
        )
    )
    """CPU size: seconds per variant (about 3 MB per step)."""
    full: PageableCopiesSize = field(
        default_factory=lambda: PageableCopiesSize(warmup_steps=5, steps=40)
    )
    """GPU size: 256 images of 224 px per step (154 MB), ViT-B-wide patch MLP with 3 blocks."""

    def memory_estimate(self, size: Size, on_gpu: bool) -> MemoryEstimate:
        """The ``host_batches`` host batches (float32 images, int64 labels); on the GPU twice
        over in host memory (pinned_prefetch pins a copy of each while the pageable one is
        still held) and once on the device (ideal keeps them resident there)."""
        assert isinstance(size, PageableCopiesSize)
        images = size.images_per_step(self.severity)
        batches = size.host_batches * images * (size.image_bytes() + 8)
        what = (
            f"{size.host_batches} host batches of {images} float32 images of {size.image_size} px"
        )
        if on_gpu:
            return MemoryEstimate(host=2 * batches, gpu=batches, what=what)
        return MemoryEstimate(host=batches, what=what)


SCENARIO = Scenario(
    name="pageable_copies",
    bottleneck=Klass.PAGEABLE_COPY,
    title="Blocking copies from pageable host memory",
    variants=(
        Variant(
            name="baseline",
            kind="baseline",
            summary="x.to(device) on a plain CPU tensor every step: pageable, blocking, serial",
        ),
        Variant(
            name="pinned_prefetch",
            kind="fix",
            summary="pinned once, non_blocking copy of batch N+1 on a side stream during step N, "
            "event-ordered, record_stream",
        ),
        Variant(name="ideal", kind="ideal", summary="batches resident on the device, no copy"),
    ),
    severity=Severity(
        meaning="host batch copied to the device each step (float32 images; the model's work "
        "grows with it too, so the copy's share of a step is tuned with the model's depth)",
        unit="MB",
        low=1,
        high=2000,
        why_default="154 MB is a 256 x 3 x 224 x 224 float32 batch: a normalised ImageNet "
        "batch built on the CPU and handed to .to('cuda') without pin_memory",
    ),
    teaching=Teaching(
        symptom="Every step starts with a long 'Memcpy HtoD (Pageable)' on the GPU row under an "
        "'h2d' NVTX range that blocks the Python thread as long as the copy; no kernel runs "
        "during it and the copy rate is well below the link's pinned rate.",
        cause="A copy from pageable memory cannot be DMA'd directly: the driver waits for the "
        "stream, stages the bytes chunk by chunk through its own pinned buffer with CPU memcpys "
        "and returns only when done, so copy and compute alternate and neither overlaps.",
        fix="Pin the host buffers once, copy the next batch with non_blocking=True on a side "
        "stream while the current one computes, make the compute stream wait on an event and "
        "record_stream the consumed batch. Fixed, 'Memcpy HtoD (Pinned)' runs on its own "
        "stream under the kernels and 'h2d' shrinks to microseconds.",
    ),
    config_cls=PageableCopiesConfig,
    build=f"{__name__}.workload:build",
    expected_diagnosis="baseline: pageable HtoD memcpy serialised with compute every step, GPU "
    "idle during it; pinned_prefetch: pinned HtoD on a second stream overlapping kernels; "
    "ideal: no HtoD in the window",
)
