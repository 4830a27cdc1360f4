"""A MobileNetV2-style network (inverted residuals: 1x1 expand, 3x3 depthwise, 1x1 project,
BatchNorm and ReLU6) trained on 224 px images with bf16 autocast and cudnn.benchmark, in NCHW.
# H200 estimate: batch 128, the first nine inverted-residual blocks (24, 32 and 64 channels,
# expansion 6, at 56, 28 and 14 px) after a stride-2 stem: ~0.12 GMAC an image, little
# arithmetic on large activations (the expanded ones are 144-384 channels at 112-14 px, ~6 GB a
# step of reads and writes). In NHWC the step is memory-bound at ~4.5 ms (BatchNorm, ReLU6,
# depthwise and the 1x1 GEMMs); in NCHW cuDNN converts the inputs, outputs and gradients of
# every 1x1 and depthwise convolution to NHWC and back, ~6 more passes over each activation, or
# falls back to slower NCHW kernels -> none ~7 ms/step, GPU-bound.
# --fix channels_last (model and images in channels_last) -> ~4.5 ms (~1.5x). It is the
# removal: the same network with no conversion.
"""

import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.backends.cudnn.benchmark = True


def conv_bn(cin, cout, k, stride, groups=1, act=True):
    layers = [
        nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
    ]
    if act:
        layers.append(nn.ReLU6(inplace=True))
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = cin * expand
        self.res = stride == 1 and cin == cout
        self.body = nn.Sequential(
            conv_bn(cin, hidden, 1, 1),
            conv_bn(hidden, hidden, 3, stride, groups=hidden),
            conv_bn(hidden, cout, 1, 1, act=False),
        )

    def forward(self, x):
        return x + self.body(x) if self.res else self.body(x)


class MobileNetish(nn.Module):
    def __init__(self, classes=1000):
        super().__init__()
        blocks, cin = [], 16
        for expand, cout, n, stride in ((6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2)):
            for i in range(n):
                blocks.append(InvertedResidual(cin, cout, stride if i == 0 else 1, expand))
                cin = cout
        self.stem = nn.Sequential(conv_bn(3, 32, 3, 2), conv_bn(32, 32, 3, 1, groups=32),
                                  conv_bn(32, 16, 1, 1, act=False))  # fmt: skip
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Sequential(conv_bn(cin, 512, 1, 1))
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        x = self.head(self.blocks(self.stem(x)))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fix", default="none", choices=["none", "channels_last"])
    p.add_argument("--seconds", type=float, default=1.5)
    p.add_argument("--device", default="auto")
    args = p.parse_args()
    device = torch.device(
        args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    )
    cuda = device.type == "cuda"
    torch.manual_seed(0)
    batch, image = (128, 224) if cuda else (2, 32)
    fmt = torch.channels_last if args.fix == "channels_last" else torch.contiguous_format
    model = MobileNetish().to(device).to(memory_format=fmt)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=4e-5)
    data = [
        (
            torch.randn(batch, 3, image, image, device=device),
            torch.randint(0, 1000, (batch,), device=device),
        )
        for _ in range(4)
    ]
    state = {"i": 0}

    def step():
        x, y = data[state["i"] % len(data)]
        state["i"] += 1
        x = x.contiguous(memory_format=fmt)
        with torch.autocast(device.type, dtype=torch.bfloat16):
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
