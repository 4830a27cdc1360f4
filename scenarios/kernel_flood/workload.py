"""kernel_flood's workloads: its models and training loops (torch).

Imported only where a variant runs (its worker, or the fork server that preloads what workers
need): the package's ``__init__`` holds the metadata the harness reads without torch.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from bottlenecks import BACKWARD, FORWARD, GRAPH_REPLAY, OPTIMIZER, phase
from scenarios._base import (
    RunContext,
    Workload,
)

from . import (
    KernelFloodConfig,
    KernelFloodSize,
)

# -- model and optimizer ---------------------------------------------------------------------


class Block(nn.Module):
    """Pre-norm residual MLP block: x + scale * gelu(fc(ln(x)))."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(width)
        self.fc = nn.Linear(width, width)
        self.scale = nn.Parameter(torch.full((width,), 0.1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.scale * F.gelu(self.fc(self.ln(x)))


class DeepMLP(nn.Module):
    """``depth`` blocks, a final LayerNorm and a classifier; forward returns the loss, so the
    compiled variants fuse the loss with the model."""

    def __init__(self, depth: int, width: int, num_classes: int) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*[Block(width) for _ in range(depth)])
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.head(self.norm(self.blocks(x))), y)


class HandSGD:
    """SGD with momentum and weight decay written the way hand-rolled training loops write it:
    a Python loop over parameter tensors, four small ops each (not torch.optim's foreach or
    fused kernels). Momentum buffers exist from the start so CUDA-graph capture and
    cudagraph trees see fixed addresses."""

    def __init__(
        self,
        params: list[nn.Parameter],
        *,
        lr: float = 0.01,
        momentum: float = 0.9,
        weight_decay: float = 1e-4,
    ) -> None:
        self.params = [p for p in params if p.requires_grad]
        self.bufs = [torch.zeros_like(p) for p in self.params]
        self.lr, self.momentum, self.weight_decay = lr, momentum, weight_decay

    @torch.no_grad()
    def step(self) -> None:
        """One update: d = g + wd*p; buf = m*buf + d; p -= lr*buf."""
        for p, buf in zip(self.params, self.bufs, strict=True):
            d_p = p.grad.add(p, alpha=self.weight_decay)
            buf.mul_(self.momentum).add_(d_p)
            p.add_(buf, alpha=-self.lr)

    def zero_grad(self) -> None:
        """Drop gradients (set_to_none, torch's default): the next backward writes fresh ones."""
        for p in self.params:
            p.grad = None


class _OpCounter(TorchDispatchMode):
    """Counts ATen ops reaching the dispatcher (forward, autograd backward and optimizer).

    ``compute`` leaves out views and allocations, which launch no kernel, so in eager mode it
    is close to the number of kernel launches."""

    _NO_KERNEL = ("empty", "detach", "alias", "as_strided", "_unsafe_view", "lift_fresh")

    def __init__(self) -> None:
        super().__init__()
        self.total = 0
        self.compute = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.total += 1
        name = func.overloadpacket.__name__
        if not func.is_view and not name.startswith(self._NO_KERNEL):
            self.compute += 1
        return func(*args, **(kwargs or {}))


# -- workloads -------------------------------------------------------------------------------


class _Base(Workload):
    def __init__(self, cfg: KernelFloodConfig, size: KernelFloodSize, ctx: RunContext) -> None:
        self.cfg, self.size, self.ctx = cfg, size, ctx
        self.depth = cfg.depth(size)
        self.samples_per_step = size.batch_size
        self.host_ms: list[float] = []
        self.measuring = False
        self.extra: dict[str, float] = {}

    def setup(self) -> None:
        dev, s = self.ctx.device, self.size
        gen = torch.Generator().manual_seed(self.ctx.seed)
        with self.ctx.stage("build_model"):
            with torch.device(dev):  # initialised where it runs: no host copy
                self.net = DeepMLP(self.depth, s.width, s.num_classes)
            self.opt = HandSGD(list(self.net.parameters()))
        with self.ctx.stage("data"):
            self.batches = [
                (
                    torch.randn(s.batch_size, s.width, generator=gen).to(dev),
                    torch.randint(0, s.num_classes, (s.batch_size,), generator=gen).to(dev),
                )
                for _ in range(s.num_batches)
            ]
        self.extra["depth_blocks"] = self.depth
        self.extra["param_tensors"] = len(self.opt.params)

    def sync(self) -> None:
        if self.ctx.on_gpu:
            torch.cuda.synchronize(self.ctx.device)

    def eager_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Forward, backward, optimizer in eager mode, with NVTX phases."""
        with phase(FORWARD):
            loss = self.net(x, y)
        with phase(BACKWARD):
            loss.backward()
        with phase(OPTIMIZER):
            self.opt.step()
            self.opt.zero_grad()
        return loss.detach()

    def count_ops(self, x: torch.Tensor, y: torch.Tensor) -> _OpCounter:
        """Run one eager step under the op counter."""
        counter = _OpCounter()
        with counter:
            self.eager_step(x, y)
        return counter

    def start_window(self) -> None:
        # Count from the worker's window, never from the step index: the worker may end the
        # warm-up before ``warmup_steps`` (harness.max_warmup_s).
        self.measuring = True
        self.host_ms.clear()

    def step(self, index: int) -> None:
        t0 = time.perf_counter()
        x, y = self.batches[index % len(self.batches)]
        self.train_step(x, y)
        if self.measuring:
            self.host_ms.append((time.perf_counter() - t0) * 1e3)

    def train_step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        raise NotImplementedError

    def metrics(self) -> dict[str, float]:
        out = dict(self.extra)
        if self.host_ms:
            out["host_step_ms"] = statistics.median(self.host_ms)
        return out


class Baseline(_Base):
    """Eager PyTorch: every op of forward, backward and the per-tensor optimizer is a launch."""

    def setup(self) -> None:
        super().setup()
        x, y = self.batches[0]
        with self.ctx.stage("first_step"):
            self.eager_step(x, y)  # first-call allocations outside the counted step
            self.sync()
        with self.ctx.stage("count_ops"):
            counter = self.count_ops(x, y)
            self.sync()
        self.extra["aten_ops_per_step"] = counter.total
        self.extra["aten_compute_ops_per_step"] = counter.compute

    def train_step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.eager_step(x, y)


class CudaGraphs(_Base):
    """Whole-step capture with torch.cuda.graph, following the PyTorch docs' whole-network
    recipe: warm up on a side stream, set grads to None so backward allocates them from the
    graph's private pool (they stay static), capture forward+backward+optimizer, then each step
    copies the batch into the static input and replays."""

    def setup(self) -> None:
        super().setup()
        x, y = self.batches[0]
        self.static_x, self.static_y = x.clone(), y.clone()
        side = torch.cuda.Stream(self.ctx.device)
        side.wait_stream(torch.cuda.current_stream(self.ctx.device))
        with self.ctx.stage("graph_warmup"), torch.cuda.stream(side):
            for _ in range(self.size.graph_warmup_iters):
                self.eager_step(self.static_x, self.static_y)
            # The captured work is exactly one eager step; count its ops here, uncaptured.
            counter = self.count_ops(self.static_x, self.static_y)
        torch.cuda.current_stream(self.ctx.device).wait_stream(side)
        self.sync()
        self.extra["aten_compute_ops_captured"] = counter.compute

        t0 = time.perf_counter()
        with self.ctx.stage("capture"):
            self.opt.zero_grad()
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.static_loss = self.net(self.static_x, self.static_y)
                self.static_loss.backward()
                self.opt.step()
            self.sync()
        self.extra["capture_s"] = time.perf_counter() - t0

    def train_step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        with phase(GRAPH_REPLAY):
            self.static_x.copy_(x)
            self.static_y.copy_(y)
            self.graph.replay()


class Compiled(_Base):
    """torch.compile on the model (with its loss) and on the optimizer step; ``mode`` None is
    Inductor fusion alone, 'reduce-overhead' adds cudagraph trees."""

    mode: str | None = None

    def setup(self) -> None:
        from torch._dynamo.utils import counters
        from torch._inductor import metrics as inductor_metrics

        super().setup()
        if self.mode == "reduce-overhead":
            # Momentum buffers are mutated in place: cudagraph trees need them at fixed
            # addresses (parameters are marked static by Dynamo already).
            for buf in self.opt.bufs:
                torch._dynamo.mark_static_address(buf)
        self.net_c = torch.compile(self.net, mode=self.mode)
        self.opt_step_c = torch.compile(self.opt.step, mode=self.mode)
        counters.clear()
        inductor_metrics.reset()

        x, y = self.batches[0]
        t0 = time.perf_counter()
        with self.ctx.stage("compile"):
            self.train_step(x, y)
            self.sync()
        self.extra["compile_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        with self.ctx.stage("capture" if self.mode == "reduce-overhead" else "compiled_steps"):
            for i in range(1, self.size.compile_calls):
                self.train_step(*self.batches[i % len(self.batches)])
            self.sync()
        if self.mode == "reduce-overhead":
            self.extra["capture_s"] = time.perf_counter() - t0

        ind = counters["inductor"]
        # Kernels Inductor generated over the forward, backward and optimizer graphs (each runs
        # once per step), plus library calls (matmuls) it left to cuBLAS/oneDNN.
        self.extra["inductor_generated_kernels"] = inductor_metrics.generated_kernel_count
        self.extra["inductor_extern_calls"] = ind["extern_calls"]
        self.extra["fxgraph_cache_hits"] = ind["fxgraph_cache_hit"]
        self.extra["graph_breaks"] = sum(counters["graph_break"].values())
        if self.mode == "reduce-overhead":
            self.extra["cudagraph_skips"] = ind["cudagraph_skips"]
            # Inputs copied into the graphs on every replay (0 when grads stay graph-owned).
            self.extra["cudagraph_recorded_non_static_inputs"] = ind[
                "cudagraph_recorded_non_static_inputs"
            ]

    def train_step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        if self.mode == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()
        with phase(FORWARD):
            loss = self.net_c(x, y)
        with phase(BACKWARD):
            loss.backward()
        with phase(OPTIMIZER):
            self.opt_step_c()
            self.opt.zero_grad()


class CompiledCudagraphs(Compiled):
    """torch.compile mode='reduce-overhead': Inductor fusion plus cudagraph trees."""

    mode = "reduce-overhead"


VARIANTS: dict[str, type[_Base]] = {
    "baseline": Baseline,
    "cuda_graphs": CudaGraphs,
    "torch_compile": Compiled,
    "torch_compile_cudagraphs": CompiledCudagraphs,
}


def build(cfg: KernelFloodConfig, size: KernelFloodSize, variant: str, ctx: RunContext) -> Workload:
    """The workload for ``variant``."""
    return VARIANTS[variant](cfg, size, ctx)
