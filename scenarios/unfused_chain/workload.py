"""unfused_chain's workloads (torch): one model, four ways to run its norm and activation.

Imported only where a variant runs (its worker, or the fork server that preloads what workers
need): the package's ``__init__`` holds the metadata the harness reads without torch.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from bottlenecks import BACKWARD, FORWARD, OPTIMIZER, phase
from scenarios import _models
from scenarios._base import RunContext, Workload

from . import UnfusedChainConfig, UnfusedChainSize

EPS = 1e-6
GELU_C = math.sqrt(2.0 / math.pi)

Norm = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
Act = Callable[[torch.Tensor], torch.Tensor]


def rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """RMSNorm as the LLaMA reference writes it: upcast, pow, mean, add, rsqrt, mul, downcast,
    mul (each one kernel in eager mode)."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)
    return xf.type_as(x) * weight


def gelu(x: torch.Tensor) -> torch.Tensor:
    """GPT-2's tanh GELU written out: eight elementwise kernels in eager mode."""
    return 0.5 * x * (1.0 + torch.tanh(GELU_C * (x + 0.044715 * torch.pow(x, 3))))


def fused_rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],), weight, EPS)


def fused_gelu(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate="tanh")


class _OnePassNorm(torch.autograd.Function):
    """The norm's bytes moved once: one kernel forward (reads x, writes y), one backward (reads
    the gradient and x, writes x's gradient). Not a norm: the limit's stand-in for one."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, x: torch.Tensor, w: torch.Tensor):  # type: ignore[override]
        ctx.save_for_backward(x)
        return x * w

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor):  # type: ignore[override]
        (x,) = ctx.saved_tensors  # type: ignore[attr-defined]
        return grad * x, None


class _OnePassAct(torch.autograd.Function):
    """The activation's bytes moved once: ``tanh`` forward (bounded, like GELU's growth), one
    multiply backward reading the gradient and the input."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, x: torch.Tensor):  # type: ignore[override]
        ctx.save_for_backward(x)
        return torch.tanh(x)

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor):  # type: ignore[override]
        (x,) = ctx.saved_tensors  # type: ignore[attr-defined]
        return grad * x


def one_pass_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return _OnePassNorm.apply(x, weight)


def one_pass_act(x: torch.Tensor) -> torch.Tensor:
    return _OnePassAct.apply(x)


#: Per variant: the norm and the activation its blocks call.
CHAINS: dict[str, tuple[Norm, Act]] = {
    "baseline": (rms_norm, gelu),
    "torch_compile": (rms_norm, gelu),  # compiled in set-up
    "fused_ops": (fused_rms_norm, fused_gelu),
    "ideal": (one_pass_norm, one_pass_act),
}


class ChainBlock(nn.Module):
    """``x + scale * fc2(act(fc1(norm(x))))``: pre-norm feed-forward with a layer scale."""

    def __init__(self, width: int, hidden: int, norm: Norm, act: Act) -> None:
        super().__init__()
        self.norm_weight = nn.Parameter(torch.ones(width))
        self.fc1 = nn.Linear(width, hidden, bias=False)
        self.fc2 = nn.Linear(hidden, width, bias=False)
        self.scale = nn.Parameter(torch.full((width,), 0.1))
        self.norm, self.act = norm, act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.scale * self.fc2(self.act(self.fc1(self.norm(x, self.norm_weight))))


class Loop(Workload):
    """The block stack in bf16 regressing a target (MSE) with fused AdamW."""

    def __init__(
        self, cfg: UnfusedChainConfig, size: UnfusedChainSize, ctx: RunContext, variant: str
    ) -> None:
        self.size, self.ctx, self.variant = size, ctx, variant
        self.depth = cfg.depth(size)
        self.samples_per_step = size.tokens
        self.extra: dict[str, float] = {}

    def setup(self) -> None:
        s, dev = self.size, self.ctx.device
        norm, act = CHAINS[self.variant]
        if self.variant == "torch_compile":
            norm, act = torch.compile(norm), torch.compile(act)
        with self.ctx.stage("build_model"), torch.device(dev):
            blocks = [ChainBlock(s.width, s.hidden, norm, act) for _ in range(self.depth)]
            self.model = nn.Sequential(*blocks).to(torch.bfloat16)
            self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-5, fused=self.ctx.on_gpu)
        gen = torch.Generator(device=dev).manual_seed(self.ctx.seed)
        with self.ctx.stage("data"):
            self.batches = [
                tuple(
                    torch.randn(s.tokens, s.width, generator=gen, device=dev).to(torch.bfloat16)
                    for _ in range(2)
                )
                for _ in range(s.num_batches)
            ]
        stage = "compile" if self.variant == "torch_compile" else "first_step"
        t0 = time.perf_counter()
        with self.ctx.stage(stage):
            for i in range(s.compile_steps if self.variant == "torch_compile" else 1):
                self.step(i)
            if self.ctx.on_gpu:
                torch.cuda.synchronize(dev)
        if self.variant == "torch_compile":
            self.extra["compile_s"] = time.perf_counter() - t0
        self.extra["params_m"] = _models.parameter_count(self.model) / 1e6

    def step(self, index: int) -> None:
        x, y = self.batches[index % len(self.batches)]
        with phase(FORWARD):
            loss = F.mse_loss(self.model(x), y)
        with phase(BACKWARD):
            loss.backward()
        with phase(OPTIMIZER):
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)

    def metrics(self) -> dict[str, float]:
        return dict(self.extra)


def build(
    cfg: UnfusedChainConfig, size: UnfusedChainSize, variant: str, ctx: RunContext
) -> Workload:
    """The workload for ``variant``."""
    return Loop(cfg, size, ctx, variant)
