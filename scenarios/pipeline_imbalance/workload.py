"""pipeline_imbalance's workloads: its models and training loops (torch).

Imported only where a variant runs (its worker, or the fork server that preloads what workers
need): the package's ``__init__`` holds the metadata the harness reads without torch.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from bottlenecks import BACKWARD, COMM, FORWARD, OPTIMIZER, phase
from scenarios._base import (
    RunContext,
    Workload,
)
from scenarios.ddp_bucketing.workload import Block  # the same pre-LN residual MLP block

from . import (
    PipeConfig,
    PipeSize,
)


def first_stage_blocks(depth: int, world: int, share: float) -> list[int]:
    """Blocks per stage: ``round(share * depth)`` on the first (at least 1, leaving at least one
    per other stage), the rest spread evenly over the others."""
    if world == 1:
        return [depth]
    first = min(depth - (world - 1), max(1, round(share * depth)))
    rest, others = depth - first, world - 1
    return [first] + [rest // others + (1 if i < rest % others else 0) for i in range(others)]


def even_cut(costs: list[float], world: int, last_extra: float = 0.0) -> list[int]:
    """Blocks per stage of the contiguous cut whose slowest stage is fastest (exact, by dynamic
    programming over cut points), the last stage carrying ``last_extra`` more (the head and the
    loss); every stage gets at least one block."""
    n = len(costs)
    pre = [0.0]
    for c in costs:
        pre.append(pre[-1] + c)
    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(world + 1)]  # best[k][i]: first i blocks, k stages
    cut = [[0] * (n + 1) for _ in range(world + 1)]
    best[0][0] = 0.0
    for k in range(1, world + 1):
        for i in range(k, n - (world - k) + 1):
            for j in range(k - 1, i):
                extra = last_extra if k == world else 0.0
                slowest = max(best[k - 1][j], pre[i] - pre[j] + extra)
                if slowest < best[k][i]:
                    best[k][i], cut[k][i] = slowest, j
    sizes, i = [], n
    for k in range(world, 0, -1):
        sizes.append(i - cut[k][i])
        i = cut[k][i]
    return sizes[::-1]


def _hold_core() -> bool:
    """Raise this process's scheduling priority where allowed (see ``PipeSize.hold_cores``);
    only in a process that leads its own session (torchrun starts each rank so), whose
    autogroup is its own."""
    held = False
    if os.getsid(0) != os.getpid():
        return held
    with contextlib.suppress(OSError):
        with open("/proc/self/autogroup", "w") as f:  # the process's own session group
            f.write("-10")
        held = True
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, 0, -10)
        held = True
    return held


class Pipeline(Workload):
    """One rank's stage of a GPipe pipeline; variants differ in the cut and the micro-batches."""

    def __init__(self, cfg: PipeConfig, size: PipeSize, ctx: RunContext, variant: str) -> None:
        self.cfg, self.size, self.ctx, self.variant = cfg, size, ctx, variant
        self.device, self.on_gpu = ctx.device, ctx.on_gpu
        self.rank, self.world = ctx.rank, ctx.world_size
        self.m = size.more_microbatches if variant == "more_microbatches" else size.microbatches
        self.samples_per_step = size.rows // max(1, self.world)  # the worker multiplies back
        self.extra: dict[str, float] = {}
        self.measuring = False
        self.steps = 0
        self.fb_s = self.opt_s = self.cpu_s = 0.0
        self.events: list[tuple[torch.cuda.Event, torch.cuda.Event, str]] = []

    # -- set-up ---------------------------------------------------------------------------
    def setup(self) -> None:
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError(
                "pipeline_imbalance needs an initialised process group (the harness starts its "
                "ranks under torchrun); torch.distributed is not initialised"
            )
        size = self.size
        if not self.on_gpu:
            torch.set_num_threads(1)  # one core per rank
            if size.hold_cores:
                self.extra["cores_held"] = float(_hold_core())
        torch.manual_seed(self.ctx.seed)  # the same model on every rank and in every variant
        with self.ctx.stage("build_model"), torch.device(self.device):
            hidden = size.mlp_ratio * size.width
            self.blocks = [Block(size.width, hidden) for _ in range(size.depth)]
            self.head = nn.Sequential(nn.LayerNorm(size.width), nn.Linear(size.width, size.width))
        gen = torch.Generator().manual_seed(self.ctx.seed + 1)
        with self.ctx.stage("data"):  # the same batches on every rank: the first uses x, the last y
            shape = (2, size.rows, size.width)
            self.x = torch.randn(shape, generator=gen).to(self.device)
            self.y = torch.randn(shape, generator=gen).to(self.device)
        with self.ctx.stage("block_costs"):
            costs = self._block_costs()
        if self.variant == "balanced":
            sizes = even_cut(costs[:-1], self.world, last_extra=costs[-1])
        else:
            sizes = first_stage_blocks(size.depth, self.world, self.cfg.severity)
        lo = sum(sizes[: self.rank])
        self.stage = nn.Sequential(*self.blocks[lo : lo + sizes[self.rank]])
        if self.rank == self.world - 1:
            self.stage.append(self.head)
        del self.blocks, self.head
        params = list(self.stage.parameters())
        self.opt = torch.optim.AdamW(params, lr=1e-4, **({"fused": True} if self.on_gpu else {}))
        for r, n in enumerate(sizes):
            self.extra[f"blocks_rank{r}"] = float(n)
        self.extra["microbatches"] = float(self.m)
        self.extra["block_ms_mean"] = 1e3 * sum(costs[:-1]) / len(costs[:-1])
        self.extra["block_ms_max"] = 1e3 * max(costs[:-1])
        self.extra["block_ms_min"] = 1e3 * min(costs[:-1])
        self.extra["head_ms"] = 1e3 * costs[-1]

    def _amp(self) -> contextlib.AbstractContextManager:
        if self.on_gpu:
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _sync(self) -> None:
        if self.on_gpu:
            torch.cuda.synchronize(self.device)

    def _block_costs(self) -> list[float]:
        """Forward+backward seconds of every block on one micro-batch, then of the head with
        the loss (the last entry): each the fastest of ``cost_rounds`` passes over them all (in
        turn forwards and backwards, so a slow spell of the machine does not always hit the
        same blocks), averaged over the ranks (all of them cut at the same place)."""
        rows = self.size.rows // self.size.microbatches
        x, y = self.x[0, :rows], self.y[0, :rows]
        layers = [*self.blocks, self.head]
        best = [float("inf")] * len(layers)
        order = list(range(len(layers)))
        for _ in range(self.size.cost_rounds):
            order.reverse()
            for i in order:
                inp = x.detach().requires_grad_()
                self._sync()
                t0 = time.perf_counter()
                with self._amp():
                    out = layers[i](inp).float()
                loss = F.mse_loss(out, y) if i == len(layers) - 1 else out.square().mean()
                loss.backward()
                self._sync()
                best[i] = min(best[i], time.perf_counter() - t0)
                layers[i].zero_grad(set_to_none=True)
        t = torch.tensor(best, dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return (t / self.world).tolist()

    # -- the loop -------------------------------------------------------------------------
    def start_window(self) -> None:
        self.measuring = True

    @contextlib.contextmanager
    def _timed(self, kind: str) -> Iterator[None]:
        """Time compute (not the waits before it) into the window's totals; ``kind``: ``fb``
        (a forward or backward) or ``opt`` (the optimizer)."""
        if not self.measuring:
            yield
            return
        if self.on_gpu:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            yield
            end.record()
            self.events.append((start, end, kind))
            return
        t0, c0 = time.perf_counter(), time.thread_time()
        yield
        self.cpu_s += time.thread_time() - c0
        if kind == "opt":
            self.opt_s += time.perf_counter() - t0
        else:
            self.fb_s += time.perf_counter() - t0

    def _recvs(
        self, peer: int, shape: tuple[int, ...], early: bool
    ) -> Callable[[int], torch.Tensor]:
        """Receive ``m`` tensors from ``peer`` in order: all posted now when ``early``, else
        each one when it is asked for."""
        bufs = [torch.empty(shape, device=self.device) for _ in range(self.m)]
        works = [dist.irecv(b, peer) for b in bufs] if early else []

        def get(i: int) -> torch.Tensor:
            with phase(COMM):
                if early:
                    works[i].wait()
                else:
                    dist.recv(bufs[i], peer)
            return bufs[i]

        return get

    def step(self, index: int) -> None:
        k = index % 2
        first, last = self.rank == 0, self.rank == self.world - 1
        rows = self.size.rows // self.m
        shape = (rows, self.size.width)
        xs, ys = self.x[k].split(rows), self.y[k].split(rows)
        sends: list = []
        inputs, outputs = [], []
        get = None if first else self._recvs(self.rank - 1, shape, early=last)
        # one autocast region for the whole forward phase: each weight is cast to bf16 once a
        # step, not once a micro-batch (autocast caches casts until its outermost region ends)
        with phase(FORWARD), self._amp():
            for i in range(self.m):
                h = xs[i] if first else get(i).requires_grad_()  # type: ignore[misc]
                with self._timed("fb"):
                    out = self.stage(h).float()  # fp32 hand-offs, and fp32 gradients back
                    if last:
                        out = F.mse_loss(out, ys[i]) / self.m
                if not last:
                    with phase(COMM):
                        sends.append(dist.isend(out.detach(), self.rank + 1))
                inputs.append(h)
                outputs.append(out)
        get = None if last else self._recvs(self.rank + 1, shape, early=first)
        with phase(BACKWARD):
            for i in range(self.m):
                grad = None if last else get(i)  # type: ignore[misc]
                with self._timed("fb"):
                    outputs[i].backward(grad)
                if not first:
                    with phase(COMM):
                        sends.append(dist.isend(inputs[i].grad, self.rank - 1))
            with phase(COMM):
                for s in sends:
                    s.wait()
        with phase(OPTIMIZER), self._timed("opt"):
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
        if self.measuring:
            self.steps += 1

    # -- report ---------------------------------------------------------------------------
    def _window_seconds(self) -> tuple[float, float]:
        """(forward+backward, optimizer) seconds this rank computed in the window."""
        if not self.on_gpu:
            return self.fb_s, self.opt_s
        self._sync()
        fb = sum(s.elapsed_time(e) for s, e, k in self.events if k == "fb") / 1e3
        opt = sum(s.elapsed_time(e) for s, e, k in self.events if k == "opt") / 1e3
        return fb, opt

    def metrics(self) -> dict[str, float]:
        fb, opt = self._window_seconds()
        n = max(1, self.steps)
        held = self.cpu_s / (fb + opt) if not self.on_gpu and fb + opt > 0 else 1.0
        mine = torch.tensor([fb / n, opt / n, held], dtype=torch.float64, device=self.device)
        every = [torch.zeros_like(mine) for _ in range(self.world)]
        dist.all_gather(every, mine)  # rank 0 writes result.json: it reports every rank
        fbs = [float(t[0]) for t in every]
        opts = [float(t[1]) for t in every]
        out = dict(self.extra)
        for r in range(self.world):
            out[f"compute_ms_per_step_rank{r}"] = 1e3 * (fbs[r] + opts[r])
        out["compute_ms_per_step_max"] = 1e3 * max(f + o for f, o in zip(fbs, opts, strict=True))
        out["compute_ms_per_step_min"] = 1e3 * min(f + o for f, o in zip(fbs, opts, strict=True))
        bubble = (self.m + self.world - 1) / self.m
        out["balanced_bound_ms"] = 1e3 * (bubble * sum(fbs) + sum(opts)) / self.world
        if not self.on_gpu:  # CPU time / wall time of the ranks' compute: 1 on a core of its own
            out["compute_cpu_share_min"] = min(float(t[2]) for t in every)
        return out


def build(cfg: PipeConfig, size: PipeSize, variant: str, ctx: RunContext) -> Workload:
    return Pipeline(cfg, size, ctx, variant)
