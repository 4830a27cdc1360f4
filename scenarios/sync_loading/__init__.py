"""sync_loading: JPEG decoding on the training thread starves the GPU (class ``data_stall``)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from bottlenecks import phase
from scenarios._base import (
    Expectation,
    Rule,
    RunContext,
    Scenario,
    ScenarioConfig,
    Severity,
    Size,
    Teaching,
    Variant,
    Workload,
)
from scenarios._models import ConvNetTrainer
from scenarios.sync_loading.data import DeviceNormalize, JpegDataset, ensure_dataset


@dataclass(kw_only=True)
class SyncLoadingSize(Size):
    """Work per variant for sync_loading."""

    batch_size: int = 256
    """Images per step. 256 keeps ``ideal`` GPU-bound on an H100 even under nsys: at 128 its
    ~11 ms of kernels sat so close to the launch thread's pace that tracing overhead made it
    CPU-bound (probe effect 1.46)."""
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
    """CPU threads of the DALI pipeline; its CPU stages compete with the training thread
    (measured on the H100 box: 2 threads 8.0k img/s, 4 threads 9.4k, 8 threads 7.6k)."""
    dali_hw_decoder_load: float = 1.0
    """Share of JPEGs DALI sends to the hardware JPEG decoder (A100/H100); the rest use nvJPEG's
    CUDA path, on the SMs the model needs (DALI's default is 0.65)."""
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


class _Forever(torch.utils.data.Sampler[int]):
    """Sequential indices without end: one DataLoader iterator for the whole run, so workers
    never drain and re-prime at an epoch boundary (which would be a stall of its own)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> Iterator[int]:
        while True:
            yield from range(self.n)

    def __len__(self) -> int:
        return 2**62


class _Base(Workload):
    def __init__(self, cfg: SyncLoadingConfig, size: SyncLoadingSize, ctx: RunContext) -> None:
        self.cfg, self.size, self.ctx = cfg, size, ctx
        self.samples_per_step = size.batch_size
        self.data_wait_s = 0.0
        self.data_waits = 0

    def setup(self) -> None:
        with self.ctx.stage("data"):
            self.files = ensure_dataset(
                self.ctx.cache_dir,
                long_side=int(self.cfg.severity),
                count=self.size.num_images,
                seed=self.ctx.seed,
            )
        with self.ctx.stage("build_model"):
            self.trainer = ConvNetTrainer(self.ctx.device, self.size.num_classes, self.size.width)
        with self.ctx.stage("loader"):
            self.batches = self.make_batches()
        with self.ctx.stage("loader_probe"):
            self.probe_loader()

    def make_batches(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        raise NotImplementedError

    def probe_loader(self) -> None:
        """Measure the loader's own rate (the fixes; set-up only)."""

    def step(self, index: int) -> None:
        with phase("data_load"):
            t0 = time.perf_counter()
            x, y = next(self.batches)
            self.data_wait_s += time.perf_counter() - t0
            self.data_waits += 1
        x, y = self.to_device(x, y)
        self.trainer.step(x, y)

    def to_device(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x, y

    def start_window(self) -> None:
        self.data_wait_s, self.data_waits = 0.0, 0

    def metrics(self) -> dict[str, float]:
        return {"data_wait_ms_mean": 1e3 * self.data_wait_s / max(1, self.data_waits)}


class Baseline(_Base):
    """Decode, resize and normalise in the training process; pageable, blocking copy."""

    def make_batches(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        ds = JpegDataset(self.files, self.size.num_classes, self.size.image_size, normalize=True)
        loader = torch.utils.data.DataLoader(
            ds, batch_size=self.size.batch_size, sampler=_Forever(len(ds)), num_workers=0
        )
        return iter(loader)

    def to_device(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with phase("h2d"):
            return x.to(self.ctx.device), y.to(self.ctx.device)


class AsyncDataLoader(_Base):
    """Worker processes decode ahead; uint8 batches in pinned memory, copied without blocking
    and normalised on the device (a quarter of the bytes of float32)."""

    def make_batches(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        ds = JpegDataset(self.files, self.size.num_classes, self.size.image_size, normalize=False)
        self.normalize = DeviceNormalize(self.ctx.device)
        self.loader = torch.utils.data.DataLoader(
            ds,
            batch_size=self.size.batch_size,
            sampler=_Forever(len(ds)),
            num_workers=self.size.workers(),
            pin_memory=self.ctx.on_gpu,
            persistent_workers=True,
            prefetch_factor=self.size.prefetch,
        )
        self.iterator = iter(self.loader)
        # The workers fill workers x prefetch batches during setup; drain them before timing.
        self.extra_warmup_steps = self.size.workers() * self.size.prefetch + 2
        return self.iterator

    def probe_loader(self) -> None:
        self.loader_only = _first_round_rate(self.iterator, self.size)

    def metrics(self) -> dict[str, float]:
        # What the workers deliver with nobody training: below what ideal consumes, the fix
        # cannot remove the stall on this machine (the expectation's rule reads it).
        return {**super().metrics(), "loader_only_samples_per_s": self.loader_only}

    def to_device(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with phase("h2d"):
            x = x.to(self.ctx.device, non_blocking=True)
            y = y.to(self.ctx.device, non_blocking=True)
        return self.normalize(x), y

    def close(self) -> None:
        it = getattr(self, "iterator", None)
        if it is not None:
            it._shutdown_workers()


class Dali(_Base):
    """NVIDIA DALI: decode, resize and normalise on the GPU, prefetched."""

    def make_batches(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        from scenarios.sync_loading.dali_pipe import dali_batches

        self.extra_warmup_steps = self.size.prefetch + 2
        batches = dali_batches(
            self.files,
            num_classes=self.size.num_classes,
            batch_size=self.size.batch_size,
            size=self.size.image_size,
            threads=self.size.dali_threads,
            hw_decoder_load=self.size.dali_hw_decoder_load,
            device=self.ctx.device,
            seed=self.ctx.seed,
            prefetch=self.size.prefetch,
        )
        return batches

    def probe_loader(self) -> None:
        self.loader_only = _loader_rate(self.batches, self.size, self.ctx)

    def metrics(self) -> dict[str, float]:
        # The pipeline's own rate with the GPU otherwise idle: when it exceeds ideal's throughput,
        # what separates dali from ideal is interference (shared SMs, CPU threads), not DALI.
        return {**super().metrics(), "loader_only_samples_per_s": self.loader_only}


def _first_round_rate(
    batches: Iterator[tuple[torch.Tensor, torch.Tensor]], size: SyncLoadingSize
) -> float:
    """Samples per second a freshly started DataLoader's workers deliver, with no training.

    The workers start together and the loader hands batches out in order, worker by worker, so
    between the first batch and the one ``workers * rounds`` later each worker decoded
    ``rounds`` more batches: that span is the workers' steady rate, without timing batches
    prefetched before it (which a drain-then-time probe would need ``workers * prefetch``
    extra batches to avoid).
    """
    workers = size.workers()
    rounds = max(1, -(-size.probe_batches // workers))
    next(batches)
    t0 = time.perf_counter()
    for _ in range(workers * rounds):
        next(batches)
    return workers * rounds * size.batch_size / (time.perf_counter() - t0)


def _loader_rate(
    batches: Iterator[tuple[torch.Tensor, torch.Tensor]], size: SyncLoadingSize, ctx: RunContext
) -> float:
    """Samples per second the loader delivers with no training step (queue drained first)."""
    for _ in range(size.prefetch + 1):
        next(batches)
    if ctx.on_gpu:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(size.probe_batches):
        next(batches)
    if ctx.on_gpu:
        torch.cuda.synchronize()
    return size.probe_batches * size.batch_size / (time.perf_counter() - t0)


class Ideal(_Base):
    """Batches decoded once during setup and resident on the device: the model's own speed."""

    def make_batches(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        src = Baseline(self.cfg, self.size, self.ctx)
        src.files = self.files
        it = src.make_batches()
        resident = []
        for _ in range(self.size.ideal_batches):
            x, y = next(it)
            resident.append((self.trainer.prepare(x.to(self.ctx.device)), y.to(self.ctx.device)))

        def gen() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
            while True:
                yield from resident

        return gen()


VARIANTS = {"baseline": Baseline, "async_dataloader": AsyncDataLoader, "dali": Dali, "ideal": Ideal}


def build(cfg: SyncLoadingConfig, size: SyncLoadingSize, variant: str, ctx: RunContext) -> Workload:
    return VARIANTS[variant](cfg, size, ctx)


SCENARIO = Scenario(
    name="sync_loading",
    bottleneck="data_stall",
    title="Synchronous CPU data loading",
    # The fixes measure their loader's own rate in set-up, and their DataLoader workers or
    # DALI threads go on filling the prefetch queue after it; the first set-up writes the JPEGs.
    setup_alone=True,
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
                rule=Rule(
                    metric="loader_only_samples_per_s",
                    op="<",
                    than="ideal.throughput_samples_per_s",
                    than_scale=0.7,
                    because="its workers alone deliver under 70% of the images per second "
                    "ideal trains on, so steps keep waiting on data_load for over 30% of the "
                    "step (data_stall's threshold): e.g. 14 workers decoding ~190 img/s each "
                    "cannot feed 12,000 img/s",
                ),
            ),
        ),
        Variant(
            name="dali", kind="fix", summary="NVIDIA DALI: GPU JPEG decode (mixed), prefetched"
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
        "shrinks to a queue pop and kernels run back to back.",
    ),
    config_cls=SyncLoadingConfig,
    build=build,
    expected_diagnosis="baseline: GPU idle during a host-side data_load range on every step; "
    "fixes and ideal: data_load short, GPU busy",
)
