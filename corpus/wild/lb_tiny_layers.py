"""Deep stack of tiny Linear+ReLU layers trained with per-parameter (non-foreach) Adam.

# H100 estimate: 48 layers, width 128, batch 32: ~100 fwd + ~200 bwd + ~1000 Adam kernels of
# ~2-4 us each -> GPU ~3 ms/step, but each costs ~10-20 us of Python/dispatch/launch on the host
# -> none ~15-20 ms/step (GPU mostly idle between kernels).
# --fix graphs: the whole step (fwd, bwd, capturable Adam) captured once and replayed -> ~3 ms -> ~5x.
#   Capturable Adam keeps its step count and bias corrections on the GPU: about twice the
#   kernels of none (2,498 a replay against 1,174 a step, measured on an H200), so it is a fix,
#   not the launches' removal.
# --fix replay: the launches removed and nothing else: the same kernels as none (Adam's update
#   written out as torch.optim.Adam(foreach=False) runs it, 7 kernels a parameter, its bias
#   corrections those of the capture's step, since a graph cannot take new Python floats),
#   captured once and replayed.
# Default --seconds is short (0.4) so the whole-process export stays small.
"""

import argparse
import json
import time

import torch
import torch.nn as nn


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fix", default="none", choices=["none", "graphs", "replay"])
    p.add_argument("--seconds", type=float, default=0.4)
    p.add_argument("--device", default="auto")
    args = p.parse_args()
    device = torch.device(
        args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    )
    cuda = device.type == "cuda"
    if args.fix in ("graphs", "replay") and not cuda:
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

    if args.fix == "replay":
        step = _graphed(_adam_written_out(model, loss_fn), data, state)
    elif args.fix == "graphs":
        # zero_grad(set_to_none) inside the capture: no kernel, the grads left to backward
        step = _graphed(train_step, data, state)
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


def _adam_written_out(model, loss_fn, lr=1e-3, betas=(0.9, 0.999), eps=1e-8):
    """``--fix replay``'s step: forward, backward and Adam's single-tensor update, with the
    kernels torch.optim.Adam(foreach=False, capturable=False) launches."""
    params = list(model.parameters())
    moments = [(torch.zeros_like(p), torch.zeros_like(p)) for p in params]
    beta1, beta2 = betas
    t = {"step": 0}

    def update():
        # Adam's per-parameter kernels: lerp_, mul_, addcmul_, sqrt, div, add_, addcdiv_ (the
        # step count and corrections on the host)
        t["step"] += 1
        bc1, bc2 = 1 - beta1 ** t["step"], 1 - beta2 ** t["step"]
        for p, (m, v) in zip(params, moments, strict=True):
            g = p.grad
            m.lerp_(g, 1 - beta1)
            v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
            denom = (v.sqrt() / bc2**0.5).add_(eps)
            p.addcdiv_(m, denom, value=-lr / bc1)

    def train(x, y):
        for p in params:
            p.grad = None
        loss = loss_fn(model(x), y)
        loss.backward()
        with torch.no_grad():  # as an optimizer's step is
            update()
        return loss

    return train


def _graphed(train, data, state):
    """``train(x, y)`` (it sets the grads to None first) warmed up on a side stream, captured
    once as a CUDA graph over static inputs; the step returned copies the next batch in and
    replays it."""
    static_x, static_y = data[0][0].clone(), data[0][1].clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            train(static_x, static_y)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        train(static_x, static_y)

    def step():
        x, y = data[state["i"] % len(data)]
        state["i"] += 1
        static_x.copy_(x)
        static_y.copy_(y)
        graph.replay()

    return step


if __name__ == "__main__":
    main()
