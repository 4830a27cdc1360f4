"""Sequence model fed with `.to(device, non_blocking=True)` from ordinary (unpinned) tensors.

non_blocking does nothing useful for pageable memory: the copy is staged by the driver and the
host waits for it (and for the compute queued before it on the stream).
# H100 estimate: 64 x 512 x 1024 fp32 = 128 MB per batch; pageable H2D ~8-12 GB/s -> ~11-16 ms,
# serial with GPU compute ~8 ms (fp32 GEMMs, ~0.35 TFLOP) -> none ~20-24 ms.
# --fix pin: pin the host tensors once; the same non_blocking copies run at ~40 GB/s (~3 ms)
# without blocking the host -> ~11 ms -> ~2x.
# --fix resident (the copies removed entirely: both batches moved to the GPU before the loop; in
# the loop .to(device) of a device tensor is a no-op) -> the GPU's ~8 ms.
# --fix amp (bf16 autocast around the whole step: the fp32 GEMMs move from the SIMT FMA pipe to
# the tensor cores): not yet timed (fp32_math fires on its export: corpus/wild/README.md).
"""

import argparse
import json
import time

import torch
import torch.nn as nn


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fix", default="none", choices=["none", "pin", "resident", "amp"])
    p.add_argument("--seconds", type=float, default=1.5)
    p.add_argument("--device", default="auto")
    args = p.parse_args()
    device = torch.device(
        args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    )
    torch.manual_seed(0)
    cuda = device.type == "cuda"
    batch, seq, dim, hidden = (64, 512, 1024, 1024) if cuda else (4, 16, 64, 64)

    inputs = [torch.randn(batch, seq, dim) for _ in range(2)]
    targets = [torch.randn(batch, seq, 256) for _ in range(2)]
    if args.fix == "pin" and cuda:
        inputs = [t.pin_memory() for t in inputs]
        targets = [t.pin_memory() for t in targets]
    if args.fix == "resident":
        inputs = [t.to(device) for t in inputs]
        targets = [t.to(device) for t in targets]

    model = nn.Sequential(
        nn.Linear(dim, hidden),
        nn.GELU(),
        nn.Linear(hidden, hidden),
        nn.GELU(),
        nn.Linear(hidden, 256),
    ).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    state = {"i": 0}

    def step():
        k = state["i"] % 2
        state["i"] += 1
        x = inputs[k].to(device, non_blocking=True)
        y = targets[k].to(device, non_blocking=True)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

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
