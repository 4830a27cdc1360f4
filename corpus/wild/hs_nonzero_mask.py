"""Linear probe on a frozen MLP backbone with a padded-label mask applied by boolean indexing.

`logits[valid]` has a data-dependent shape, so PyTorch runs nonzero and copies the count to the
host: the host waits for the whole backbone forward every step, and the numpy building of the
next batch then runs with the GPU idle.
# Measured on the H100 (corpus/wild/measured.csv): none 30.5 ms/step, --fix nosync 22.0 ms
# (1.39x). Its trace: frozen backbone forward 10.0 ms/step on the GPU, numpy batch building
# ~16 ms on the host; --fix prebuilt (8 device batches cycled, sync kept) removes that
# competing cause entirely and was measured the larger change (2.61x against 1.59x, 2026-11-24).
# --fix amp (bf16 autocast around the whole step: the fp32 GEMMs move from the SIMT FMA pipe to
# the tensor cores): not yet timed (fp32_math fires on its export: corpus/wild/README.md).
"""

import argparse
import json
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

IGNORE = -1

POOL = 8  # --fix prebuilt: device batches built before the loop and cycled


def make_batch(rng, n, d):
    x = rng.standard_normal((n, d), dtype=np.float32)
    x = np.log1p(np.abs(x)) * np.sign(x)
    x -= x.mean(axis=0, keepdims=True)
    x /= x.std(axis=0, keepdims=True) + 1e-6
    np.clip(x, -3, 3, out=x)
    y = (x[:, :8] > 0).sum(axis=1).astype(np.int64)
    y[rng.random(n) < 0.2] = IGNORE  # unlabeled rows
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
    batch, feats, width = (4096, 160, 4096) if cuda else (128, 160, 64)
    rng = np.random.default_rng(0)

    backbone = nn.Sequential(
        nn.Linear(feats, 1024),
        nn.ReLU(),
        nn.Linear(1024, width),
        nn.ReLU(),
        nn.Linear(width, width),
        nn.ReLU(),
        nn.Linear(width, width),
        nn.ReLU(),
        nn.Linear(width, width),
        nn.ReLU(),
        nn.Linear(width, 1024),
    ).to(device)
    backbone.requires_grad_(False)
    head = nn.Linear(1024, 9).to(device)
    opt = torch.optim.SGD(head.parameters(), lr=0.05, momentum=0.9)
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
        with torch.no_grad():
            feats_ = backbone(x)
        logits = head(feats_)
        if args.fix == "nosync":
            valid = y != IGNORE
            per_row = F.cross_entropy(logits, torch.where(valid, y, 0), reduction="none")
            loss = (per_row * valid).sum() / valid.sum().clamp(min=1)
        else:
            valid = y != IGNORE
            loss = F.cross_entropy(logits[valid], y[valid])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        state["i"] += 1
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
