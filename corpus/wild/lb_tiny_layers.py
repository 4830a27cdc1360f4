"""Deep stack of tiny Linear+ReLU layers trained with per-parameter (non-foreach) Adam.

# H100 estimate: 48 layers, width 128, batch 32: ~100 fwd + ~200 bwd + ~1000 Adam kernels of
# ~2-4 us each -> GPU ~3 ms/step, but each costs ~10-20 us of Python/dispatch/launch on the host
# -> none ~15-20 ms/step (GPU mostly idle between kernels).
# --fix graphs: the whole step (fwd, bwd, capturable Adam) captured once and replayed -> ~3 ms -> ~5x.
# Default --seconds is short (0.4) so the whole-process export stays small.
"""

import argparse
import json
import time

import torch
import torch.nn as nn


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fix", default="none", choices=["none", "graphs"])
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
    depth, width, batch = 48, 128, 32

    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(width, 1)).to(device)
    opt = torch.optim.Adam(
        model.parameters(), lr=1e-3, foreach=False, capturable=args.fix == "graphs"
    )
    loss_fn = nn.MSELoss()
    data = [
        (torch.randn(batch, width, device=device), torch.randn(batch, 1, device=device))
        for _ in range(8)
    ]
    state = {"i": 0}

    def train_step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
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
            static_loss = loss_fn(model(static_x), static_y)
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
