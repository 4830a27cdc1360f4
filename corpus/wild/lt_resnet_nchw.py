"""ResNet-18 on 160 px crops, trained with bf16 autocast and cudnn.benchmark, model and batches
in PyTorch's default NCHW layout.
# H200 estimate: batch 128 of 160 px (~0.93 GMAC an image forward, 0.71 TFLOP a step forward
# and backward). In NHWC this net runs at ~150 TFLOP/s effective (BatchNorm and ReLU traffic
# included): ~5 ms/step. In NCHW cuDNN converts every convolution's input, output and gradients
# to NHWC and back (or picks slower NCHW kernels): about six extra passes over each activation
# per convolution, ~2.5-3.5 ms -> none ~8 ms/step, GPU-bound (~300 kernels a step, the host
# far ahead).
# --fix channels_last (model.to(memory_format=torch.channels_last), each batch converted once
# on the GPU) -> ~5 ms (~1.5x). It is the removal: the same network with no layout conversion.
"""

import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.backends.cudnn.benchmark = True


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x):
        idt = x if self.down is None else self.down(x)
        out = F.relu(self.bn1(self.conv1(x)), inplace=True)
        return F.relu(self.bn2(self.conv2(out)) + idt, inplace=True)


class ResNet18(nn.Module):
    def __init__(self, classes=1000, w=64):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, w, 7, 2, 3, bias=False), nn.BatchNorm2d(w), nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2, 1),
        )  # fmt: skip
        layers, cin = [], w
        for i, cout in enumerate((w, 2 * w, 4 * w, 8 * w)):
            layers += [BasicBlock(cin, cout, 1 if i == 0 else 2), BasicBlock(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.layers(self.stem(x)), 1), 1))


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
    batch, image, width = (128, 160, 64) if cuda else (4, 32, 8)
    model = ResNet18(1000, width).to(device)
    fmt = torch.channels_last if args.fix == "channels_last" else torch.contiguous_format
    model = model.to(memory_format=fmt)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
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
