"""GPU-bound MLP training that logs loss.item() only every 100 steps.

# H100 estimate: GPU ~13 ms/step (fp32, batch 2048, 3 layers of 4096x4096 fwd+bwd: ~0.65
# TFLOP), host ~1 ms/step; one sync per 100 steps costs ~1 ms of idle GPU -> < 0.1%.
# Suspect --fix noitem (no .item() at all): <= 1.01x.
# --fix amp (bf16 autocast around the whole step: the fp32 GEMMs move to the tensor
# cores): ~5.1x (timed on an H200 under a wrapper doing the same: corpus/wild/README.md).
# --fix bf16 (the model and the batches in bf16, no autocast: the same ops and launches as none,
# every GEMM on the tensor cores, no casts): the fp32 math's removal, where amp adds its casts.
"""

import argparse
import json
import time

import torch
import torch.nn as nn


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fix", default="none", choices=["none", "noitem", "amp", "bf16"])
    p.add_argument("--seconds", type=float, default=1.5)
    p.add_argument("--device", default="auto")
    args = p.parse_args()
    device = torch.device(
        args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    )
    torch.manual_seed(0)
    cuda = device.type == "cuda"
    batch, width = (2048, 4096) if cuda else (64, 64)
    dtype = torch.bfloat16 if args.fix == "bf16" else torch.float32  # bf16: no casts at all

    model = nn.Sequential(
        nn.Linear(1024, width),
        nn.GELU(),
        nn.Linear(width, width),
        nn.GELU(),
        nn.Linear(width, width),
        nn.GELU(),
        nn.Linear(width, width),
        nn.GELU(),
        nn.Linear(width, 10),
    ).to(device, dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    data = [
        (
            torch.randn(batch, 1024, device=device, dtype=dtype),
            torch.randint(0, 10, (batch,), device=device),
        )
        for _ in range(4)
    ]
    state = {"i": 0}

    def step():
        x, y = data[state["i"] % len(data)]
        state["i"] += 1
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if args.fix != "noitem" and state["i"] % 100 == 0:
            print(f"step {state['i']} loss {loss.item():.4f}")

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
