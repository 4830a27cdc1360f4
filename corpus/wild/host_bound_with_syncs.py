"""Small MLP training loop that logs loss.item() and times each step with torch.cuda.synchronize().

The syncs look guilty, but the GPU finishes each tiny kernel long before the host launches the
next one: the host's per-step Python/autograd/optimizer/launch overhead is the limit.
# H100 estimate: 8 layers of 512x512 at batch 512 + LayerNorm: ~90 kernels of ~3-8 us -> GPU
# ~0.5 ms/step; host ~90 ops x ~15 us + autograd/optimizer ~ 1.8 ms/step.
# --fix graphs (whole step in a CUDA graph, syncs kept) -> ~0.6 ms -> ~3x;
# --fix nosync (no .item(), no synchronize) -> the host still needs ~1.7 ms -> ~1.05x.
# Default --seconds is short (0.4) so the whole-process export stays small.
"""

import argparse
import json
import time

import torch
import torch.nn as nn


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fix", default="none", choices=["none", "graphs", "nosync"])
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
    width, batch = (512, 512) if cuda else (128, 64)
    layers = [nn.Linear(64, width)]
    for _ in range(8):
        layers += [nn.LayerNorm(width), nn.Linear(width, width), nn.GELU()]
    model = nn.Sequential(*layers, nn.Linear(width, 1)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=args.fix == "graphs")
    data = [
        (torch.randn(batch, 64, device=device), torch.randn(batch, 1, device=device))
        for _ in range(8)
    ]
    history = {"loss": [], "step_time": []}
    state = {"i": 0}

    def train_step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    run = train_step
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
            static_loss = nn.functional.mse_loss(model(static_x), static_y)
            static_loss.backward()
            opt.step()

        def run(x, y):
            static_x.copy_(x)
            static_y.copy_(y)
            graph.replay()
            return static_loss

    def step():
        t = time.perf_counter()
        x, y = data[state["i"] % len(data)]
        state["i"] += 1
        loss = run(x, y)
        if args.fix != "nosync":
            history["loss"].append(loss.item())
            if cuda:
                torch.cuda.synchronize()
            history["step_time"].append(time.perf_counter() - t)

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
