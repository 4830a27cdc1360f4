"""sync_loading: JPEG decoding on the training thread starves the GPU (class ``data_stall``)."""

from __future__ import annotations

import os
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
from scenarios._memory import F32, MemoryEstimate


@dataclass(kw_only=True)
class SyncLoadingSize(Size):
    """Work per variant for sync_loading."""

    batch_size: int = 256
    """Images per step. 256 keeps ``ideal`` GPU-bound even under nsys: at 128 its kernels sit
    so close to the launch thread's pace that tracing overhead makes it CPU-bound."""
    image_size: int = 224
    """Side of the square network input after resize, px."""
    num_images: int = 1024
    """JPEGs in the generated data set (steps cycle over it)."""
    width: int = 64
    """Base channel width of the ResNet-18-shaped model (64 = ResNet-18)."""
    num_classes: int = 1000
    """Classifier outputs."""
    loader_workers: int = 0
    """DataLoader workers / DALI threads for the fixes; 0 = all CPU cores but two."""
    prefetch: int = 2
    """Batches each loader keeps in flight (DataLoader prefetch_factor, DALI queue depth)."""
    ideal_batches: int = 4
    """Pre-decoded batches kept on the device by ``ideal``."""
    dali_threads: int = 4
    """CPU threads of the DALI pipeline; its CPU stages compete with the training thread, so more
    is not faster past a few (docs/scenario-measurements.md)."""
    dali_hw_decoder_load: float = 1.0
    """Share of JPEGs DALI sends to the GPU's hardware JPEG decoder, where it has one; the rest use
    nvJPEG's CUDA path, on the SMs the model needs (DALI's default is 0.65). 1.0 came closest
    to ideal in scripts/device/dali-sweep.sh (results/reference/h200/dali-sweep.csv)."""
    probe_batches: int = 8
    """Batches the fixes pull without training during setup, to measure the loader's own rate
    (async_dataloader pulls at least one per worker)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 <= self.dali_hw_decoder_load <= 1.0:
            raise ValueError(
                f"dali_hw_decoder_load must be within 0..1, got {self.dali_hw_decoder_load}"
            )

    def workers(self) -> int:
        return self.loader_workers or max(1, (os.cpu_count() or 2) - 2)


@dataclass(kw_only=True)
class SyncLoadingConfig(ScenarioConfig):
    """Config schema for sync_loading."""

    severity: float = 500
    """Long side of the source JPEGs, px (aspect 4:3). 500 is ImageNet's typical photo."""
    smoke: SyncLoadingSize = field(
        default_factory=lambda: SyncLoadingSize(
            warmup_steps=4,
            steps=12,
            batch_size=32,
            image_size=64,
            num_images=64,
            width=16,
            num_classes=10,
            loader_workers=2,
            prefetch=2,
            ideal_batches=2,
            dali_threads=2,
            probe_batches=2,
        )
    )
    """CPU size: seconds per variant. Width 16 gives the model enough compute per step that the
    fixes' loaders keep up on a 2-core box (data_load 8-9% of step time, baseline 60%); at
    width 8 DALI's two CPU threads read 19-34% there, close to data_stall's 30% threshold."""
    full: SyncLoadingSize = field(default_factory=lambda: SyncLoadingSize(warmup_steps=3, steps=32))
    """GPU size."""

    def memory_estimate(self, size: Size, on_gpu: bool) -> MemoryEstimate:
        """The decoded batches the variants hold: baseline's float32 batch twice over while it
        is collated from its images, async_dataloader's workers x prefetch uint8 batches in
        flight, ideal's ``ideal_batches`` float32 batches kept resident (in host memory on the
        CPU, on the device on a GPU)."""
        assert isinstance(size, SyncLoadingSize)
        pixels = size.batch_size * 3 * size.image_size**2
        in_flight = size.workers() * size.prefetch * pixels
        resident = size.ideal_batches * pixels * F32
        host = max(2 * pixels * F32, in_flight, 0 if on_gpu else resident)
        what = f"batches of {size.batch_size} images of {size.image_size} px"
        return MemoryEstimate(host=host, gpu=resident if on_gpu else 0, what=what)


SCENARIO = Scenario(
    name="sync_loading",
    bottleneck=Klass.DATA_STALL,
    title="Synchronous CPU data loading",
    # The fixes measure their loader's own rate in set-up, and their DataLoader workers or
    # DALI threads go on filling the prefetch queue after it; the first set-up writes the JPEGs.
    setup_alone=True,
    slice_rounds=False,
    variants=(
        Variant(
            name="baseline",
            kind="baseline",
            summary="num_workers=0: decode+resize+normalise on the training thread, pageable blocking copy",
        ),
        Variant(
            name="async_dataloader",
            kind="fix",
            summary="DataLoader workers, pin_memory, non_blocking, persistent_workers, prefetch",
            expect=Expectation(
                role="partial",
                because="on a host with few cores its workers alone may deliver fewer images "
                "per second than ideal trains on (14 workers decoding ~190 img/s each cannot "
                "feed 12,000 img/s), and the steps keep waiting on data_load",
            ),
        ),
        Variant(
            name="dali",
            kind="fix",
            summary="NVIDIA DALI: GPU JPEG decode (mixed), prefetched",
            needs_module="nvidia.dali",
        ),
        Variant(name="ideal", kind="ideal", summary="pre-decoded batches resident on the device"),
    ),
    severity=Severity(
        meaning="long side of the source JPEGs (aspect 4:3)",
        unit="px",
        low=32,
        high=4096,
        why_default="500 px is a typical ImageNet photo; full-resolution decode per sample is "
        "what torchvision-style PIL transforms do",
    ),
    teaching=Teaching(
        symptom="The GPU row is mostly white: each step's kernels run in a short burst after a long "
        "'data_load' NVTX range on the main Python thread, and no loader threads or processes "
        "work while the GPU computes.",
        cause="With num_workers=0 the training thread decodes, resizes and normalises every JPEG "
        "itself, then copies the batch from pageable memory with a blocking copy; the GPU "
        "waits for all of it every step.",
        fix="Move decoding off the critical path: DataLoader workers with pin_memory, "
        "non_blocking copies and prefetching, or DALI decoding on the GPU. Fixed, 'data_load' "
        "shrinks to a queue pop and kernels run back to back. DALI moves the decode, not the "
        "contention: its hardware-decoder path converts each image with a small kernel of its "
        "own (256 'rgba2rgb' kernels a batch on 14 streams, then resize and normalise), and "
        "these wait for SMs behind the training kernels while DALI's executor thread waits on "
        "them. On a 16-core H200 host that leaves DALI at about 85% of ideal (the trace: "
        "rgba2rgb queued 0.16 ms median, up to 17 ms; the executor in cudaEventSynchronize for "
        "a third of the window; one step in four waiting 11-22 ms for its batch), below the "
        "91-93% its side-stream work alone allows. DALI 2.x ignores stream priorities "
        "(default_cuda_stream_priority is deprecated), and the knobs it offers do not close "
        "the gap (timed beside ideal: hardware decoder share 1.0 0.847, 0.65 0.631, 0 0.261; "
        "queue depth 4 0.849; 8 threads 0.809; results/reference/h200/dali-sweep.csv). The "
        "suite therefore measures what DALI leaves instead of declaring it clean: data_stall "
        "saving about 15-19%, at its bar.",
    ),
    config_cls=SyncLoadingConfig,
    build=f"{__name__}.workload:build",
    expected_diagnosis="baseline: GPU idle during a host-side data_load range on every step; "
    "fixes and ideal: data_load short, GPU busy",
)
