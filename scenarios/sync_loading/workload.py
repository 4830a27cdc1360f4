"""sync_loading's workloads: its models and training loops (torch).

Imported only where a variant runs (its worker, or the fork server that preloads what workers
need): the package's ``__init__`` holds the metadata the harness reads without torch.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import torch

from bottlenecks import DATA_LOAD, H2D, phase
from scenarios._base import (
    RunContext,
    Workload,
)
from scenarios._models import ConvNetTrainer
from scenarios.sync_loading.data import DeviceNormalize, JpegDataset, ensure_dataset

from . import (
    SyncLoadingConfig,
    SyncLoadingSize,
)


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
        with phase(DATA_LOAD):
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
        with phase(H2D):
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
        with phase(H2D):
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
        resident = []
        for x, y in _decoded_batches(self.files, self.size):
            resident.append((self.trainer.prepare(x.to(self.ctx.device)), y.to(self.ctx.device)))

        def gen() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
            while True:
                yield from resident

        return gen()


def _decoded_batches(files: list, size: SyncLoadingSize) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``ideal``'s resident batches: the baseline loader's first ``ideal_batches`` batches (the
    same images, order and collation), decoded by a thread pool. Decoding them on one thread
    took seconds of every ideal process's set-up, which its scenario's rounds wait for (its
    set-ups run one at a time); PIL decodes and resizes without the GIL, and the pool is gone
    before the warm-up."""
    ds = JpegDataset(files, size.num_classes, size.image_size, normalize=True)
    n = size.ideal_batches * size.batch_size
    with ThreadPoolExecutor(max_workers=size.workers()) as pool:
        items = list(pool.map(ds.__getitem__, (i % len(ds) for i in range(n))))
    collate = torch.utils.data.default_collate
    return [collate(items[b : b + size.batch_size]) for b in range(0, n, size.batch_size)]


VARIANTS = {"baseline": Baseline, "async_dataloader": AsyncDataLoader, "dali": Dali, "ideal": Ideal}


def build(cfg: SyncLoadingConfig, size: SyncLoadingSize, variant: str, ctx: RunContext) -> Workload:
    return VARIANTS[variant](cfg, size, ctx)
