"""Multi-task classifier (a shared MLP trunk and one small logistic head per task, the heads kept
as per-task parameters in ParameterLists and stacked each step) trained with gradient clipping
and a guard that skips the update when the gradient norm is not finite.

`if not torch.isfinite(total_norm)` turns a GPU tensor into a Python bool, so the host waits for
the backward and the clipping to finish before it even starts the optimizer. AdamW with
foreach=False (chosen to save memory) then issues its per-parameter updates one tensor at a time:
over 200 parameters that dispatch takes several ms, and the GPU idles through it, because
nothing else is queued behind the read.
# H200 estimate: GPU ~14 ms/step (fp32, batch 3072, 512 -> 3 x 4096 trunk fwd+bwd; the update
# ~1 ms of memory-bound kernels); host ~2 ms of forward/backward/clip dispatch + ~8-10 ms of
# per-parameter AdamW (200 tensors x ~8 launches, amsgrad) -> none ~22-24 ms (the optimizer's
# dispatch exposed after the read); without the read the loop is GPU-bound (host ~11-12 ms,
# masking included, under the GPU's ~14 ms).
# --fix nosync (the finiteness test folded into the update on the GPU, as GradScaler's found_inf
# is: on a non-finite norm every gradient is zeroed with masked_fill_, one small launch per
# parameter; the skipped steps counted on the GPU and read every 100 steps; the same AdamW): the
# optimizer's dispatch runs under the GPU's next step -> ~14.5 ms (~1.6x). It removes the
# per-step read entirely.
"""

import argparse
import json
import time

import torch
import torch.nn as nn


class MultiTaskNet(nn.Module):
    def __init__(self, feats, width, tasks):
        super().__init__()
        self.trunk = nn.Sequential(
            nn.Linear(feats, width),
            nn.GELU(),
            nn.Linear(width, width),
            nn.GELU(),
            nn.Linear(width, width),
            nn.GELU(),
            nn.LayerNorm(width),
        )
        self.task_w = nn.ParameterList(
            nn.Parameter(torch.randn(width) * 0.01) for _ in range(tasks)
        )
        self.task_b = nn.ParameterList(nn.Parameter(torch.zeros(())) for _ in range(tasks))

    def forward(self, x):
        h = self.trunk(x)
        return h @ torch.stack(list(self.task_w)).T + torch.stack(list(self.task_b))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fix", default="none", choices=["none", "nosync"])
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--device", default="auto")
    args = p.parse_args()
    device = torch.device(
        args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    )
    torch.manual_seed(0)
    cuda = device.type == "cuda"
    batch, feats, width = (3072, 512, 4096) if cuda else (32, 16, 32)
    tasks = 96
    model = MultiTaskNet(feats, width, tasks).to(device)
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01, amsgrad=True, foreach=False)
    data = [
        (
            torch.randn(batch, feats, device=device),
            (torch.rand(batch, tasks, device=device) < 0.1).float(),
        )
        for _ in range(4)
    ]
    skipped = torch.zeros((), device=device)  # --fix nosync: non-finite steps, counted on GPU
    state = {"i": 0, "skipped": 0}

    def step():
        x, y = data[state["i"] % len(data)]
        state["i"] += 1
        loss = nn.functional.binary_cross_entropy_with_logits(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        total_norm = torch.nn.utils.clip_grad_norm_(params, max_norm=1.0)
        if args.fix == "nosync":
            finite = torch.isfinite(total_norm)
            skipped.add_(~finite)
            for q in params:  # a non-finite step becomes a zero-gradient step
                q.grad.masked_fill_(~finite, 0.0)
            opt.step()
            if state["i"] % 100 == 0:
                state["skipped"] = int(skipped.item())
        elif not torch.isfinite(total_norm):
            state["skipped"] += 1
        else:
            opt.step()

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
