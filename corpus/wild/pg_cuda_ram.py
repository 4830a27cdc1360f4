"""Tabular model trained on feature batches kept in host RAM, copied with .cuda() each step.

# H100 estimate: batch 4096 x 12288 fp32 = 201 MB; pageable H2D ~8-12 GB/s -> ~17-25 ms that
# blocks the host and the stream; GPU compute ~6 ms (fp32 GEMMs, ~0.3 TFLOP) -> none ~25-30 ms.
# --fix pinned: pinned buffers, non_blocking copy of the next batch on a side stream (~5 ms at
# ~40 GB/s, hidden under compute) -> ~7 ms/step -> ~3.5x.
# --fix resident (the copy removed entirely: both batches moved to the GPU before the loop) -> the
# GPU's ~6 ms.
"""

import argparse
import json
import time
from contextlib import nullcontext

import torch
import torch.nn as nn
import torch.nn.functional as F


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fix", default="none", choices=["none", "pinned", "resident"])
    p.add_argument("--seconds", type=float, default=1.5)
    p.add_argument("--device", default="auto")
    args = p.parse_args()
    device = torch.device(
        args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    )
    torch.manual_seed(0)
    cuda = device.type == "cuda"
    rows, feats, hidden = (4096, 12288, 1024) if cuda else (64, 256, 64)

    host_batches = [torch.randn(rows, feats) for _ in range(2)]
    host_labels = [torch.randint(0, 100, (rows,)) for _ in range(2)]
    model = nn.Sequential(
        nn.Linear(feats, hidden),
        nn.GELU(),
        nn.Linear(hidden, hidden),
        nn.GELU(),
        nn.Linear(hidden, 100),
    ).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def nvtx(name):
        return torch.cuda.nvtx.range(name) if cuda else nullcontext()

    def train_on(x, y):
        with nvtx("train_step"):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

    i = 0
    if args.fix == "pinned" and cuda:
        host_batches = [b.pin_memory() for b in host_batches]
        host_labels = [b.pin_memory() for b in host_labels]
        copy_stream = torch.cuda.Stream()

        def fetch(k):
            with nvtx("fetch"), torch.cuda.stream(copy_stream):
                x = host_batches[k % 2].to(device, non_blocking=True)
                y = host_labels[k % 2].to(device, non_blocking=True)
            return x, y

        nxt = fetch(0)

        def step():
            nonlocal i, nxt
            torch.cuda.current_stream().wait_stream(copy_stream)
            x, y = nxt
            x.record_stream(torch.cuda.current_stream())
            y.record_stream(torch.cuda.current_stream())
            i += 1
            nxt = fetch(i)
            train_on(x, y)
    elif args.fix == "resident":
        dev_batches = [b.to(device) for b in host_batches]
        dev_labels = [b.to(device) for b in host_labels]

        def step():
            nonlocal i
            with nvtx("fetch"):
                x, y = dev_batches[i % 2], dev_labels[i % 2]
            i += 1
            train_on(x, y)
    else:

        def step():
            nonlocal i
            with nvtx("fetch"):
                x = host_batches[i % 2].to(device)
                y = host_labels[i % 2].to(device)
            i += 1
            train_on(x, y)

    for _ in range(3):
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
