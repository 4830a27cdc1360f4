"""Transformer feed-forward blocks with LayerNorm and GELU written out by hand, trained under
bf16 autocast on large token batches.

The norm and the activation are plain tensor expressions copied from a paper's pseudo-code;
eager autograd runs every one of their ops as its own kernel, forward and backward.
# H200 estimate: 8 blocks of width 1024 (hidden 4096) on 16 x 512 = 8192 tokens. GEMMs 412
# GFLOP a block (~0.65 ms in bf16). The hand-written LayerNorm runs on the fp32 residual stream
# (33.5 MB a pass): ~12 passes forward, ~24 backward -> 1.2 GB; the erf GELU on the bf16 hidden
# activation (67 MB a pass) ~12 forward, ~20 backward -> 2.1 GB: ~0.9 ms a block at ~3.6 TB/s.
# The host issues ~50 kernels a block, far under the GPU's time -> none ~1.6 ms a block,
# ~13.5 ms/step with AdamW.
# --fix fused (nn.functional.layer_norm and F.gelu: one kernel forward, one or two backward,
# each moving its tensor once: 0.5 GB, ~0.15 ms a block) -> ~0.85 ms a block, ~7 ms/step (~1.9x).
# It is the removal: the same GEMMs, each chain's bytes moved once.
# --fix compile (torch.compile of the two functions: Inductor fuses each into about one kernel
# each way; compiled in the warm-up) -> about the same as fused.
# --fix graphs (the host's dispatch removed, the unfused chains kept: the whole step, forward
# under autocast, backward and a capturable AdamW, captured once as a CUDA graph over static
# copies of (x, y) and replayed; the same ~50 kernels a block, each chain still moving its
# tensor ~12-24 times; per step two 33.5 MB copies into the static buffers are added, ~0.04 ms)
# -> as none where the GPU is the limit (~1.0x), faster only by the share of the step the host's
# issue holds the GPU idle: the launch_bound counterfactual, not yet timed (corpus/wild/README.md).
"""

import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def layer_norm(x, weight, bias, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


def gelu(x):
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


class Block(nn.Module):
    def __init__(self, dim, hidden, norm, act):
        super().__init__()
        self.w = nn.Parameter(torch.ones(dim))
        self.b = nn.Parameter(torch.zeros(dim))
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)
        self.norm, self.act = norm, act

    def forward(self, x):
        return x + self.down(self.act(self.up(self.norm(x, self.w, self.b))))


def graphed(model, opt, data, device):
    """The step as one CUDA graph over static copies of a batch, after a few eager steps on a
    side stream (the PyTorch docs' whole-network recipe). Autocast's weight-cast cache is off, as
    capture requires; each weight is cast once a step either way (each is used once)."""
    sx, sy = data[0][0].clone(), data[0][1].clone()

    def train_step():
        with torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=False):
            loss = F.mse_loss(model(sx).float(), sy)
        loss.backward()
        opt.step()

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            train_step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        train_step()
    state = {"i": 0}

    def step():
        x, y = data[state["i"] % len(data)]
        state["i"] += 1
        sx.copy_(x)
        sy.copy_(y)
        graph.replay()

    return step


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fix", default="none", choices=["none", "fused", "compile", "graphs"])
    p.add_argument("--seconds", type=float, default=1.5)
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
    dim, depth, tokens = (1024, 8, 8192) if cuda else (32, 2, 64)
    norm, act = layer_norm, gelu
    if args.fix == "fused":
        norm = lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)  # noqa: E731
        act = F.gelu
    elif args.fix == "compile":
        # on a CPU-only box, skip inductor's C++ codegen (slow to build); the traced graphs are the same
        backend = "inductor" if cuda else "aot_eager"
        norm, act = torch.compile(layer_norm, backend=backend), torch.compile(gelu, backend=backend)
    model = nn.Sequential(*[Block(dim, 4 * dim, norm, act) for _ in range(depth)]).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, capturable=args.fix == "graphs")
    data = [
        (torch.randn(tokens, dim, device=device), torch.randn(tokens, dim, device=device))
        for _ in range(4)
    ]
    state = {"i": 0}

    def step():
        x, y = data[state["i"] % len(data)]
        state["i"] += 1
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = F.mse_loss(model(x).float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    if args.fix == "graphs":
        step = graphed(model, opt, data, device)

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
