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
from scenarios._memory import F32, MemoryEstimate, mlp_data_and_training


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
    """tuned_buckets' DDP bucket size in MB (DDP's own default is 25). 100 from the bucket-size
    sweep of scripts/device/ddp-sizing.sh (docs/scenario-measurements.md). At 6 blocks of width
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
    """GPU size (2 GPUs, NVLink): 6 blocks of width 3072, 40 tensors, 1.8 GB of fp32 gradients,
    2048 tokens per rank in bf16, GPU-bound under nsys as well. Why: many narrow blocks make a
    step of thousands of kernels, whose launches under nsys turn the traced step host-bound (the
    profile would judge another program); a quarter of the blocks at three times the width
    keeps the gradient bytes, and so the all-reduce, with ~200 launches a step. Estimates:
    matmuls ~8.4 ms, elementwise ~2.5 ms, fused AdamW over 453 M parameters ~4 ms: ideal ~15
    ms; the baseline adds the whole all-reduce (~21 ms, 1.4x); backward (~6 ms) is long enough
    for DDP to hide most of it. Tokens per rank set the balance: the backward of T tokens
    outlasts the all-reduce of its gradients when T > bf16 FLOP/s / bus bandwidth (~2,000
    tokens on NVLink-connected GPUs)."""

    def memory_estimate(self, size: Size, on_gpu: bool) -> MemoryEstimate:
        """One rank's inputs and targets (``data_batches x batch x width`` float32 each,
        built in host memory), its MLP's weights, gradients and AdamW state and the
        activations its backward keeps (each rank holds its own)."""
        assert isinstance(size, DdpSize)
        one = size.data_batches * size.batch * size.width * F32
        return mlp_data_and_training(
            tensors=[one, one],
            rows=size.batch,
            width=size.width,
            hidden=size.mlp_ratio * size.width,
            depth=size.depth,
            on_gpu=on_gpu,
            what=f"per rank, inputs and targets of {size.data_batches} x {size.batch} x "
            f"{size.width} float32, and {size.depth} MLP blocks' weights and activations",
        )


SCENARIO = Scenario(
    name="ddp_bucketing",
    bottleneck=Klass.EXPOSED_COMM,
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
    build=f"{__name__}.workload:build",
    world_size=2,
    expected_diagnosis="baseline: exposed_comm fires: ncclDevKernel_AllReduce kernels (one per "
    "parameter tensor, inside 'comm' NVTX ranges) run after the last backward kernel with no "
    "compute kernel overlapping them; ddp_default and tuned_buckets: a few bucket all-reduces per "
    "step, overlapped by backward kernels except the last bucket's short tail (exposed share "
    "below the threshold); ideal: no NCCL kernels in the window. On the CPU (gloo, nsys 2022.4) "
    "there are no kernels: only the 'comm' NVTX ranges of the baseline show the pattern.",
)
