"""Small models defined in the project (no torchvision: its PyPI wheel does not import beside
the CPU torch wheel the CI machines use) and the shared training step."""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import nn

from bottlenecks import BACKWARD, FORWARD, OPTIMIZER, phase


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        idt = x if self.down is None else self.down(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + idt)


class ResNet18(nn.Module):
    """ResNet-18's layout (2-2-2-2 basic blocks); ``width=64`` gives its 11.7 M parameters."""

    def __init__(self, num_classes: int = 1000, width: int = 64) -> None:
        super().__init__()
        w = width
        self.stem = nn.Sequential(
            nn.Conv2d(3, w, 7, 2, 3, bias=False),
            nn.BatchNorm2d(w),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2, 1),
        )
        layers, cin = [], w
        for i, cout in enumerate((w, 2 * w, 4 * w, 8 * w)):
            stride = 1 if i == 0 else 2
            layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(self.pool(x), 1))


class FeedForward(nn.Module):
    """``x + fc2(gelu(fc1(x)))``: a transformer's feed-forward block with its residual and no
    norm, so a stack of them is GEMMs plus two elementwise kernels a block each way: its GPU
    time follows from its FLOPs (``6 * params * tokens`` a training step)."""

    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, hidden)
        self.fc2 = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(F.gelu(self.fc1(x)))


class FeedForwardStack(nn.Sequential):
    """``depth`` :class:`FeedForward` blocks of one width."""

    def __init__(self, width: int, hidden: int, depth: int) -> None:
        super().__init__(*(FeedForward(width, hidden) for _ in range(depth)))


def parameter_count(model: nn.Module) -> int:
    """Elements in the model's parameters."""
    return sum(p.numel() for p in model.parameters())


class Trainer:
    """Model, optimizer and loss, and one training step with NVTX phases.

    On a GPU: bf16 autocast, the setting a tuned job uses, so the data path rather than the
    model is what differs between a scenario's variants.
    """

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, device: torch.device):
        self.device = device
        self.on_gpu = device.type == "cuda"
        if self.on_gpu:
            torch.backends.cudnn.benchmark = True
        self.model = model
        self.opt = optimizer
        self.loss_fn = nn.CrossEntropyLoss()

    def prepare(self, x: torch.Tensor) -> torch.Tensor:
        """Layout conversion of the input batch (none by default)."""
        return x

    def step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Forward, backward, optimizer; returns the loss without reading it on the host."""
        amp = (
            torch.autocast("cuda", dtype=torch.bfloat16)
            if self.on_gpu
            else contextlib.nullcontext()
        )
        with phase(FORWARD), amp:
            loss = self.loss_fn(self.model(self.prepare(x)), y)
        with phase(BACKWARD):
            loss.backward()
        with phase(OPTIMIZER):
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
        return loss.detach()


class ConvNetTrainer(Trainer):
    """ResNet-18-shaped convnet with SGD; channels_last on the GPU."""

    def __init__(self, device: torch.device, num_classes: int, width: int) -> None:
        with torch.device(device):  # initialised where it runs: no host copy
            model = ResNet18(num_classes=num_classes, width=width)
        if device.type == "cuda":
            model = model.to(memory_format=torch.channels_last)
        super().__init__(model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9), device)

    def prepare(self, x: torch.Tensor) -> torch.Tensor:
        return x.contiguous(memory_format=torch.channels_last) if self.on_gpu else x
