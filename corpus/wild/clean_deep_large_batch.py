"""Deep residual MLP (ResMLP-style) on precomputed embeddings, trained at a large batch in TF32.

# H200 estimate: 20 pre-norm residual blocks (d 1024, hidden 4096, nn.LayerNorm, nn.GELU), batch
# 8192, TF32 matmuls: ~8 TFLOP per step fwd+bwd -> ~25 ms, plus ~5 ms of elementwise, norm and
# AdamW kernels -> GPU ~30 ms/step in ~500 kernels (most 20-300 us). The host dispatches them
# in ~5-7 ms, well ahead of the GPU, so the queue never drains: GPU-bound.
# Suspect --fix graphs (the whole step, forward, backward and capturable AdamW, captured once as
# a CUDA graph and replayed): removes the host's dispatch, which was hidden -> <= 1.03x.
# --fix amp (bf16 autocast around the whole step: its TF32 GEMMs run in bf16 on the tensor
# cores): not yet timed (fp32_math fires on its export, predicted 1.72x: corpus/wild/README.md).
"""

import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class ResBlock(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))

    def forward(self, x):
        return x + self.mlp(self.norm(x))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fix", default="none", choices=["none", "graphs", "amp"])
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--device", default="auto")
    args = p.parse_args()
    device = torch.device(
        args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    )
    cuda = device.type == "cuda"
    if args.fix == "graphs" and not cuda:
        print(
            "RESULT "
            + json.dumps({"step_ms": None, "steps": 0, "fix": args.fix, "skipped": "needs CUDA"})
        )
        return
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    emb, classes, depth = 768, 1000, 20
    dim, batch = (1024, 8192) if cuda else (32, 64)

    model = nn.Sequential(
        nn.Linear(emb, dim),
        *[ResBlock(dim, 4 * dim) for _ in range(depth)],
        nn.LayerNorm(dim),
        nn.Linear(dim, classes),
    ).to(device)
    opt = torch.optim.AdamW(
        model.parameters(), lr=1e-4, weight_decay=0.05, capturable=args.fix == "graphs"
    )
    data = [
        (torch.randn(batch, emb, device=device), torch.randint(0, classes, (batch,), device=device))
        for _ in range(4)
    ]
    state = {"i": 0}

    def train_step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    if args.fix == "graphs":
        static_x, static_y = data[0][0].clone(), data[0][1].clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                train_step(static_x, static_y)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            static_loss = F.cross_entropy(model(static_x), static_y)
            static_loss.backward()
            opt.step()

        def step():
            x, y = data[state["i"] % len(data)]
            state["i"] += 1
            static_x.copy_(x)
            static_y.copy_(y)
            graph.replay()
    else:

        def step():
            x, y = data[state["i"] % len(data)]
            state["i"] += 1
            train_step(x, y)

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
