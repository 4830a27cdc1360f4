"""A ResNet-style classifier for 128 px images, channels_last as the performance guide says,
but in fp32 with TF32 disabled for convolutions and matmuls ("bit-exact reruns").
# H200 estimate: batch 32, stem 3->64 at 128 px, three stages of two basic blocks (64, 128, 256
# channels at 128, 64, 32 px): ~7.3 GMAC an image, 1.4 TFLOP a step forward and backward. cuDNN's
# fp32 FMA convolutions run at ~35 TFLOP/s -> ~40 ms; BatchNorm and ReLU in fp32 ~4 ms ->
# none ~44 ms/step, GPU-bound.
# --fix tf32 (cuDNN and cuBLAS allowed TF32 again, their defaults: tensor-core convolutions at
# ~150 TFLOP/s effective) -> ~10 + 4 ms -> ~3x.
# --fix amp (bf16 autocast, the layout already NHWC: tensor-core bf16 convolutions, BatchNorm
# and ReLU traffic halved) -> ~6 + 2.5 ms -> ~5x. It is the removal too: the convolutions at the
# bf16 rate, everything else unchanged.
"""

import argparse
import json
import time
from contextlib import nullcontext

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.backends.cudnn.benchmark = True
torch.backends.cudnn.allow_tf32 = False  # bit-exact reruns
torch.backends.cuda.matmul.allow_tf32 = False


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.short = None
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x):
        out = F.relu(self.b1(self.c1(x)))
        out = self.b2(self.c2(out))
        return F.relu(out + (x if self.short is None else self.short(x)))


class Net(nn.Module):
    def __init__(self, width, classes):
        super().__init__()
        w = width
        self.stem = nn.Sequential(
            nn.Conv2d(3, w, 3, 1, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU()
        )
        self.stages = nn.Sequential(
            Block(w, w, 1), Block(w, w, 1),
            Block(w, 2 * w, 2), Block(2 * w, 2 * w, 1),
            Block(2 * w, 4 * w, 2), Block(4 * w, 4 * w, 1),
        )  # fmt: skip
        self.fc = nn.Linear(4 * w, classes)

    def forward(self, x):
        x = self.stages(self.stem(x))
        return self.fc(x.mean((2, 3)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fix", default="none", choices=["none", "tf32", "amp"])
    p.add_argument("--seconds", type=float, default=1.5)
    p.add_argument("--device", default="auto")
    args = p.parse_args()
    device = torch.device(
        args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    )
    cuda = device.type == "cuda"
    torch.manual_seed(0)
    if args.fix == "tf32":
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cuda.matmul.allow_tf32 = True
    width, image, batch = (64, 128, 32) if cuda else (8, 16, 4)
    model = Net(width, 100).to(device).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    data = [
        (
            torch.randn(batch, 3, image, image, device=device).to(
                memory_format=torch.channels_last
            ),
            torch.randint(0, 100, (batch,), device=device),
        )
        for _ in range(4)
    ]
    amp = args.fix == "amp"
    state = {"i": 0}

    def step():
        x, y = data[state["i"] % len(data)]
        state["i"] += 1
        with torch.autocast(device.type, dtype=torch.bfloat16) if amp else nullcontext():
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(5):  # cuDNN's autotuning happens here
        step()
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    n = 0
    while n < 10 or time.perf_counter() - t0 < args.seconds:
        step()
        n += 1
    if cuda:
        torch.cuda.synchronize()
    ms = (time.perf_counter() - t0) * 1e3 / n
    print("RESULT " + json.dumps({"step_ms": round(ms, 3), "steps": n, "fix": args.fix}))


if __name__ == "__main__":
    main()
