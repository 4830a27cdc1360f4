"""ddp_bucketing's workloads: its models and training loops (torch).

Imported only where a variant runs (its worker, or the fork server that preloads what workers
need): the package's ``__init__`` holds the metadata the harness reads without torch.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import math
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from bottlenecks import BACKWARD, COMM, DATA_LOAD, FORWARD, OPTIMIZER, phase
from scenarios._base import (
    RunContext,
    Workload,
)

from . import (
    DdpConfig,
    DdpSize,
)

#: DDP keyword arguments newer than the oldest torch the suite supports; passed only if present.
_DDP_PARAMS = set(inspect.signature(DDP.__init__).parameters)


class Block(nn.Module):
    """Pre-LN residual MLP: x + fc2(gelu(fc1(ln(x))))."""

    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, hidden)
        self.fc2 = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class ResidualMLP(nn.Module):
    """``depth`` blocks, a final LayerNorm and a linear head: 6 * depth + 4 parameter tensors."""

    def __init__(self, depth: int, width: int, hidden: int) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*(Block(width, hidden) for _ in range(depth)))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.blocks(x)))


def param_groups(n: int, severity: float) -> list[range]:
    """Consecutive parameter indices per all-reduce: ceil(severity * n) near-equal groups."""
    k = min(n, max(1, math.ceil(severity * n - 1e-9)))
    base, extra = divmod(n, k)
    out, start = [], 0
    for i in range(k):
        stop = start + base + (1 if i < extra else 0)
        out.append(range(start, stop))
        start = stop
    return out


class _Trainer(Workload):
    """The shared loop; variants differ in how (and whether) gradients are averaged."""

    #: Whether the variant communicates gradients (sets the bandwidth probe and the MB reported).
    communicates = True

    def __init__(self, cfg: DdpConfig, size: DdpSize, ctx: RunContext) -> None:
        self.cfg, self.size, self.ctx = cfg, size, ctx
        self.device = ctx.device
        self.on_gpu = ctx.on_gpu
        self.world = ctx.world_size
        self.samples_per_step = size.batch  # per rank; the worker multiplies by world_size
        self.measuring = False
        self.measured_steps = 0
        self.extra: dict[str, float] = {}

    # -- set-up ---------------------------------------------------------------------------
    def _new_model(self) -> nn.Module:
        size = self.size
        torch.manual_seed(self.ctx.seed)  # the same weights on every rank and in every variant
        with torch.device(self.device):  # initialised where it lives: seconds saved at full size
            return ResidualMLP(size.depth, size.width, size.mlp_ratio * size.width)

    def setup(self) -> None:
        if self.world > 1 and not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError(
                "ddp_bucketing needs an initialised process group (the harness starts it under "
                "torchrun); WORLD_SIZE > 1 but torch.distributed is not initialised"
            )
        size = self.size
        gen = torch.Generator().manual_seed(self.ctx.seed + 1 + 1000 * self.ctx.rank)
        shape = (size.data_batches, size.batch, size.width)
        with self.ctx.stage("data"):
            # Each rank trains on its own shard: different data, identical weights.
            self.inputs = torch.randn(shape, generator=gen).to(self.device)
            self.targets = torch.randn(shape, generator=gen).to(self.device)
        with self.ctx.stage("prepare"):  # tuned_buckets: the bucket-size sweep
            self.prepare()
        with self.ctx.stage("build_model"):
            self.model = self._new_model()
            self.params = list(self.model.parameters())
            self.grad_bytes = sum(p.numel() * p.element_size() for p in self.params)
            self.train_model = self.wrap(self.model)
            # AdamW, fused on a GPU (a few kernels a step, not one pass per tensor list: the
            # optimizer is the same in every variant, and a cheap one leaves the step to compute
            # and communication), the same in every variant.
            self.opt = torch.optim.AdamW(
                self.model.parameters(), lr=1e-3, weight_decay=0.01, fused=self.on_gpu or None
            )
        if self.communicates and size.probe_bandwidth and self.world > 1:
            with self.ctx.stage("bandwidth_probe"):
                self.probe_bandwidth()

    def prepare(self) -> None:
        """Variant set-up that runs before the model is built (e.g. a bucket-size sweep)."""

    def wrap(self, model: nn.Module) -> nn.Module:
        """The module the loop calls (DDP for the DDP variants)."""
        return model

    def _sync(self) -> None:
        if self.on_gpu:
            torch.cuda.synchronize(self.device)

    def probe_bandwidth(self, repeats: int = 3) -> None:
        """Time one flat all-reduce of the whole gradient (outside every timer)."""
        n = sum(p.numel() for p in self.params)
        flat = torch.ones(n, dtype=torch.float32, device=self.device)
        dist.all_reduce(flat)  # warm-up: NCCL channels, gloo pairs
        self._sync()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(repeats):
            dist.all_reduce(flat)
        self._sync()
        t = (time.perf_counter() - t0) / repeats
        del flat
        self.extra["grad_allreduce_ms"] = 1e3 * t
        # NCCL's bus bandwidth convention for all-reduce: 2 (n-1)/n * bytes / time.
        self.extra["allreduce_busbw_gbps"] = 2 * (self.world - 1) / self.world * 4 * n / t / 1e9

    # -- the loop -------------------------------------------------------------------------
    def _amp(self) -> contextlib.AbstractContextManager:
        if self.on_gpu:
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def start_window(self) -> None:
        self.measuring = True

    def forward_backward(self, index: int) -> torch.Tensor:
        """Forward, backward and gradient averaging; the gradients are ready for the optimizer."""
        with phase(DATA_LOAD):
            k = index % self.size.data_batches
            x, y = self.inputs[k], self.targets[k]
        with phase(FORWARD), self._amp():
            loss = F.mse_loss(self.train_model(x), y)  # autocast runs mse_loss in fp32
        with phase(BACKWARD):
            loss.backward()
        self.after_backward()
        return loss

    def after_backward(self) -> None:
        """Runs between backward and the optimizer (the baseline's explicit all-reduces)."""

    def step(self, index: int) -> None:
        self.forward_backward(index)
        with phase(OPTIMIZER):
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
        if self.measuring:
            self.measured_steps += 1

    # -- report ---------------------------------------------------------------------------
    def calls_per_step(self) -> float:
        return 0.0

    def metrics(self) -> dict[str, float]:
        mb = self.grad_bytes / 1e6
        return {
            "world_size": float(self.world),
            "param_tensors": float(len(self.params)),
            "grad_mb": mb,
            "grad_mb_per_step": mb if self.communicates and self.world > 1 else 0.0,
            "allreduce_calls_per_step": self.calls_per_step(),
            **self.extra,
        }


class Baseline(_Trainer):
    """The hand-written loop: after backward, one blocking all-reduce and division per tensor."""

    def prepare(self) -> None:
        self.comm_s = 0.0
        self.events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
        self.calls = 0

    def setup(self) -> None:
        super().setup()
        self.groups = param_groups(len(self.params), self.cfg.severity)

    def reduce_grads(self) -> int:
        """Average the gradients over ranks; returns the collectives issued."""
        if self.world == 1:
            return 0
        if len(self.groups) == len(self.params):
            # What many training loops do (and what the default severity reproduces).
            for p in self.model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= self.world
            return len(self.params)
        for group in self.groups:
            grads = [self.params[i].grad for i in group]
            flat = torch.cat([g.reshape(-1) for g in grads])
            dist.all_reduce(flat)
            flat /= self.world
            for g, part in zip(grads, flat.split([g.numel() for g in grads]), strict=True):
                g.copy_(part.view_as(g))
        return len(self.groups)

    def after_backward(self) -> None:
        with phase(COMM):
            if self.measuring and self.on_gpu:
                start, end = (
                    torch.cuda.Event(enable_timing=True),
                    torch.cuda.Event(enable_timing=True),
                )
                start.record()
                calls = self.reduce_grads()
                end.record()
                self.events.append((start, end))
            else:
                t0 = time.perf_counter()
                calls = self.reduce_grads()
                if self.measuring:
                    self.comm_s += time.perf_counter() - t0
        if self.measuring:
            self.calls += calls

    def calls_per_step(self) -> float:
        return self.calls / max(1, self.measured_steps)

    def metrics(self) -> dict[str, float]:
        out = super().metrics()
        n = max(1, self.measured_steps)
        if self.events:
            self._sync()
            out["comm_ms_per_step"] = sum(s.elapsed_time(e) for s, e in self.events) / n
        else:
            out["comm_ms_per_step"] = 1e3 * self.comm_s / n
        out["collectives_per_param_tensor"] = len(self.groups) / len(self.params)
        return out


class _DdpTrainer(_Trainer):
    """DDP: bucketed all-reduces launched from autograd hooks while backward still computes."""

    def ddp_kwargs(self) -> dict[str, object]:
        return {}

    def wrap(self, model: nn.Module) -> nn.Module:
        return self._ddp(model, self.ddp_kwargs())

    def _ddp(self, model: nn.Module, kwargs: dict[str, object]) -> DDP:
        if self.on_gpu:
            kwargs = {
                "device_ids": [self.device.index],
                "output_device": self.device.index,
                **kwargs,
            }
        return DDP(model, **kwargs)

    def logging_data(self) -> dict[str, object]:
        return self.train_model._get_ddp_logging_data()  # type: ignore[operator]

    def close(self) -> None:
        """Drop the DDP wrapper (its reducer holds the process group) while the group still
        exists: the worker destroys the group right after ``close``, and a group left to be
        destroyed at interpreter exit can abort the process ("terminate called without an
        active exception", seen with gloo)."""
        self.train_model = self.model
        gc.collect()

    def calls_per_step(self) -> float:
        return float(self.logging_data().get("num_buckets_reduced", 0))

    def metrics(self) -> dict[str, float]:
        out = super().metrics()
        data = self.logging_data()
        # One all-reduce per bucket; the count after DDP rebuilt its buckets (first iteration).
        out["buckets"] = float(data.get("num_buckets_reduced", 0))  # type: ignore[arg-type]
        out["bucket_cap_mb"] = float(data.get("bucket_cap_bytes", 0)) / 2**20
        out["gradient_as_bucket_view"] = float(data.get("gradient_as_bucket_view", 0))
        # DDP's own sampled timings (ns), where it recorded them: comm and its overlap.
        for key in ("avg_backward_comm_time", "avg_backward_compute_comm_overlap_time"):
            if data.get(key):
                out[f"ddp_{key.removeprefix('avg_')}_ms"] = float(data[key]) / 1e6  # type: ignore[arg-type]
        return out


class DdpDefault(_DdpTrainer):
    """``DDP(model)`` with its defaults (25 MB buckets, gradients copied into the buckets)."""


class TunedBuckets(_DdpTrainer):
    """DDP with a measured bucket size, gradients as bucket views, static graph."""

    def prepare(self) -> None:
        self.bucket_mb = self.size.bucket_cap_mb
        if self.size.sweep_mb and self.world > 1:
            self.bucket_mb = self.sweep(self.size.sweep_mb)

    def ddp_kwargs(self, bucket_mb: float | None = None) -> dict[str, object]:
        kw: dict[str, object] = {
            "bucket_cap_mb": self.bucket_mb if bucket_mb is None else bucket_mb,
            "gradient_as_bucket_view": True,
            "static_graph": self.size.static_graph,
        }
        if self.size.batched_grad_copy and "batched_grad_copy" in _DDP_PARAMS:
            kw["batched_grad_copy"] = True
        return kw

    def sweep(self, candidates: list[float], warmup: int = 3) -> float:
        """Time forward+backward with each bucket size; every rank picks the same fastest one."""
        times = []
        for mb in candidates:
            model = self._ddp(self._new_model(), self.ddp_kwargs(mb))
            for i in range(warmup + self.size.sweep_steps):
                if i == warmup:
                    self._sync()
                    t0 = time.perf_counter()
                k = i % self.size.data_batches
                with self._amp():
                    loss = F.mse_loss(model(self.inputs[k]), self.targets[k])
                loss.backward()
                model.zero_grad(set_to_none=True)
            self._sync()
            times.append((time.perf_counter() - t0) / self.size.sweep_steps)
            del model, loss
            gc.collect()
        mean = torch.tensor(times, dtype=torch.float64, device=self.device)
        dist.all_reduce(mean)  # average over ranks: every rank must choose the same size
        mean /= self.world
        ms = mean.tolist()
        for mb, t in zip(candidates, ms, strict=True):
            self.extra[f"sweep_{mb:g}mb_ms"] = 1e3 * t
        if self.on_gpu:
            torch.cuda.empty_cache()
        return candidates[min(range(len(ms)), key=ms.__getitem__)]

    def metrics(self) -> dict[str, float]:
        out = super().metrics()
        out["bucket_cap_mb"] = float(self.bucket_mb)
        out["batched_grad_copy"] = float("batched_grad_copy" in self.ddp_kwargs())
        out["static_graph"] = float(self.size.static_graph)
        return out


class Ideal(_Trainer):
    """The same per-rank compute with no gradient communication: each rank trains alone."""

    communicates = False


VARIANTS = {
    "baseline": Baseline,
    "ddp_default": DdpDefault,
    "tuned_buckets": TunedBuckets,
    "ideal": Ideal,
}


def build(cfg: DdpConfig, size: DdpSize, variant: str, ctx: RunContext) -> Workload:
    return VARIANTS[variant](cfg, size, ctx)
