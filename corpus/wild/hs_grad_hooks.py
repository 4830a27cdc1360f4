"""MLP training that watches its gradients from tensor hooks: each parameter's gradient norm and
largest magnitude are read with .item() as soon as backward produces them.

The hooks run inside backward, on PyTorch's autograd thread, while the main thread waits for
the backward to finish. Each .item() makes that thread wait until the GPU has run everything
queued so far, so the backward is issued layer by layer with the GPU idle in between (the next
layer's launches, the norm kernels, the copy back). The main thread itself never syncs: a
reading of the main thread alone sees a host that is busy (waiting for backward) and no syncs.
# H100 estimate: GPU ~12 ms/step (24 x 1024-wide fp32 layers, batch 4096); 96 reads per step in
# backward at ~40 us of GPU idle each -> none ~16 ms.
# --fix nosync (the same statistics computed on the GPU into a buffer, read every 100 steps):
# ~12 ms (~1.3x); it removes the syncs entirely and is the label's fix.
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
    p.add_argument("--fix", default="none", choices=["none", "nosync", "amp"])
    p.add_argument("--seconds", type=float, default=1.5)
    p.add_argument("--device", default="auto")
    args = p.parse_args()
    device = torch.device(
        args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    )
    torch.manual_seed(0)
    cuda = device.type == "cuda"
    depth, width, batch = (24, 1024, 4096) if cuda else (4, 64, 64)
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.GELU()]
    model = nn.Sequential(*layers, nn.Linear(width, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    names = [n for n, _ in model.named_parameters()]
    history = {n: [] for n in names}  # --fix none: (norm, max) per step, read at once
    buffer = torch.zeros(100, len(names), 2, device=device)  # --fix nosync: kept on the GPU
    state = {"i": 0}

    def watch(idx, name):
        def hook(grad):
            if args.fix == "nosync":
                buffer[state["i"] % 100, idx, 0] = grad.norm()
                buffer[state["i"] % 100, idx, 1] = grad.abs().amax()
            else:
                history[name].append((grad.norm().item(), grad.abs().max().item()))
            return grad

        return hook

    for idx, (name, q) in enumerate(model.named_parameters()):
        q.register_hook(watch(idx, name))
    x = torch.randn(batch, width, device=device)
    y = torch.randn(batch, 1, device=device)

    def step():
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        state["i"] += 1
        if args.fix == "nosync" and state["i"] % 100 == 0:
            snap = buffer.tolist()  # the statistics of the last 100 steps, read once
            for idx, name in enumerate(names):
                history[name].extend(tuple(s[idx]) for s in snap)

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
