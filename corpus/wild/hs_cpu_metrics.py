"""Classifier training that computes accuracy per step in numpy from `.cpu().numpy()` predictions.

The DtoH copy of the predictions is queued after the optimizer step, so the host waits for the
whole step; the numpy building of the next batch then runs with the GPU idle.
# Measured on the H100 (corpus/wild/measured.csv): none 34.1 ms/step, --fix nosync 23.9 ms
# (1.43x). Its trace: GPU 14.2 ms/step, host work between the sync and the next launches
# ~24 ms, more than the GPU work it could hide behind; --fix prebuilt (8 device batches cycled,
# sync kept) removes that competing cause entirely and was measured the larger change (2.12x
# against 1.65x, 2026-11-24). nosync reads the device-side count only every 100 steps.
# --fix amp (bf16 autocast around the whole step: the fp32 GEMMs move from the SIMT FMA pipe to
# the tensor cores): not yet timed (fp32_math fires on its export: corpus/wild/README.md).
"""

import argparse
import json
import time
from contextlib import nullcontext

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

POOL = 8  # --fix prebuilt: device batches built before the loop and cycled


def make_batch(rng, n, d):
    x = rng.standard_normal((n, d), dtype=np.float32)
    x = np.log1p(np.abs(x)) * np.sign(x)
    x -= x.mean(axis=0, keepdims=True)
    x /= x.std(axis=0, keepdims=True) + 1e-6
    np.clip(x, -3, 3, out=x)
    y = (x[:, :8] > 0).sum(axis=1).astype(np.int64)
    return x, y


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fix", default="none", choices=["none", "nosync", "prebuilt", "amp"])
    p.add_argument("--seconds", type=float, default=1.5)
    p.add_argument("--device", default="auto")
    args = p.parse_args()
    device = torch.device(
        args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    )
    torch.manual_seed(0)
    cuda = device.type == "cuda"
    batch, feats, width = (2048, 320, 4096) if cuda else (128, 320, 64)
    rng = np.random.default_rng(0)

    model = nn.Sequential(
        nn.Linear(feats, width),
        nn.ReLU(),
        nn.Linear(width, width),
        nn.ReLU(),
        nn.Linear(width, width),
        nn.ReLU(),
        nn.Linear(width, width),
        nn.ReLU(),
        nn.Linear(width, 9),
    ).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    stats = {"correct": 0, "seen": 0, "i": 0}
    correct_dev = torch.zeros((), device=device, dtype=torch.int64)

    def nvtx(name):
        return torch.cuda.nvtx.range(name) if cuda else nullcontext()

    def to_device(x, y):
        x, y = torch.from_numpy(x), torch.from_numpy(y)
        if cuda:
            x, y = x.pin_memory(), y.pin_memory()
        return x.to(device, non_blocking=True), y.to(device, non_blocking=True), y.numpy()

    prebuilt = args.fix == "prebuilt"
    pool = [to_device(*make_batch(rng, batch, feats)) for _ in range(POOL if prebuilt else 0)]

    def next_batch():
        """The pool's next batch for --fix prebuilt, else a fresh numpy batch."""
        if prebuilt:
            return pool[stats["i"] % POOL]
        return to_device(*make_batch(rng, batch, feats))

    nxt = next_batch()

    def step():
        nonlocal nxt
        x, y, y_np = nxt
        with nvtx("forward"):
            logits = model(x)
            loss = F.cross_entropy(logits, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        stats["i"] += 1
        stats["seen"] += len(y_np)
        if args.fix == "nosync":
            correct_dev.add_((logits.detach().argmax(1) == y).sum())
            if stats["i"] % 100 == 0:
                stats["correct"] = int(correct_dev.item())
        else:
            preds = logits.detach().argmax(1).cpu().numpy()
            stats["correct"] += int((preds == y_np).sum())
        with nvtx("batch"):
            nxt = next_batch()

    if args.fix == "amp":  # the whole step under bf16 autocast: its GEMMs on the tensor cores
        fp32_step = step

        def step():
            with torch.autocast(device.type, dtype=torch.bfloat16):
                return fp32_step()

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
