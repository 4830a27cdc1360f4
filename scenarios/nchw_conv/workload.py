"""nchw_conv's workloads (torch): one conv net, in NCHW or in channels_last.

Imported only where a variant runs (its worker, or the fork server that preloads what workers
need): the package's ``__init__`` holds the metadata the harness reads without torch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bottlenecks import BACKWARD, FORWARD, OPTIMIZER, phase
from scenarios import _models
from scenarios._base import RunContext, Workload

from . import NchwConvConfig, NchwConvSize


class RestorationNet(nn.Module):
    """VDSR's shape: a 3 -> width conv, ``depth`` width -> width 3x3 convs with ReLU, a
    width -> 3 conv, and the input added back (the net predicts the residual)."""

    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(3, width, 3, padding=1), nn.ReLU()]
        for _ in range(depth):
            layers += [nn.Conv2d(width, width, 3, padding=1), nn.ReLU()]
        layers.append(nn.Conv2d(width, 3, 3, padding=1))
        self.body = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


class Loop(Workload):
    """The net denoising images (MSE) with SGD under bf16 autocast, cudnn.benchmark on."""

    def __init__(
        self, cfg: NchwConvConfig, size: NchwConvSize, ctx: RunContext, channels_last: bool
    ) -> None:
        self.size, self.ctx = size, ctx
        self.depth = cfg.depth(size)
        self.layout = torch.channels_last if channels_last else torch.contiguous_format
        self.samples_per_step = size.batch_size

    def setup(self) -> None:
        s, dev = self.size, self.ctx.device
        torch.backends.cudnn.benchmark = True
        with self.ctx.stage("build_model"), torch.device(dev):
            self.model = RestorationNet(s.width, self.depth).to(memory_format=self.layout)
            self.opt = torch.optim.SGD(self.model.parameters(), lr=1e-3, momentum=0.9)
        gen = torch.Generator(device=dev).manual_seed(self.ctx.seed)
        shape = (s.batch_size, 3, s.image_size, s.image_size)
        with self.ctx.stage("data"):  # as a loader hands them over: NCHW float32
            self.batches = []
            for _ in range(s.num_batches):
                clean = torch.rand(shape, generator=gen, device=dev)
                noisy = clean + 0.1 * torch.randn(shape, generator=gen, device=dev)
                self.batches.append((noisy, clean))
        with self.ctx.stage("autotune"):  # cuDNN tries its algorithms on the first calls
            for i in range(s.autotune_steps):
                self.step(i)
            if self.ctx.on_gpu:
                torch.cuda.synchronize(dev)

    def step(self, index: int) -> None:
        noisy, clean = self.batches[index % len(self.batches)]
        x = noisy.contiguous(memory_format=self.layout)  # a no-op in NCHW
        with phase(FORWARD), torch.autocast(self.ctx.device.type, dtype=torch.bfloat16):
            loss = F.mse_loss(self.model(x), clean)
        with phase(BACKWARD):
            loss.backward()
        with phase(OPTIMIZER):
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)

    def metrics(self) -> dict[str, float]:
        s = self.size
        macs = sum(
            m.weight.numel() * s.image_size**2
            for m in self.model.modules()
            if isinstance(m, nn.Conv2d)
        )
        return {
            "params_m": _models.parameter_count(self.model) / 1e6,
            # forward, data gradient and weight gradient: 2 FLOPs per MAC each
            "conv_tflop_per_step": 6.0 * macs * s.batch_size / 1e12,
            "channels_last": float(self.layout == torch.channels_last),
        }


def build(cfg: NchwConvConfig, size: NchwConvSize, variant: str, ctx: RunContext) -> Workload:
    """The workload for ``variant``."""
    return Loop(cfg, size, ctx, channels_last=variant == "channels_last")
