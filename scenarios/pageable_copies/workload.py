"""pageable_copies's workloads: its models and training loops (torch).

Imported only where a variant runs (its worker, or the fork server that preloads what workers
need): the package's ``__init__`` holds the metadata the harness reads without torch.
"""

from __future__ import annotations

import statistics
import time

import torch
from torch import nn

from bottlenecks import H2D, phase
from scenarios import _models
from scenarios._base import (
    RunContext,
    Workload,
)

from . import (
    MB,
    PageableCopiesConfig,
    PageableCopiesSize,
)

# --------------------------------------------------------------------------------------------
# Model


class MlpBlock(nn.Module):
    """Pre-norm residual MLP block (a ViT block without attention)."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(self.act(self.fc1(self.norm(x))))


def patchify(x: torch.Tensor, patch: int) -> torch.Tensor:
    """``(B, C, H, W)`` images -> ``(B, H/patch * W/patch, patch * patch * C)``: one row per
    patch, what a stride-``patch`` convolution reads."""
    b, c, h, w = x.shape
    x = x.reshape(b, c, h // patch, patch, w // patch, patch)
    return x.permute(0, 2, 4, 3, 5, 1).reshape(b, (h // patch) * (w // patch), patch * patch * c)


class PatchMLP(nn.Module):
    """Patch embedding, residual MLP blocks over the tokens, mean pool, classifier.

    Its work is a few large GEMMs per block, so its GPU time is predictable from FLOPs:
    about ``12 * tokens * dim * hidden`` per block for forward plus backward.

    The patch embedding is a Linear over the flattened patches (the same map as a
    stride-``patch`` Conv2d, as MLP-Mixer-style code writes it): one GEMM of ``3 * patch**2``
    inputs. As a Conv2d on 3 input channels, cuDNN ran its forward on a SIMT kernel and
    converted layouts (and copied the batch) around its weight gradient every step: slow math
    and layout work in a scenario whose only cause is meant to be the copy.
    """

    def __init__(self, *, patch: int, dim: int, hidden: int, depth: int, num_classes: int) -> None:
        super().__init__()
        self.patch = patch
        self.embed = nn.Linear(3 * patch * patch, dim)
        self.blocks = nn.Sequential(*(MlpBlock(dim, hidden) for _ in range(depth)))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.embed(patchify(x, self.patch))  # (B, T, dim)
        tokens = self.blocks(tokens)
        return self.head(self.norm(tokens).mean(dim=1))


class Trainer(_models.Trainer):
    """The patch MLP with AdamW (bf16 autocast on the GPU)."""

    def __init__(self, device: torch.device, size: PageableCopiesSize) -> None:
        with torch.device(device):  # initialised where it runs: no host copy
            model = PatchMLP(
                patch=size.patch,
                dim=size.dim,
                hidden=size.hidden,
                depth=size.depth,
                num_classes=size.num_classes,
            )
        super().__init__(model, torch.optim.AdamW(model.parameters(), lr=1e-4), device)


# --------------------------------------------------------------------------------------------
# Copy-rate micro-benchmark


def measure_h2d_gbps(
    sources: list[torch.Tensor], device: torch.device, *, reps: int, non_blocking: bool
) -> float:
    """Median rate of ``dst.copy_(src)`` host->device, timed by CUDA events on the current
    stream, rotating over ``sources``. One untimed copy first warms the driver's staging."""
    dst = torch.empty_like(sources[0], device=device)
    dst.copy_(sources[0], non_blocking=non_blocking)
    torch.cuda.synchronize(device)
    ms = []
    for r in range(reps):
        src = sources[r % len(sources)]
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        dst.copy_(src, non_blocking=non_blocking)
        e1.record()
        e1.synchronize()
        ms.append(e0.elapsed_time(e1))
    return sources[0].nbytes / (statistics.median(ms) * 1e-3) / 1e9


# --------------------------------------------------------------------------------------------
# Variants


class _Base(Workload):
    def __init__(
        self, cfg: PageableCopiesConfig, size: PageableCopiesSize, ctx: RunContext
    ) -> None:
        self.cfg, self.size, self.ctx = cfg, size, ctx
        self.device = ctx.device
        self.images = size.images_per_step(cfg.severity)
        self.samples_per_step = self.images
        self.bench: dict[str, float] = {}
        # Copy timings of the measured steps: (start, end) CUDA event pairs on the GPU, host
        # seconds of the stand-in memcpy on the CPU; host seconds spent in the h2d phase.
        self.copy_events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
        self.copy_host_s: list[float] = []
        self.h2d_host_s: list[float] = []
        self.measuring = False

    def setup(self) -> None:
        g = torch.Generator().manual_seed(self.ctx.seed)
        s = self.size
        with self.ctx.stage("data"):
            self.host = [
                (
                    torch.randn(self.images, 3, s.image_size, s.image_size, generator=g),
                    torch.randint(0, s.num_classes, (self.images,), generator=g),
                )
                for _ in range(s.host_batches)
            ]
        self.batch_bytes = sum(t.nbytes for t in self.host[0])
        if self.ctx.on_gpu:
            with self.ctx.stage("h2d_bench"):
                xs = [x for x, _ in self.host]
                self.bench["pageable_h2d_gbps"] = measure_h2d_gbps(
                    xs, self.device, reps=s.bench_reps, non_blocking=False
                )
                pinned = xs[0].pin_memory()
                self.bench["pinned_h2d_gbps_limit"] = measure_h2d_gbps(
                    [pinned], self.device, reps=s.bench_reps, non_blocking=True
                )
                del pinned
        with self.ctx.stage("build_model"):
            self.trainer = Trainer(self.device, s)

    def start_window(self) -> None:
        # Count from the worker's window, never from the step index: the worker may end the
        # warm-up before ``warmup_steps`` (harness.max_warmup_s).
        self.measuring = True
        self.copy_events.clear()
        self.copy_host_s.clear()
        self.h2d_host_s.clear()

    def metrics(self) -> dict[str, float]:
        out = {"host_batch_mb": self.batch_bytes / MB, **self.bench}
        if self.copy_events:
            ms = []
            for e0, e1 in self.copy_events:
                e1.synchronize()
                ms.append(e0.elapsed_time(e1))
            copy_s = statistics.median(ms) * 1e-3
        elif self.copy_host_s:
            copy_s = statistics.median(self.copy_host_s)
        else:
            copy_s = 0.0
        if copy_s > 0:
            out["h2d_ms_median"] = copy_s * 1e3
            out["h2d_gbps"] = self.batch_bytes / copy_s / 1e9
        if self.h2d_host_s:
            out["h2d_host_ms_median"] = statistics.median(self.h2d_host_s) * 1e3
        return out


class Baseline(_Base):
    """Plain CPU tensors copied with a blocking ``x.to(device)`` at the top of every step."""

    def step(self, index: int) -> None:
        xh, yh = self.host[index % len(self.host)]
        t0 = time.perf_counter()
        with phase(H2D):
            if self.ctx.on_gpu:
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                x, y = xh.to(self.device), yh.to(self.device)
                e1.record()
                if self.measuring:
                    self.copy_events.append((e0, e1))
            else:  # CPU stand-in: a memcpy into a fresh tensor
                x, y = xh.clone(), yh.clone()
                if self.measuring:
                    self.copy_host_s.append(time.perf_counter() - t0)
        if self.measuring:
            self.h2d_host_s.append(time.perf_counter() - t0)
        self.trainer.step(x, y)


class PinnedPrefetch(_Base):
    """Host batches pinned once; batch N+1 is copied with ``non_blocking=True`` on a side stream
    while step N computes; the compute stream waits on an event, not the host.

    On the CPU: no pinning and no streams; the same prefetch-one-ahead path, copying by memcpy.
    """

    def setup(self) -> None:
        super().setup()
        if self.ctx.on_gpu:
            with self.ctx.stage("pin"):
                # Pinned once, here: pinning per step costs as much as the copy it speeds up.
                self.host = [(x.pin_memory(), y.pin_memory()) for x, y in self.host]
            self.copy_stream = torch.cuda.Stream(self.device)
        self.pending = self.issue(0)

    def issue(self, index: int) -> tuple[torch.Tensor, torch.Tensor, torch.cuda.Event | None]:
        """Start copying host batch ``index``; returns device tensors and a 'copied' event."""
        xh, yh = self.host[index % len(self.host)]
        if not self.ctx.on_gpu:
            t0 = time.perf_counter()
            x, y = xh.clone(), yh.clone()
            if self.measuring:
                self.copy_host_s.append(time.perf_counter() - t0)
            return x, y, None
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(self.copy_stream):
            e0.record(self.copy_stream)
            x = xh.to(self.device, non_blocking=True)
            y = yh.to(self.device, non_blocking=True)
            e1.record(self.copy_stream)
        if self.measuring:
            self.copy_events.append((e0, e1))
        return x, y, e1

    def step(self, index: int) -> None:
        t0 = time.perf_counter()
        with phase(H2D):
            x, y, copied = self.pending
            if copied is not None:
                compute = torch.cuda.current_stream(self.device)
                compute.wait_event(copied)  # GPU-side wait; the host runs on
                # The tensors were allocated on the copy stream; tell the caching allocator
                # the compute stream uses them, so their memory is not handed to the next
                # copy before this step's kernels are done with it.
                x.record_stream(compute)
                y.record_stream(compute)
            self.pending = self.issue(index + 1)  # batch N+1 copies while step N computes
        if self.measuring:
            self.h2d_host_s.append(time.perf_counter() - t0)
        self.trainer.step(x, y)


class Ideal(_Base):
    """The host batches uploaded once during setup and resident on the device: no copy."""

    def setup(self) -> None:
        super().setup()
        with self.ctx.stage("upload"):
            self.resident = [(x.to(self.device), y.to(self.device)) for x, y in self.host]

    def step(self, index: int) -> None:
        x, y = self.resident[index % len(self.resident)]
        self.trainer.step(x, y)


VARIANTS: dict[str, type[_Base]] = {
    "baseline": Baseline,
    "pinned_prefetch": PinnedPrefetch,
    "ideal": Ideal,
}


def build(
    cfg: PageableCopiesConfig, size: PageableCopiesSize, variant: str, ctx: RunContext
) -> Workload:
    """The workload for one variant."""
    return VARIANTS[variant](cfg, size, ctx)
