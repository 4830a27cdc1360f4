"""Tabular regression: a wide MLP on 512 dense features, trained in plain fp32.

Nothing about precision is set anywhere, so PyTorch's defaults apply: fp32 tensors, fp32
matmuls ("highest" precision, TF32 off).
# H200 estimate: batch 8192, 512 -> 4096 -> 4096 -> 4096 -> 1 (35.7 M weights): the GEMMs are
# 6 * 35.7M * 8192 = 1.75 TFLOP a step, ~32 ms on the FMA units at ~55 TFLOP/s; ReLUs, loss
# and AdamW ~1 ms -> none ~33 ms/step, the GPU busy the whole time.
# --fix tf32 (torch.set_float32_matmul_precision("high"): the same GEMMs on the tensor cores in
# TF32, ~395 TFLOP/s) -> ~4.4 + 1 ms -> ~6x; the class is still there at half strength.
# --fix amp (bf16 autocast around the forward: the GEMMs at the bf16 tensor-core rate, ~700
# TFLOP/s, plus ~0.1 ms of weight casts; the optimizer stays fp32): ~2.5 + 0.8 ms -> ~10x.
# It is also the removal: the same GEMMs at bf16, everything else in the script unchanged.
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
        torch.set_float32_matmul_precision("high")
    feats, width, batch = (512, 4096, 8192) if cuda else (32, 64, 64)

    model = nn.Sequential(
        nn.Linear(feats, width), nn.ReLU(),
        nn.Linear(width, width), nn.ReLU(),
        nn.Linear(width, width), nn.ReLU(),
        nn.Linear(width, 1),
    ).to(device)  # fmt: skip
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    data = [
        (torch.randn(batch, feats, device=device), torch.randn(batch, 1, device=device))
        for _ in range(4)
    ]

    def autocast():
        if args.fix != "amp":
            return nullcontext()
        return torch.autocast(device.type, dtype=torch.bfloat16)

    state = {"i": 0}

    def step():
        x, y = data[state["i"] % len(data)]
        state["i"] += 1
        with autocast():
            loss = F.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(5):
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
