"""A small U-Net for binary segmentation of 256 px tiles: strided-conv encoder, a decoder of
transposed convolutions with skip concatenations, BatchNorm and ReLU; bf16 autocast,
cudnn.benchmark, everything in NCHW.
# H200 estimate: batch 16 of 256 px, widths 32/64/128/256 (encoder) and back: ~11 GMAC an image
# forward, ~1.1 TFLOP a step forward and backward; activations ~2.2 GB a step at full and half
# resolution where the channels are few (32, 64). In NHWC ~6.5 ms/step (convolutions ~4 ms,
# BatchNorm/ReLU/cat ~2.5 ms); in NCHW every convolution and transposed convolution adds cuDNN's
# layout conversions of its input, output and gradients (~6 passes of each activation), most of
# them at the narrow high-resolution end -> none ~10 ms/step, GPU-bound.
# --fix channels_last (model and tiles in channels_last; torch.cat along channels stays a copy
# either way) -> ~6.5 ms (~1.5x). It is the removal: the same network with no conversion.
"""

import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.backends.cudnn.benchmark = True


def conv_bn(cin, cout, stride=1):
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)
    )


class Up(nn.Module):
    def __init__(self, cin, cskip, cout):
        super().__init__()
        self.up = nn.ConvTranspose2d(cin, cout, 2, 2)
        self.conv = nn.Sequential(conv_bn(cout + cskip, cout), conv_bn(cout, cout))

    def forward(self, x, skip):
        return self.conv(torch.cat([self.up(x), skip], dim=1))


class UNet(nn.Module):
    def __init__(self, w=32):
        super().__init__()
        self.e0 = nn.Sequential(conv_bn(3, w), conv_bn(w, w))
        self.e1 = nn.Sequential(conv_bn(w, 2 * w, 2), conv_bn(2 * w, 2 * w))
        self.e2 = nn.Sequential(conv_bn(2 * w, 4 * w, 2), conv_bn(4 * w, 4 * w))
        self.e3 = nn.Sequential(conv_bn(4 * w, 8 * w, 2), conv_bn(8 * w, 8 * w))
        self.d2 = Up(8 * w, 4 * w, 4 * w)
        self.d1 = Up(4 * w, 2 * w, 2 * w)
        self.d0 = Up(2 * w, w, w)
        self.head = nn.Conv2d(w, 1, 1)

    def forward(self, x):
        s0 = self.e0(x)
        s1 = self.e1(s0)
        s2 = self.e2(s1)
        x = self.e3(s2)
        x = self.d0(self.d1(self.d2(x, s2), s1), s0)
        return self.head(x)


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
    batch, tile, width = (16, 256, 32) if cuda else (2, 32, 4)
    fmt = torch.channels_last if args.fix == "channels_last" else torch.contiguous_format
    model = UNet(width).to(device).to(memory_format=fmt)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = [
        (
            torch.randn(batch, 3, tile, tile, device=device),
            (torch.rand(batch, 1, tile, tile, device=device) > 0.5).float(),
        )
        for _ in range(4)
    ]
    state = {"i": 0}

    def step():
        x, mask = data[state["i"] % len(data)]
        state["i"] += 1
        x = x.contiguous(memory_format=fmt)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = F.binary_cross_entropy_with_logits(model(x), mask)
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
