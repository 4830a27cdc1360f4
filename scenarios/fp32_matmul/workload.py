"""fp32_matmul's workloads (torch): one training loop, four precisions.

Imported only where a variant runs (its worker, or the fork server that preloads what workers
need): the package's ``__init__`` holds the metadata the harness reads without torch.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

from bottlenecks import BACKWARD, FORWARD, OPTIMIZER, phase
from scenarios import _models
from scenarios._base import RunContext, Workload

from . import Fp32MatmulConfig, Fp32MatmulSize

#: Per variant: the fp32 matmul precision it sets, the dtype of model and data, and whether the
#: forward runs under bf16 autocast.
PRECISION: dict[str, tuple[str, torch.dtype, bool]] = {
    "baseline": ("highest", torch.float32, False),  # PyTorch's default, set explicitly
    "tf32": ("high", torch.float32, False),
    "bf16_autocast": ("highest", torch.float32, True),
    "ideal": ("highest", torch.bfloat16, False),
}


class Loop(Workload):
    """The feed-forward stack regressing a target (MSE) with fused AdamW, in one precision."""

    def __init__(
        self, cfg: Fp32MatmulConfig, size: Fp32MatmulSize, ctx: RunContext, variant: str
    ) -> None:
        self.size, self.ctx = size, ctx
        self.depth = int(cfg.severity)
        self.precision, self.dtype, self.autocast = PRECISION[variant]
        self.samples_per_step = size.tokens

    def setup(self) -> None:
        s, dev = self.size, self.ctx.device
        # Process-wide, and each variant is a process of its own: set it whatever the default.
        torch.set_float32_matmul_precision(self.precision)
        gen = torch.Generator(device=dev).manual_seed(self.ctx.seed)
        with self.ctx.stage("build_model"), torch.device(dev):
            self.model = _models.FeedForwardStack(s.width, s.hidden, self.depth).to(self.dtype)
            self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-5, fused=self.ctx.on_gpu)
        with self.ctx.stage("data"):
            self.batches = [
                tuple(
                    torch.randn(s.tokens, s.width, generator=gen, device=dev).to(self.dtype)
                    for _ in range(2)
                )
                for _ in range(s.num_batches)
            ]
        with self.ctx.stage("first_step"):
            self.step(0)  # cuBLAS handles and workspaces, optimizer state: outside the window

    def amp(self) -> contextlib.AbstractContextManager[None]:
        if not self.autocast:
            return contextlib.nullcontext()
        return torch.autocast(self.ctx.device.type, dtype=torch.bfloat16)

    def step(self, index: int) -> None:
        x, y = self.batches[index % len(self.batches)]
        with phase(FORWARD), self.amp():
            loss = F.mse_loss(self.model(x), y)
        with phase(BACKWARD):
            loss.backward()
        with phase(OPTIMIZER):
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)

    def metrics(self) -> dict[str, float]:
        weights = sum(p.numel() for p in self.model.parameters() if p.dim() == 2)
        return {
            "params_m": _models.parameter_count(self.model) / 1e6,
            # forward 2, backward 4 FLOPs per weight and token
            "gemm_tflop_per_step": 6.0 * weights * self.size.tokens / 1e12,
            "tf32_matmul": float(self.precision != "highest"),
        }


def build(cfg: Fp32MatmulConfig, size: Fp32MatmulSize, variant: str, ctx: RunContext) -> Workload:
    """The workload for ``variant``."""
    return Loop(cfg, size, ctx, variant)
