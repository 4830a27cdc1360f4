"""GRU sequence classifier unrolled by hand: a Python loop over 128 time steps of nn.GRUCell.

# H100 estimate: per time step ~3 fwd + ~6 bwd kernels of ~3 us -> GPU ~4 ms/step, host ~10-15 us
# per op -> ~15-20 ms/step -> none is launch-bound.
# --fix fused: nn.GRU over the whole sequence (cuDNN, a handful of kernels) -> ~1-2 ms -> ~10x.
# --fix graphs (the host's dispatch removed entirely, same kernels: the whole step, forward,
# backward and capturable Adam, captured once as a CUDA graph and replayed) -> the GPU's ~4 ms.
# Default --seconds is short (0.4) so the whole-process export stays small.
"""

import argparse
import json
import time
from contextlib import nullcontext

import torch
import torch.nn as nn
import torch.nn.functional as F


class Classifier(nn.Module):
    def __init__(self, inp, hidden, classes, fused):
        super().__init__()
        self.fused = fused
        self.hidden = hidden
        self.rnn = nn.GRU(inp, hidden, batch_first=True) if fused else nn.GRUCell(inp, hidden)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        if self.fused:
            _, h = self.rnn(x)
            return self.head(h[-1])
        h = x.new_zeros(x.shape[0], self.hidden)
        for t in range(x.shape[1]):
            h = self.rnn(x[:, t], h)
        return self.head(h)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fix", default="none", choices=["none", "fused", "graphs"])
    p.add_argument("--seconds", type=float, default=0.4)
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
    batch, steps_t, inp, hidden = (32, 128, 64, 128) if cuda else (8, 16, 16, 32)

    model = Classifier(inp, hidden, 5, args.fix == "fused").to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=args.fix == "graphs")
    data = [
        (
            torch.randn(batch, steps_t, inp, device=device),
            torch.randint(0, 5, (batch,), device=device),
        )
        for _ in range(4)
    ]
    state = {"i": 0}

    if args.fix == "graphs":
        static_x, static_y = data[0][0].clone(), data[0][1].clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                opt.zero_grad(set_to_none=True)
                F.cross_entropy(model(static_x), static_y).backward()
                opt.step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            F.cross_entropy(model(static_x), static_y).backward()
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
            with torch.cuda.nvtx.range("forward") if cuda else nullcontext():
                loss = F.cross_entropy(model(x), y)
            with torch.cuda.nvtx.range("backward") if cuda else nullcontext():
                opt.zero_grad(set_to_none=True)
                loss.backward()
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
