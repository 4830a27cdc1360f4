"""Actor-critic (PPO-style) update on a batch of rollout samples, with a hand-written SGD step.

# H200 estimate: actor and critic are 16 residual blocks each (width 256, LayerNorm, tanh),
# batch 128, 201 parameter tensors. Forward + backward ~600 kernels; the hand-written update
# (weight decay, momentum buffer, parameter update: 4 kernels per parameter) ~800 more, all of
# ~2-3 us -> GPU ~3.5 ms/step; the host spends ~5-7 us on each update op and ~8-15 us on each
# forward/backward kernel (Python, autograd, dispatch, launch) -> none ~10-15 ms/step, the GPU
# mostly idle between kernels.
# --fix foreach (torch.optim.SGD(foreach=True), the same update as a handful of multi-tensor
# kernels; forward and backward still dispatched op by op, host-bound) -> ~5-7 ms -> ~2x.
# --fix graphs (the host's dispatch removed entirely, same kernels: the whole step, forward,
# backward and the hand-written update, captured once as a CUDA graph and replayed; per step
# only the next rollout batch is copied into the graph's buffers) -> ~3.5 ms -> ~3-4x.
"""

import argparse
import json
import math
import time
from contextlib import nullcontext

import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc1 = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)
        self.fc2 = nn.Linear(width, width)

    def forward(self, x):
        return x + self.fc2(torch.tanh(self.norm(self.fc1(x))))


def mlp(inp, width, out, depth):
    return nn.Sequential(
        nn.Linear(inp, width), *[Block(width) for _ in range(depth)], nn.Linear(width, out)
    )


class ActorCritic(nn.Module):
    def __init__(self, obs_dim, act_dim, width=256, depth=16):
        super().__init__()
        self.actor = mlp(obs_dim, width, act_dim, depth)
        self.critic = mlp(obs_dim, width, 1, depth)
        self.log_std = nn.Parameter(torch.zeros(act_dim))

    def loss(self, obs, act, adv, ret):
        mu = self.actor(obs)
        std = self.log_std.exp()
        logp = (-0.5 * ((act - mu) / std) ** 2 - self.log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        value = self.critic(obs).squeeze(-1)
        entropy = (self.log_std + 0.5 * math.log(2 * math.pi * math.e)).sum()
        return -(logp * adv).mean() + 0.5 * (value - ret).pow(2).mean() - 0.01 * entropy


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fix", default="none", choices=["none", "foreach", "graphs"])
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
    obs_dim, act_dim = 48, 8
    width, batch = (256, 128) if cuda else (32, 16)
    lr, momentum, wd = 1e-3, 0.9, 1e-4

    model = ActorCritic(obs_dim, act_dim, width).to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    bufs = {p: torch.zeros_like(p) for p in params}
    opt = None
    if args.fix == "foreach":
        opt = torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=wd, foreach=True)

    def sgd_update():
        with torch.no_grad():
            for p in params:
                d_p = p.grad.add(p.data, alpha=wd)
                buf = bufs[p]
                buf.mul_(momentum).add_(d_p)
                p.data.add_(buf, alpha=-lr)

    def nvtx(name):
        return torch.cuda.nvtx.range(name) if cuda else nullcontext()

    # rollout batches (observations, actions, advantages, returns) already on the device
    rollouts = [
        (
            torch.randn(batch, obs_dim, device=device),
            torch.randn(batch, act_dim, device=device),
            torch.randn(batch, device=device),
            torch.randn(batch, device=device),
        )
        for _ in range(8)
    ]
    state = {"i": 0}

    def update(obs, act, adv, ret):
        for p in params:
            p.grad = None
        with nvtx("forward"):
            loss = model.loss(obs, act, adv, ret)
        with nvtx("backward"):
            loss.backward()
        with nvtx("sgd_update"):
            if opt is not None:
                opt.step()
            else:
                sgd_update()
        return loss

    if args.fix == "graphs":
        static = [t.clone() for t in rollouts[0]]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                update(*static)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        for p in params:
            p.grad = None
        with torch.cuda.graph(graph):
            static_loss = model.loss(*static)
            static_loss.backward()
            sgd_update()

        def step():
            batch_ = rollouts[state["i"] % len(rollouts)]
            state["i"] += 1
            for dst, src in zip(static, batch_, strict=True):
                dst.copy_(src)
            graph.replay()
    else:

        def step():
            batch_ = rollouts[state["i"] % len(rollouts)]
            state["i"] += 1
            update(*batch_)

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
