"""ddp_bucketing: gradient all-reduce that no compute overlaps (class ``exposed_comm``).

Data-parallel training on ``world_size`` processes (2 by default; the harness launches them with
torchrun, NCCL on GPUs, gloo on the CPU). The model is a stack of wide pre-LayerNorm residual MLP
blocks (a transformer's MLP half) trained with AdamW under bf16 autocast on device-resident data
that differs per rank. Its parameter tensors are of mixed sizes: per block a LayerNorm weight and
bias (``width`` floats each), two biases and two ``width x hidden`` weights (151 MB each in fp32
at the full size).

The baseline averages gradients the way many hand-written training loops do: after
``loss.backward()`` it walks ``model.parameters()`` and calls ``dist.all_reduce(p.grad)`` and
``p.grad /= world`` on each tensor. Every collective is issued only once backward is over, one per
tensor and in order, so the whole gradient's communication (bandwidth) plus hundreds of per-call
latencies are added to the step; nothing overlaps it. DistributedDataParallel instead registers
autograd hooks, packs gradients into buckets as they become ready and all-reduces each bucket on
NCCL's stream while backward computes the gradients of earlier layers; only the last bucket's
collective is left after the last backward kernel.

Where the time goes (per rank, the report's metrics): ``grad_mb`` of fp32 gradients are reduced
per step (``grad_mb_per_step``); one flat all-reduce of all of them takes ``grad_allreduce_ms``
(measured in setup, with the bus bandwidth ``allreduce_busbw_gbps``); the baseline's comm phase
takes ``comm_ms_per_step`` (GPU time from the end of backward to the last division). The limit,
``ideal``, is the same per-rank compute with no gradient communication at all: DDP can approach it
as long as one all-reduce of the gradients (``grad_allreduce_ms``) fits inside backward.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import math
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from bottlenecks import phase
from scenarios._base import (
    RunContext,
    Scenario,
    ScenarioConfig,
    Severity,
    Size,
    Teaching,
    Variant,
    Workload,
)

#: DDP keyword arguments newer than the oldest torch the suite supports; passed only if present.
_DDP_PARAMS = set(inspect.signature(DDP.__init__).parameters)


@dataclass(kw_only=True)
class DdpSize(Size):
    """Work per variant for ddp_bucketing (per rank unless said otherwise)."""

    depth: int = 6
    """Residual MLP blocks; each adds 6 parameter tensors (2 LayerNorm, 2 weights, 2 biases), so
    the baseline issues 6 * depth + 4 all-reduces per step at severity 1."""
    width: int = 3072
    """Model width: LayerNorm size and the MLP's input/output features."""
    mlp_ratio: int = 4
    """Hidden features of each MLP = mlp_ratio * width (4 as in GPT/BERT)."""
    batch: int = 2048
    """Rows (tokens) per rank per step: scales compute, not the gradient size, so it sets how
    large communication is relative to compute."""
    data_batches: int = 2
    """Distinct device-resident batches per rank; step i uses batch i % data_batches."""
    bucket_cap_mb: float = 100.0
    """tuned_buckets' DDP bucket size in MB (DDP's own default is 25). 100 from the sweep in
    scripts/device/ddp-sizing.sh on 2 x H200 at the earlier size (48 blocks of width 1024: 5 / 25
    / 100 MB gave 53.4 / 47.6 / 47.1 ms per step; 14 buckets instead of 50). At 6 blocks of width
    3072 each weight (151 MB) is a bucket of its own at either size; 100 MB gathers the small
    tensors into fewer buckets."""
    sweep_mb: list[float] = field(default_factory=list)
    """When non-empty, tuned_buckets times DDP with each of these bucket sizes during setup
    (outside the measured window, ``sweep_steps`` steps each, averaged over ranks) and trains with
    the fastest; the times are reported as ``sweep_<mb>mb_ms``. Empty: use bucket_cap_mb."""
    sweep_steps: int = 5
    """Timed steps per candidate bucket size in the setup sweep (after 3 warm-up steps)."""
    static_graph: bool = True
    """tuned_buckets: DDP(static_graph=True): the reducer learns the bucket order from the first
    iterations and skips per-iteration unused-parameter bookkeeping."""
    batched_grad_copy: bool = True
    """tuned_buckets: DDP(batched_grad_copy=True) where the installed torch has it (2.13+): one
    copy and one division per bucket instead of one per parameter tensor."""
    probe_bandwidth: bool = True
    """Variants that communicate time one flat all-reduce of the whole gradient in setup and
    report it (grad_allreduce_ms, allreduce_busbw_gbps)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("depth", "width", "mlp_ratio", "batch", "data_batches", "sweep_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"size field '{name}' must be >= 1, got {getattr(self, name)}")
        if not self.bucket_cap_mb > 0:
            raise ValueError(f"size field 'bucket_cap_mb' must be > 0 MB, got {self.bucket_cap_mb}")
        bad = [mb for mb in self.sweep_mb if not mb > 0]
        if bad:
            raise ValueError(f"size field 'sweep_mb' must hold sizes > 0 MB, got {bad}")


@dataclass(kw_only=True)
class DdpConfig(ScenarioConfig):
    """Config schema for ddp_bucketing."""

    severity: float = 1.0
    """All-reduce calls the baseline issues per parameter tensor after backward: 1.0 = one per
    tensor (the hand-written `for p in model.parameters(): dist.all_reduce(p.grad)` loop); lower
    values flatten consecutive tensors into ceil(severity * tensors) collectives, still after
    backward."""
    smoke: DdpSize = field(
        default_factory=lambda: DdpSize(
            warmup_steps=2,
            steps=6,
            depth=8,
            width=64,
            mlp_ratio=4,
            batch=32,
            data_batches=2,
            bucket_cap_mb=0.25,
            sweep_steps=2,
        )
    )
    """CPU size: 2 gloo processes, 52 parameter tensors, well under a second per variant."""
    full: DdpSize = field(default_factory=lambda: DdpSize(warmup_steps=10, steps=40))
    """GPU size (2 x H100/H200, NVLink): 6 blocks of width 3072, 40 tensors, 1.8 GB of fp32
    gradients, 2048 tokens per rank in bf16, GPU-bound under nsys as well. Why, from the 2 x H200
    run of 2026-11-28 (48 blocks of width 1024, 4096 tokens): ~1,430 kernels a step per rank at
    ~45 us a launch under nsys made the traced step host-bound (probe effect 1.4-1.7), so the
    profile judged another program; a quarter of the blocks at three times the width keeps the
    gradient bytes (and so the all-reduce, ~5.5 ms at the 330 GB/s measured here) with ~200
    launches a step. Estimates for an H100 (not yet measured at this size): matmuls ~8.4 ms,
    elementwise ~2.5 ms, fused AdamW over 453 M parameters ~4 ms: ideal ~15 ms; the baseline adds
    the whole all-reduce (~21 ms, 1.4x); backward (~6 ms) is long enough for DDP to hide most of
    it. Tokens per rank set the balance: the backward of T tokens outlasts the all-reduce of its
    gradients when T > bf16 FLOP/s / bus bandwidth (~2,000 tokens on these GPUs)."""


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
        with phase("data_load"):
            k = index % self.size.data_batches
            x, y = self.inputs[k], self.targets[k]
        with phase("forward"), self._amp():
            loss = F.mse_loss(self.train_model(x), y)  # autocast runs mse_loss in fp32
        with phase("backward"):
            loss.backward()
        self.after_backward()
        return loss

    def after_backward(self) -> None:
        """Runs between backward and the optimizer (the baseline's explicit all-reduces)."""

    def step(self, index: int) -> None:
        self.forward_backward(index)
        with phase("optimizer"):
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
        with phase("comm"):
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


SCENARIO = Scenario(
    name="ddp_bucketing",
    bottleneck="exposed_comm",
    title="Gradient all-reduce after backward, one collective per parameter tensor",
    variants=(
        Variant(
            name="baseline",
            kind="baseline",
            summary="after loss.backward(): `for p in model.parameters(): dist.all_reduce(p.grad); "
            "p.grad /= world` (one collective per tensor, nothing overlapped)",
        ),
        Variant(
            name="ddp_default",
            kind="fix",
            summary="DistributedDataParallel with its defaults: 25 MB buckets all-reduced from "
            "autograd hooks during backward",
        ),
        Variant(
            name="tuned_buckets",
            kind="fix",
            summary="DDP with bucket_cap_mb from a measured sweep, gradient_as_bucket_view=True, "
            "static_graph=True (and batched_grad_copy where torch has it)",
        ),
        Variant(
            name="ideal",
            kind="ideal",
            summary="the same per-rank compute with no gradient communication at all",
        ),
    ),
    severity=Severity(
        meaning="all-reduce calls the baseline issues after backward per parameter tensor "
        "(1 = one per tensor; lower values flatten consecutive tensors into fewer collectives)",
        unit="collectives per tensor",
        low=0.001,
        high=1.0,
        why_default="hand-written data-parallel loops (and many tutorials) average gradients with "
        "`for p in model.parameters(): dist.all_reduce(p.grad); p.grad /= world_size` after "
        "backward",
    ),
    teaching=Teaching(
        symptom="Each step's backward kernels end, then the compute stream sits idle while a long "
        "train of ncclDevKernel_AllReduce kernels runs on NCCL's stream, one per parameter "
        "tensor (hundreds of tiny ones for LayerNorm weights and biases between the big ones), "
        "each followed by a small division kernel; the CPU thread is inside a 'comm' NVTX range "
        "issuing ncclAllReduce calls one by one, and the optimizer starts only after the last.",
        cause="All-reducing after loss.backward() serialises communication behind computation: "
        "no gradient leaves the GPU until every gradient exists, so the full gradient's transfer "
        "time is added to the step, and one collective per tensor adds a launch and a NCCL "
        "latency (tens of microseconds) per tensor on top, however small the tensor.",
        fix="Wrap the model in DistributedDataParallel: autograd hooks pack gradients into "
        "buckets as backward produces them and all-reduce each bucket on NCCL's stream while "
        "backward computes earlier layers. Size the buckets by measurement (bucket_cap_mb: "
        "few enough collectives to amortise their latency, small enough to start early and "
        "leave a short tail), set gradient_as_bucket_view=True to drop the gradient-to-bucket "
        "copies, static_graph=True for a fixed model. The NCCL kernels then sit under the "
        "backward kernels and only the last bucket's all-reduce follows the last backward kernel.",
    ),
    config_cls=DdpConfig,
    build=build,
    world_size=2,
    expected_diagnosis="baseline: exposed_comm fires: ncclDevKernel_AllReduce kernels (one per "
    "parameter tensor, inside 'comm' NVTX ranges) run after the last backward kernel with no "
    "compute kernel overlapping them; ddp_default and tuned_buckets: a few bucket all-reduces per "
    "step, overlapped by backward kernels except the last bucket's short tail (exposed share "
    "below the threshold); ideal: no NCCL kernels in the window. On the CPU (gloo, nsys 2022.4) "
    "there are no kernels: only the 'comm' NVTX ranges of the baseline show the pattern.",
)
