"""Small pre-norm residual MLP over token features, with LayerNorm and GELU written out by hand.

# H200 estimate: 16 blocks, d 384, hidden 1536, batch 8 x 32 tokens. Each block's hand-written
# LayerNorm is 9 elementwise/reduction kernels (mean, sub, pow, mean, add eps, rsqrt, mul, mul,
# add) and its tanh-GELU 8 more, ~20 forward + ~40 backward kernels of ~2-3 us plus 2 small
# matmuls -> ~1050 kernels, GPU ~3-3.5 ms/step; the host spends ~8-15 us on each (Python,
# autograd, dispatch, launch) -> none ~10-14 ms/step, the GPU mostly idle between kernels.
# --fix graphs (the host's dispatch removed entirely, same kernels: the whole step, forward,
# backward and capturable AdamW, captured once as a CUDA graph and replayed; per step only the
# next batch is copied into the graph's buffers) -> ~3.5 ms -> ~3x.
"""

import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class MyLayerNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        xc = x - mean
        var = xc.pow(2).mean(-1, keepdim=True)
        return xc * torch.rsqrt(var + self.eps) * self.weight + self.bias


def gelu(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


class Block(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.norm = MyLayerNorm(dim)
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)

    def forward(self, x):
        return x + self.down(gelu(self.up(self.norm(x))))


class TokenMLP(nn.Module):
    def __init__(self, inp, dim, depth, classes):
        super().__init__()
        self.inp = nn.Linear(inp, dim)
        self.blocks = nn.ModuleList(Block(dim, 4 * dim) for _ in range(depth))
        self.norm = MyLayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.inp(x)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fix", default="none", choices=["none", "graphs"])
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
    feats, classes, depth = 64, 32, 16
    dim, batch, seq = (384, 8, 32) if cuda else (32, 2, 8)

    model = TokenMLP(feats, dim, depth, classes).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, capturable=args.fix == "graphs")
    data = [
        (
            torch.randn(batch, seq, feats, device=device),
            torch.randint(0, classes, (batch, seq), device=device),
        )
        for _ in range(8)
    ]
    state = {"i": 0}

    def loss_of(x, y):
        return F.cross_entropy(model(x).flatten(0, 1), y.flatten())

    def train_step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = loss_of(x, y)
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
            static_loss = loss_of(static_x, static_y)
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
