"""forced_sync: per-step host reads of device values serialise CPU and GPU (class ``host_sync``).

The workload is a stack of pre-LayerNorm residual MLP blocks (a transformer's MLP half) trained
with AdamW on device-resident data. Its forward pass is launch-heavy Python (module calls,
autocast casts, small kernels) and its backward and optimizer are GPU-heavy (twice the GEMM
FLOPs of the forward, then a memory-bound foreach AdamW over every parameter). Without syncs the
CPU launches step ``i+1``'s forward while the GPU still runs step ``i``'s backward and
optimizer, so a step costs ``max(CPU, GPU)``. The baseline's logging code blocks the host every
step, so the next forward is launched into an empty GPU queue and the two no longer overlap.

Balance on the GPU (per block, bf16 autocast, the numbers in the report are estimates):
``depth`` multiplies both sides; ``batch`` moves only the GEMM/elementwise GPU time;
``width`` moves GEMM time and (quadratically) the optimizer's memory traffic; the CPU launch time
per block stays about constant.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from harness.markers import phase
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


@dataclass(kw_only=True)
class ForcedSyncSize(Size):
    """Work per variant for forced_sync."""

    depth: int = 24
    """Residual MLP blocks. Each adds ~10 forward and ~17 backward kernel launches (host time)
    and 2 forward + 4 backward GEMMs plus its share of AdamW traffic (GPU time)."""
    width: int = 1024
    """Model width: LayerNorm size and the MLP's input/output features."""
    mlp_ratio: int = 4
    """Hidden features of each MLP = mlp_ratio * width (4 as in GPT/BERT)."""
    batch: int = 256
    """Rows (tokens) per step: scales GEMM and elementwise GPU time, not the launch count."""
    data_batches: int = 4
    """Distinct device-resident batches; step i uses batch i % data_batches (deterministic)."""
    flush_every: int = 50
    """K: sync_free copies its device-side metrics to the pinned host buffer every K steps."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("depth", "width", "mlp_ratio", "batch", "data_batches", "flush_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"size field '{name}' must be >= 1, got {getattr(self, name)}")


@dataclass(kw_only=True)
class ForcedSyncConfig(ScenarioConfig):
    """Config schema for forced_sync."""

    severity: float = 1.0
    """Fraction of steps on which the baseline logs loss.item(), checks isnan(loss) on the host
    and times the step with torch.cuda.synchronize(); 1.0 = every step, as tutorials do."""
    smoke: ForcedSyncSize = field(
        default_factory=lambda: ForcedSyncSize(
            warmup_steps=3,
            steps=12,
            depth=4,
            width=32,
            mlp_ratio=4,
            batch=16,
            data_batches=2,
            flush_every=4,
        )
    )
    """CPU size: well under a second of compute per variant."""
    full: ForcedSyncSize = field(default_factory=lambda: ForcedSyncSize(warmup_steps=20, steps=100))
    """GPU size (H100): host launch time and GPU time per step both a few ms."""


class MLPBlock(nn.Module):
    """Pre-LN residual MLP: x + fc2(gelu(fc1(ln(x))))."""

    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, hidden), nn.GELU(), nn.Linear(hidden, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(self.norm(x))


class MLPStack(nn.Module):
    """``depth`` MLP blocks, a final LayerNorm and a linear regression head."""

    def __init__(self, depth: int, width: int, hidden: int) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*(MLPBlock(width, hidden) for _ in range(depth)))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.blocks(x)))


class _Trainer(Workload):
    """The shared training loop; variants differ only in what they do with the loss.

    Hooks ``after_forward`` and ``after_step`` return how many host syncs they performed, so
    ``syncs_per_step`` is counted by construction, and their host time is measured separately
    (``host_metrics_ms``) from the rest of the step (``host_launch_ms``).
    """

    def __init__(self, cfg: ForcedSyncConfig, size: ForcedSyncSize, ctx: RunContext) -> None:
        self.cfg, self.size, self.ctx = cfg, size, ctx
        self.device = ctx.device
        self.on_gpu = ctx.on_gpu
        self.samples_per_step = size.batch
        self.measured_steps = 0
        self.host_s = 0.0
        self.metrics_s = 0.0
        self.syncs = 0

    def setup(self) -> None:
        size = self.size
        torch.manual_seed(self.ctx.seed)  # same weights in every variant
        self.model = MLPStack(size.depth, size.width, size.mlp_ratio * size.width).to(self.device)
        # Default AdamW: foreach kernels on CUDA, host-side step counters (no sync inside).
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3, weight_decay=0.01)
        gen = torch.Generator().manual_seed(self.ctx.seed + 1)
        shape = (size.data_batches, size.batch, size.width)
        # Generated on the CPU, then moved: the same numbers on CPU and GPU, and per step index.
        self.inputs = torch.randn(shape, generator=gen).to(self.device)
        self.targets = torch.randn(shape, generator=gen).to(self.device)
        self.setup_metrics()

    def setup_metrics(self) -> None:
        """Allocate whatever the variant's metric code needs (outside every timer)."""

    def _amp(self) -> contextlib.AbstractContextManager:
        if self.on_gpu:
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def step(self, index: int) -> None:
        t0 = time.perf_counter()
        with phase("data_load"):
            k = index % self.size.data_batches
            x, y = self.inputs[k], self.targets[k]
        with phase("forward"), self._amp():
            loss = F.mse_loss(self.model(x), y)  # autocast runs mse_loss in fp32
        m0 = time.perf_counter()
        syncs = self.after_forward(index, loss)
        metrics_s = time.perf_counter() - m0
        with phase("backward"):
            loss.backward()
        with phase("optimizer"):
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
        m0 = time.perf_counter()
        syncs += self.after_step(index, loss.detach(), t0)
        end = time.perf_counter()
        if index >= self.size.warmup_steps:
            self.measured_steps += 1
            self.syncs += syncs
            self.host_s += end - t0
            self.metrics_s += metrics_s + end - m0

    def after_forward(self, index: int, loss: torch.Tensor) -> int:
        """Runs between forward and backward; returns the host syncs it performed."""
        return 0

    def after_step(self, index: int, loss: torch.Tensor, t0: float) -> int:
        """Runs after the optimizer; ``t0`` is the step's start (perf_counter)."""
        return 0

    def metrics(self) -> dict[str, float]:
        n = max(1, self.measured_steps)
        return {
            "syncs_per_step": self.syncs / n,
            "host_step_ms": 1e3 * self.host_s / n,
            "host_metrics_ms": 1e3 * self.metrics_s / n,
            "host_launch_ms": 1e3 * (self.host_s - self.metrics_s) / n,
        }


class Baseline(_Trainer):
    """Tutorial logging on every step: a host-side NaN check, ``loss.item()`` and
    ``torch.cuda.synchronize()`` to time the step with ``time.perf_counter``."""

    def setup_metrics(self) -> None:
        self.losses: list[float] = []
        self.step_times_ms: list[float] = []

    def syncs_on(self, index: int) -> bool:
        """True on a ``severity`` fraction of steps, spread evenly (1.0: every step)."""
        f = self.cfg.severity
        return int((index + 1) * f) > int(index * f)

    def after_forward(self, index: int, loss: torch.Tensor) -> int:
        if not self.syncs_on(index):
            return 0
        with phase("sync"):
            # bool() on a device tensor copies the flag to the host: the CPU waits for the forward.
            if torch.isnan(loss):
                raise FloatingPointError(f"NaN loss at step {index}")
        return 1

    def after_step(self, index: int, loss: torch.Tensor, t0: float) -> int:
        if not self.syncs_on(index):
            return 0
        with phase("sync"):
            self.losses.append(loss.item())  # waits for backward + optimizer to finish
            syncs = 1
            if self.on_gpu:
                torch.cuda.synchronize(self.device)  # "accurate" step timing
                syncs += 1
            self.step_times_ms.append(1e3 * (time.perf_counter() - t0))
        return syncs

    def metrics(self) -> dict[str, float]:
        out = super().metrics()
        if self.losses:
            out["loss_mean"] = sum(self.losses) / len(self.losses)
        return out


class SyncFree(_Trainer):
    """Metrics stay on the device; a pinned, non-blocking snapshot every K steps is read only
    once its CUDA event has completed. On the CPU the same loop runs with an ordinary host
    buffer and no events (the copy is synchronous there, and nothing waits on a device)."""

    def setup_metrics(self) -> None:
        dev = self.device
        self.loss_sum = torch.zeros((), dtype=torch.float64, device=dev)
        self.nan_flag = torch.zeros((), dtype=torch.bool, device=dev)
        self.snapshot = torch.zeros(2, dtype=torch.float64, device=dev)
        self.host_buf = torch.zeros(2, dtype=torch.float64, pin_memory=self.on_gpu)
        self.event = torch.cuda.Event() if self.on_gpu else None
        self.steps_done = 0
        self.flushed_steps = 0
        self.pending: int | None = None  # steps covered by the snapshot in flight
        self.logged: list[tuple[int, float]] = []  # (steps, mean loss) read on the host

    def after_forward(self, index: int, loss: torch.Tensor) -> int:
        with phase("metrics"):
            self.nan_flag.logical_or_(torch.isnan(loss).any())
        return 0

    def after_step(self, index: int, loss: torch.Tensor, t0: float) -> int:
        with phase("metrics"):
            self.loss_sum.add_(loss)
            self.steps_done += 1
            if self.steps_done % self.size.flush_every == 0:
                self.flush()
            self.poll(block=False)
        return 0

    def flush(self) -> None:
        """Queue a copy of the running totals to the host; never waits."""
        self.snapshot[0].copy_(self.loss_sum)
        self.snapshot[1].copy_(self.nan_flag)
        self.host_buf.copy_(self.snapshot, non_blocking=self.on_gpu)
        if self.event is not None:
            self.event.record()
        self.pending = self.flushed_steps = self.steps_done

    def poll(self, *, block: bool) -> None:
        """Read the snapshot if it has landed (or wait for it when ``block``)."""
        if self.pending is None:
            return
        if self.event is not None:
            if block:
                self.event.synchronize()
            elif not self.event.query():
                return
        total, nan = self.host_buf.tolist()  # a host tensor: no device involved
        self.logged.append((self.pending, total / self.pending))
        self.pending = None
        if nan:
            raise FloatingPointError(f"NaN loss within the first {self.logged[-1][0]} steps")

    def mean_loss(self) -> float:
        """Mean loss over every step so far; flushes and waits once (end of run only)."""
        if self.steps_done == 0:
            return float("nan")
        if self.flushed_steps != self.steps_done:
            self.flush()
        self.poll(block=True)
        return self.logged[-1][1]

    def metrics(self) -> dict[str, float]:
        out = super().metrics()
        reads = len(self.logged)
        if self.steps_done:
            out["loss_mean"] = self.mean_loss()
        out["snapshots_read_in_loop"] = float(reads)
        return out


class Ideal(_Trainer):
    """The same loop with no metrics at all: the model's own speed."""


VARIANTS = {"baseline": Baseline, "sync_free": SyncFree, "ideal": Ideal}


def build(cfg: ForcedSyncConfig, size: ForcedSyncSize, variant: str, ctx: RunContext) -> Workload:
    return VARIANTS[variant](cfg, size, ctx)


SCENARIO = Scenario(
    name="forced_sync",
    bottleneck="host_sync",
    title="Per-step host syncs from logging, NaN checks and step timing",
    variants=(
        Variant(
            name="baseline",
            kind="baseline",
            summary="every step: `if torch.isnan(loss)`, loss.item() and torch.cuda.synchronize() "
            "for perf_counter timing",
        ),
        Variant(
            name="sync_free",
            kind="fix",
            summary="loss sum and NaN flag accumulated on the device, copied non_blocking to a "
            "pinned buffer every K steps, read after event.query()",
        ),
        Variant(name="ideal", kind="ideal", summary="the same loop with no metrics at all"),
    ),
    severity=Severity(
        meaning="fraction of steps on which the baseline NaN-checks, logs and times the step "
        "through host syncs (3 syncs on each such step)",
        unit="fraction of steps",
        low=0.01,
        high=1.0,
        why_default="tutorial and quick-start training loops print loss.item(), guard with "
        "`if torch.isnan(loss)` and time with torch.cuda.synchronize() on every step",
    ),
    teaching=Teaching(
        symptom="Each step has short cyan 'sync' ranges (after the forward and at the end) in "
        "which the Python thread sits in cudaStreamSynchronize/cudaDeviceSynchronize and a tiny "
        "DtoH memcpy; right after them the GPU row shows gaps between the next forward's kernels, "
        "which start only as fast as Python launches them.",
        cause="bool(torch.isnan(loss)), loss.item() and torch.cuda.synchronize() make the host "
        "wait until the GPU has drained its queue. The CPU can no longer launch step i+1's "
        "launch-bound forward while the GPU runs step i's backward and optimizer, so host "
        "launch time and GPU time add up instead of overlapping.",
        fix="Keep metrics on the device (running loss sum, NaN flag via isnan().any() and "
        "logical_or_), copy them non_blocking into pinned memory every K steps, record an event "
        "and read the buffer only once event.query() is true; time with CUDA events. The sync "
        "ranges vanish, the CPU runs a step ahead and kernels run back to back.",
    ),
    config_cls=ForcedSyncConfig,
    build=build,
    expected_diagnosis="baseline: synchronizing CUDA API calls (cudaStreamSynchronize, "
    "cudaDeviceSynchronize, DtoH memcpy) inside 'sync' NVTX ranges every step and GPU gaps during "
    "the following forward; sync_free and ideal: no synchronizing call inside the measured steps "
    "(sync_free: one async DtoH copy every K steps), GPU busy back to back",
)
