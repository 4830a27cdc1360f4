"""DDP training of a deep, narrow residual MLP with a tiny gradient bucket (bucket_cap_mb=0.05).

Every parameter tensor becomes its own bucket: ~400 small all-reduces per step, each paying
NCCL launch + latency, mostly after the short backward compute -> communication is exposed.
Run: torchrun --nproc_per_node=2 corpus/wild/ddp_exposed_comm.py [--fix buckets]
# 2-GPU estimate: backward compute ~2 ms; 400 all-reduces x ~15-25 us ~ 6-10 ms, serialized on
# the NCCL stream and trailing the backward -> none ~12 ms/step.
# --fix buckets (bucket_cap_mb=100, gradient_as_bucket_view): 1-2 all-reduces of ~40 MB
# (~0.5 ms over NVLink) -> ~5 ms/step -> ~2x.
# --fix nocomm (the gradient all-reduce removed entirely: every step's forward and backward run
# under DDP's no_sync(), the same buckets and hooks otherwise) -> the compute alone, ~2-3 ms.
"""

import argparse
import json
import os
import time
from contextlib import nullcontext

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        return x + torch.relu(self.fc(self.norm(x)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fix", default="none", choices=["none", "buckets", "nocomm"])
    p.add_argument("--seconds", type=float, default=1.5)
    p.add_argument("--device", default="auto")
    args = p.parse_args()
    cuda = torch.cuda.is_available() if args.device == "auto" else args.device.startswith("cuda")
    rank, local = int(os.environ.get("RANK", 0)), int(os.environ.get("LOCAL_RANK", 0))
    if "WORLD_SIZE" not in os.environ:  # plain `python script.py`: a world of one
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533", RANK="0", WORLD_SIZE="1")
    dist.init_process_group("nccl" if cuda else "gloo")
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    torch.manual_seed(0)
    depth, width, batch = (100, 320, 256) if cuda else (24, 64, 32)

    model = nn.Sequential(*[Block(width) for _ in range(depth)], nn.Linear(width, 1)).to(device)
    if args.fix == "buckets":
        ddp = DDP(model, bucket_cap_mb=100, gradient_as_bucket_view=True)
    else:
        ddp = DDP(model, bucket_cap_mb=0.05)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3, momentum=0.9)
    g = torch.Generator(device=device).manual_seed(rank)
    data = [
        (
            torch.randn(batch, width, device=device, generator=g),
            torch.randn(batch, 1, device=device, generator=g),
        )
        for _ in range(4)
    ]
    state = {"i": 0}

    def step():
        x, y = data[state["i"] % len(data)]
        state["i"] += 1
        with ddp.no_sync() if args.fix == "nocomm" else nullcontext():
            loss = nn.functional.mse_loss(ddp(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
        opt.step()

    for _ in range(5):
        step()
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    n = 0
    # every rank must run the same number of steps: rank 0 decides when to stop
    while True:
        step()
        n += 1
        stop = (
            torch.tensor([n >= 10 and time.perf_counter() - t0 >= args.seconds], device=device)
            if n % 10 == 0
            else None
        )
        if stop is not None:
            dist.broadcast(stop, 0)
            if stop.item():
                break
    if cuda:
        torch.cuda.synchronize()
    ms = (time.perf_counter() - t0) * 1e3 / n
    if rank == 0:
        print("RESULT " + json.dumps({"step_ms": round(ms, 3), "steps": n, "fix": args.fix}))
    dist.barrier()  # every rank done with the group before any tears it down


if __name__ == "__main__":
    main()
    # once main() has returned and its DDP model with it: the model holds the process group,
    # and a group torn down from the model's destructor can hang at exit (torch's gloo worker
    # thread waits for the GIL that destructor holds)
    dist.destroy_process_group()
