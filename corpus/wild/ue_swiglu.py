"""LLaMA-style feed-forward blocks (RMSNorm, SwiGLU) written from the paper's equations, with
the model in bf16.
# H200 estimate: 8 blocks of width 768, SwiGLU hidden 2048, 16 x 1024 = 16384 tokens. GEMMs 464
# GFLOP a block (~0.7 ms). The hand-written SwiGLU (gate * sigmoid(gate) * up) moves its 67 MB
# hidden tensor ~8 times forward and ~16 backward (1.6 GB); the upcast RMSNorm (pow, mean, add,
# rsqrt, mul, cast, mul) ~54 bf16-sized passes of its 25 MB (1.4 GB): ~0.8 ms a block ->
# none ~1.5 ms a block, ~12.5 ms/step with AdamW; GPU-bound (~40 kernels a block).
# --fix fused (F.rms_norm, a fused kernel; F.silu(gate) * up: two kernels instead of three) ->
# ~0.4 GB less than none is left unfused, ~1.0 ms a block (~1.5x).
# --fix compile (torch.compile of the two functions: one kernel each forward, about one each
# backward; 0.7 GB a block) -> ~0.9 ms a block (~1.7x). It is the removal: each chain's bytes
# moved once, the GEMMs unchanged.
# --fix graphs (the host's dispatch removed, the unfused chains kept: the whole step, forward,
# backward and a capturable AdamW, captured once as a CUDA graph over static copies of (x, y)
# and replayed; the same ~40 kernels a block, each chain still moving its tensors as none does;
# per step two 25 MB copies into the static buffers are added, ~0.03 ms) -> as none where the GPU
# is the limit (~1.0x), faster only by the share of the step the host's issue holds the GPU
# idle: the launch_bound counterfactual, not yet timed (corpus/wild/README.md).
"""

import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def rms_norm(x, weight, eps=1e-6):
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return xf.type_as(x) * weight


def swiglu(gate, up):
    return gate * torch.sigmoid(gate) * up


def fused_norm(x, weight, eps=1e-6):
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def fused_swiglu(gate, up):
    return F.silu(gate) * up


class FeedForward(nn.Module):
    def __init__(self, dim, hidden, norm, act):
        super().__init__()
        self.norm_weight = nn.Parameter(torch.ones(dim))
        self.w_gate = nn.Linear(dim, hidden, bias=False)
        self.w_up = nn.Linear(dim, hidden, bias=False)
        self.w_down = nn.Linear(hidden, dim, bias=False)
        self.norm, self.act = norm, act

    def forward(self, x):
        h = self.norm(x, self.norm_weight)
        return x + self.w_down(self.act(self.w_gate(h), self.w_up(h)))


def graphed(model, opt, data):
    """The step as one CUDA graph over static copies of a batch, after a few eager steps on a
    side stream (the PyTorch docs' whole-network recipe)."""
    sx, sy = data[0][0].clone(), data[0][1].clone()

    def train_step():
        F.mse_loss(model(sx), sy).backward()
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
    dim, hidden, depth, tokens = (768, 2048, 8, 16384) if cuda else (32, 64, 2, 64)
    # on a CPU-only box, skip inductor's C++ codegen (slow to build); the traced graphs are the same
    backend = "inductor" if cuda else "aot_eager"
    norm, act = {
        "none": (rms_norm, swiglu),
        "graphs": (rms_norm, swiglu),
        "fused": (fused_norm, fused_swiglu),
        "compile": (
            torch.compile(rms_norm, backend=backend),
            torch.compile(swiglu, backend=backend),
        ),
    }[args.fix]
    model = nn.Sequential(*[FeedForward(dim, hidden, norm, act) for _ in range(depth)])
    model = model.to(device, torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, capturable=args.fix == "graphs")
    data = [
        (
            torch.randn(tokens, dim, device=device, dtype=torch.bfloat16),
            torch.randn(tokens, dim, device=device, dtype=torch.bfloat16),
        )
        for _ in range(4)
    ]
    state = {"i": 0}

    def step():
        x, y = data[state["i"] % len(data)]
        state["i"] += 1
        loss = F.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    if args.fix == "graphs":
        step = graphed(model, opt, data)

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
