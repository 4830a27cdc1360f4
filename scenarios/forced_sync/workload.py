"""forced_sync's workloads: its models and training loops (torch).

Imported only where a variant runs (its worker, or the fork server that preloads what workers
need): the package's ``__init__`` holds the metadata the harness reads without torch.
"""

from __future__ import annotations

import contextlib
import math
import time
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from bottlenecks import BACKWARD, DATA_LOAD, FORWARD, METRICS, OPTIMIZER, SYNC, phase
from scenarios._base import (
    RunContext,
    Workload,
)

from . import (
    ForcedSyncConfig,
    ForcedSyncSize,
)


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
        self.measuring = False
        self.measured_steps = 0
        self.host_s = 0.0
        self.metrics_s = 0.0
        self.syncs = 0

    def setup(self) -> None:
        size = self.size
        with self.ctx.stage("build_model"):
            torch.manual_seed(self.ctx.seed)  # same weights in every variant
            hidden = size.mlp_ratio * size.width
            # Built on the device: initialising 200 M parameters on the CPU and copying them
            # took seconds of every worker's set-up.
            with torch.device(self.device):
                self.model = MLPStack(size.depth, size.width, hidden)
            # Fused AdamW on CUDA (a few launches for every parameter, host-side step counters:
            # no sync inside); the default foreach implementation on the CPU.
            self.opt = torch.optim.AdamW(
                self.model.parameters(), lr=1e-3, weight_decay=0.01, fused=self.on_gpu or None
            )
        with self.ctx.stage("data"):
            gen = torch.Generator().manual_seed(self.ctx.seed + 1)
            shape = (size.data_batches, size.batch, size.width)
            # Generated on the CPU, then moved: the same numbers on CPU and GPU, per step index.
            self.inputs = torch.randn(shape, generator=gen).to(self.device)
            self.targets = torch.randn(shape, generator=gen).to(self.device)
        with self.ctx.stage("metrics_setup"):
            self.setup_metrics()

    def setup_metrics(self) -> None:
        """Allocate whatever the variant's metric code needs (outside every timer)."""

    def start_window(self) -> None:
        # Count from the worker's window, never from the step index: the worker may end the
        # warm-up before ``warmup_steps`` (harness.max_warmup_s).
        self.measuring = True
        self.measured_steps = self.syncs = 0
        self.host_s = self.metrics_s = 0.0

    def _amp(self) -> contextlib.AbstractContextManager:
        if self.on_gpu:
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def step(self, index: int) -> None:
        t0 = time.perf_counter()
        with phase(DATA_LOAD):
            k = index % self.size.data_batches
            x, y = self.inputs[k], self.targets[k]
        with phase(FORWARD), self._amp():
            loss = F.mse_loss(self.model(x), y)  # autocast runs mse_loss in fp32
        m0 = time.perf_counter()
        syncs = self.after_forward(index, loss)
        metrics_s = time.perf_counter() - m0
        with phase(BACKWARD):
            loss.backward()
        m0 = time.perf_counter()
        syncs += self.after_backward(index)
        metrics_s += time.perf_counter() - m0
        with phase(OPTIMIZER):
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
        m0 = time.perf_counter()
        syncs += self.after_step(index, loss.detach(), t0)
        end = time.perf_counter()
        if self.measuring:
            self.measured_steps += 1
            self.syncs += syncs
            self.host_s += end - t0
            self.metrics_s += metrics_s + end - m0

    def after_forward(self, index: int, loss: torch.Tensor) -> int:
        """Runs between forward and backward; returns the host syncs it performed."""
        return 0

    def after_backward(self, index: int) -> int:
        """Runs between backward and the optimizer (gradients present); returns host syncs."""
        return 0

    def block_outputs(self, hook: Any) -> None:
        """Call ``hook(block_index, output)`` after every block's forward."""
        for i, block in enumerate(self.model.blocks):
            block.register_forward_hook(lambda _m, _inp, out, i=i: hook(i, out))

    def grads(self) -> list[torch.Tensor]:
        """Every parameter's gradient, in ``named_parameters`` order."""
        return [p.grad for p in self.model.parameters() if p.grad is not None]

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
    """Monitoring code that reads device values on the host every step: an inf/NaN check on
    every block's output, ``if torch.isnan(loss)``, per-parameter gradient- and weight-norm
    dicts for the logger, ``loss.item()`` and ``torch.cuda.synchronize()`` to time the step."""

    def setup_metrics(self) -> None:
        self.losses: list[float] = []
        self.step_times_ms: list[float] = []
        self.grad_norms: dict[str, float] = {}  # the latest step's, as a logger would get them
        self.grad_norm_sums: dict[str, float] = {}
        self.weight_norm_sums: dict[str, float] = {}  # weights logged too (wandb.watch "all")
        self.checking = False
        self.hook_syncs = 0
        self.block_outputs(self.check_block)

    def syncs_on(self, index: int) -> bool:
        """True on a ``severity`` fraction of steps, spread evenly (1.0: every step)."""
        f = self.cfg.severity
        return int((index + 1) * f) > int(index * f)

    def check_block(self, block: int, out: torch.Tensor) -> None:
        if not self.checking:
            return
        with phase(SYNC):
            # bool() on a device tensor copies it to the host: the CPU waits for this block.
            if not torch.isfinite(out).all():
                raise FloatingPointError(f"inf/NaN in the output of block {block}")
        self.hook_syncs += 1

    def step(self, index: int) -> None:
        self.checking = self.syncs_on(index)
        self.hook_syncs = 0
        super().step(index)

    def after_forward(self, index: int, loss: torch.Tensor) -> int:
        if not self.checking:
            return 0
        with phase(SYNC):
            if torch.isnan(loss):
                raise FloatingPointError(f"NaN loss at step {index}")
        return 1 + self.hook_syncs

    def after_backward(self, index: int) -> int:
        if not self.checking:
            return 0
        with phase(SYNC):
            for name, p in self.model.named_parameters():
                self.grad_norms[name] = p.grad.norm().item()  # one host round trip each
                weight = p.detach().norm().item()  # and another
                self.grad_norm_sums[name] = (
                    self.grad_norm_sums.get(name, 0.0) + self.grad_norms[name]
                )
                self.weight_norm_sums[name] = self.weight_norm_sums.get(name, 0.0) + weight
        return 2 * len(self.grad_norms)

    def after_step(self, index: int, loss: torch.Tensor, t0: float) -> int:
        if not self.checking:
            return 0
        with phase(SYNC):
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


class NoSync(Baseline):
    """The baseline with only its syncs taken out: every check, norm and read launches the same
    kernels and device-to-host copies, but each copy lands non-blocking in pinned memory (a
    ring of ``RING`` step slots, each with a CUDA event) and is read on the host a step or two
    later, once its event has completed. The cause removed, all else unchanged: what the
    detector's prediction removes, so the scenario's truth is timed against it
    (``Scenario.removed_by``). A check that fails raises when its slot is read, naming the
    step. On the CPU the copies are synchronous and each slot is read at once."""

    RING = 3
    """Step slots in flight: the host runs at most a step ahead of the GPU, so the slot it
    writes next has long completed (a wait for it is counted as a sync)."""

    def setup_metrics(self) -> None:
        super().setup_metrics()
        self.names = [name for name, _ in self.model.named_parameters()]
        depth, pin = len(self.model.blocks), self.on_gpu
        self.slots = [
            {
                "finite": torch.ones(depth, dtype=torch.bool, pin_memory=pin),
                "nan_loss": torch.zeros((), dtype=torch.bool, pin_memory=pin),
                "norms": torch.zeros(2 * len(self.names), dtype=torch.float32, pin_memory=pin),
                "loss": torch.zeros((), dtype=torch.float32, pin_memory=pin),
            }
            for _ in range(self.RING)
        ]
        self.events = [torch.cuda.Event() if self.on_gpu else None for _ in range(self.RING)]
        self.held: list[int | None] = [None] * self.RING  # the step each slot holds
        self.waits = 0

    def _slot(self, index: int) -> dict[str, torch.Tensor]:
        return self.slots[index % self.RING]

    def step(self, index: int) -> None:
        self.waits, self._index = 0, index
        if self.syncs_on(index):
            self.read(index % self.RING, block=True)  # free the slot this step writes
        super().step(index)

    def check_block(self, block: int, out: torch.Tensor) -> None:
        if self.checking:
            with phase(METRICS):
                self.current["finite"][block].copy_(torch.isfinite(out).all(), non_blocking=True)

    def after_forward(self, index: int, loss: torch.Tensor) -> int:
        if self.checking:
            with phase(METRICS):
                self.current["nan_loss"].copy_(torch.isnan(loss), non_blocking=True)
        return 0

    def after_backward(self, index: int) -> int:
        if self.checking:
            norms, n = self.current["norms"], len(self.names)
            with phase(METRICS):
                for j, p in enumerate(self.model.parameters()):
                    norms[j].copy_(p.grad.norm(), non_blocking=True)
                    norms[n + j].copy_(p.detach().norm(), non_blocking=True)
        return 0

    def after_step(self, index: int, loss: torch.Tensor, t0: float) -> int:
        if not self.checking:
            return self.waits
        k = index % self.RING
        with phase(METRICS):
            self.current["loss"].copy_(loss, non_blocking=True)
            if self.events[k] is not None:
                self.events[k].record()
            self.held[k] = index
            self.step_times_ms.append(1e3 * (time.perf_counter() - t0))  # host time: no sync
            for other in range(self.RING):
                self.read(other, block=not self.on_gpu)
        return self.waits

    @property
    def current(self) -> dict[str, torch.Tensor]:
        """The slot the step being run writes."""
        return self._slot(self._index)

    def read(self, k: int, *, block: bool) -> None:
        """Read slot ``k`` on the host if its copies have landed (or wait for them when
        ``block``), then free it."""
        step, event = self.held[k], self.events[k]
        if step is None:
            return
        if event is not None and not event.query():
            if not block:
                return
            event.synchronize()
            self.waits += 1
        slot = self.slots[k]
        self.held[k] = None
        if not bool(slot["finite"].all()):
            block_i = int((~slot["finite"]).nonzero()[0])
            raise FloatingPointError(f"inf/NaN in the output of block {block_i} at step {step}")
        if bool(slot["nan_loss"]):
            raise FloatingPointError(f"NaN loss at step {step}")
        self.losses.append(float(slot["loss"]))
        values, n = slot["norms"].tolist(), len(self.names)
        for name, grad, weight in zip(self.names, values[:n], values[n:], strict=True):
            self.grad_norms[name] = grad
            self.grad_norm_sums[name] = self.grad_norm_sums.get(name, 0.0) + grad
            self.weight_norm_sums[name] = self.weight_norm_sums.get(name, 0.0) + weight

    def drain(self) -> None:
        """Read every slot still in flight, in step order (end of run only)."""
        for k in sorted(range(self.RING), key=lambda k: self.held[k] or 0):
            self.read(k, block=True)

    def metrics(self) -> dict[str, float]:
        self.drain()
        return super().metrics()


class SyncFree(_Trainer):
    """The same monitoring kept on the device, in a handful of launches per step: one
    multi-tensor L2 norm over every block's output (its running per-block sum is finite exactly
    when every output was: NaN and inf propagate through the sum of squares; it also flags
    activations so large their squares overflow fp32, RMS above ~1e15), one over every gradient,
    and the loss summed on the device (a NaN or inf loss makes the sum non-finite). A pinned,
    non-blocking snapshot every K steps is read only once its CUDA event has completed. On the
    CPU the same loop runs with an ordinary host buffer and no events (the copy is synchronous
    there, and nothing waits on a device)."""

    def setup_metrics(self) -> None:
        dev = self.device
        n_params = sum(1 for _ in self.model.parameters())
        self.depth = len(self.model.blocks)
        self.outputs: list[torch.Tensor] = []  # this step's block-output norms (0-d, on device)
        self.loss_sum = torch.zeros((), dtype=torch.float64, device=dev)
        self.act_norm_sum = torch.zeros(self.depth, dtype=torch.float32, device=dev)
        self.n_params = n_params
        # every gradient's norm, then every weight's
        self.norm_sum = torch.zeros(2 * n_params, dtype=torch.float32, device=dev)
        # [loss_sum, per-block output-norm sums..., gradient-norm sums..., weight-norm sums...]
        self.snapshot = torch.zeros(1 + self.depth + 2 * n_params, dtype=torch.float64, device=dev)
        self.host_buf = torch.zeros(
            1 + self.depth + 2 * n_params, dtype=torch.float64, pin_memory=self.on_gpu
        )
        self.event = torch.cuda.Event() if self.on_gpu else None
        self.steps_done = 0
        self.flushed_steps = 0
        self.pending: int | None = None  # steps covered by the snapshot in flight
        self.logged: list[tuple[int, float]] = []  # (steps, mean loss) read on the host
        self.mean_grad_norms: list[float] = []
        self.mean_weight_norms: list[float] = []
        self.block_outputs(self.keep_output)

    def keep_output(self, block: int, out: torch.Tensor) -> None:
        """The block output's norm, queued on the device (one reduction, no NVTX range, no
        sync). Only the 0-d norm is kept: a reference to the output itself kept every block's
        activation alive across the step (out of memory at the full size)."""
        if block == 0:
            self.outputs.clear()
        self.outputs.append(torch.linalg.vector_norm(out.detach(), dtype=torch.float32))

    def after_forward(self, index: int, loss: torch.Tensor) -> int:
        with phase(METRICS):
            self.act_norm_sum.add_(torch.stack(self.outputs))
            self.outputs.clear()
        return 0

    def after_backward(self, index: int) -> int:
        with phase(METRICS):
            weights = [p.detach() for p in self.model.parameters()]
            norms = [*torch._foreach_norm(self.grads()), *torch._foreach_norm(weights)]
            self.norm_sum.add_(torch.stack(norms).float())
        return 0

    def after_step(self, index: int, loss: torch.Tensor, t0: float) -> int:
        with phase(METRICS):
            self.loss_sum.add_(loss)
            self.steps_done += 1
            if self.steps_done % self.size.flush_every == 0:
                self.flush()
            self.poll(block=False)
        return 0

    def flush(self) -> None:
        """Queue a copy of the running totals to the host; never waits."""
        d = self.depth
        self.snapshot[0].copy_(self.loss_sum)
        self.snapshot[1 : 1 + d].copy_(self.act_norm_sum)
        self.snapshot[1 + d :].copy_(self.norm_sum)
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
        total, *rest = self.host_buf.tolist()  # a host tensor: no device involved
        steps = self.pending
        acts, norms = rest[: self.depth], rest[self.depth :]
        self.logged.append((steps, total / steps))
        self.mean_grad_norms = [n / steps for n in norms[: self.n_params]]
        self.mean_weight_norms = [n / steps for n in norms[self.n_params :]]
        self.pending = None
        bad = [i for i, a in enumerate(acts) if not math.isfinite(a)]
        if bad:
            raise FloatingPointError(
                f"inf/NaN in the output of block {bad[0]} within the first {steps} steps"
            )
        if not math.isfinite(total):
            raise FloatingPointError(f"NaN loss within the first {steps} steps")

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


VARIANTS = {
    "baseline": Baseline,
    "no_sync": NoSync,
    "sync_free": SyncFree,
    "ideal": Ideal,
}


def build(cfg: ForcedSyncConfig, size: ForcedSyncSize, variant: str, ctx: RunContext) -> Workload:
    return VARIANTS[variant](cfg, size, ctx)
