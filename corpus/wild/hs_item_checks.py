"""MLP regression with defensive per-step checks: loss.item(), a NaN check and per-group grad norms.

Each check copies a value to the host, so the host waits for the GPU every step, and the numpy
feature building for the next batch (which could run while the GPU computes) runs with the
GPU idle instead.
# Measured on the H100 (corpus/wild/measured.csv): none 37.5 ms/step, --fix nosync 19.6 ms
# (1.91x). Its own trace shows why the margin is large but the label is fragile: the GPU needs
# 14.2 ms/step, the numpy batch building ~26 ms, more than the GPU work it could hide behind.
# --fix prebuilt (8 device batches cycled, syncs kept) removes that competing cause entirely and
# was measured the larger change (2.20x against nosync's 1.57x, 2026-11-24), hence data_stall.
# Both switches are full removals: nosync reads the device-side values only every 100 steps.
# --fix amp (bf16 autocast around the whole step: the fp32 GEMMs move from the SIMT FMA pipe to
# the tensor cores): not yet timed (fp32_math fires on its export: corpus/wild/README.md).
"""

import argparse
import json
import math
import time

import numpy as np
import torch
import torch.nn as nn

POOL = 8  # --fix prebuilt: device batches built before the loop and cycled


def make_batch(rng, n, d):
    x = rng.standard_normal((n, d), dtype=np.float32)
    x = np.log1p(np.abs(x)) * np.sign(x)
    x -= x.mean(axis=0, keepdims=True)
    x /= x.std(axis=0, keepdims=True) + 1e-6
    np.clip(x, -3, 3, out=x)
    y = x[:, :16].sum(axis=1, keepdims=True) * 0.25
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
        nn.Linear(width, 1),
    ).to(device)
    decay = [p for n, p in model.named_parameters() if n.endswith("weight")]
    no_decay = [p for n, p in model.named_parameters() if n.endswith("bias")]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
        lr=1e-4,
    )
    log = {"loss": 0.0, "bad_steps": 0, "norms": []}
    dev_log = {
        "loss": torch.zeros((), device=device),
        "bad": torch.zeros((), device=device, dtype=torch.int32),
    }
    state = {"i": 0}

    def to_device(x, y):
        x, y = torch.from_numpy(x), torch.from_numpy(y)
        if cuda:
            x, y = x.pin_memory(), y.pin_memory()
        return x.to(device, non_blocking=True), y.to(device, non_blocking=True)

    prebuilt = args.fix == "prebuilt"
    pool = [to_device(*make_batch(rng, batch, feats)) for _ in range(POOL if prebuilt else 0)]

    def next_batch():
        """The pool's next batch for --fix prebuilt, else a fresh numpy batch."""
        if prebuilt:
            return pool[state["i"] % POOL]
        return to_device(*make_batch(rng, batch, feats))

    nxt = next_batch()

    def step():
        nonlocal nxt
        x, y = nxt
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        state["i"] += 1
        if args.fix == "nosync":
            dev_log["loss"] += loss.detach()
            dev_log["bad"] += (~torch.isfinite(loss)).int()
            norms = torch.stack(
                [
                    torch.linalg.vector_norm(torch.stack([q.grad.norm() for q in g["params"]]))
                    for g in opt.param_groups
                ]
            )
            if state["i"] % 100 == 0:
                log["loss"] += dev_log["loss"].item()
                log["bad_steps"] += int(dev_log["bad"].item())
                log["norms"].append(norms.tolist())
                dev_log["loss"].zero_()
        else:
            log["loss"] += loss.item()
            if torch.isnan(loss):
                log["bad_steps"] += 1
            log["norms"].append(
                [
                    math.sqrt(sum(q.grad.norm().item() ** 2 for q in g["params"]))
                    for g in opt.param_groups
                ]
            )
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
