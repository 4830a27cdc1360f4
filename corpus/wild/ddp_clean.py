"""A GPU-bound DistributedDataParallel job whose gradient all-reduce hides under the backward.

Large batches of long sequences (16 x 1024 tokens a rank) through a 134M-parameter residual MLP
stack in bf16: the backward takes ~16 ms and DDP's buckets all-reduce the 268 MB of gradients
(~0.8 ms) while it runs. Every NCCL kernel overlaps compute except the last bucket's; nothing
here is worth fixing.
Run: python -m torch.distributed.run --standalone --nproc_per_node=2 corpus/wild/ddp_clean.py
# With >= 2 GPUs (or --device cuda) one GPU per rank (LOCAL_RANK, NCCL), bf16; otherwise 2 CPU
# ranks (gloo), fp32, a tiny model, one torch thread each.
# H100 estimate (2 GPUs; from FLOPs and bytes at ~550 TFLOP/s bf16, 3.3 TB/s HBM and ~330 GB/s
# all-reduce bus bandwidth over NVLink; not measured): 4 blocks of d = 2048 (134M params), a
# batch of 16384 tokens: 6 x 134M x 16384 = 13.2 TFLOP, ~24 ms (backward ~16 ms). The all-reduce
# of 268 MB (~0.8 ms) runs under the backward; exposed: the last bucket (~0.1 ms), DDP's bucket
# copies (~0.3 ms) and the NCCL kernels' share of the SMs (~0.1-0.2 ms). AdamW ~0.6 ms.
# none ~25 ms a step; ~100 kernels a step (GPU-bound).
# Suspect --fix nocomm (forward and backward under model.no_sync(): no all-reduce at all, the
# same model and optimizer; what a reading of the NCCL kernels as the cost would try):
# ~24.6 ms (~1.02x).
"""

import argparse
import json
import os
import time
from contextlib import nullcontext

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.up = nn.Linear(d, 4 * d, bias=False)
        self.down = nn.Linear(4 * d, d, bias=False)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x))))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fix", default="none", choices=["none", "nocomm"])
    p.add_argument("--seconds", type=float, default=1.5)
    p.add_argument("--device", default="auto")
    args = p.parse_args()
    if "WORLD_SIZE" not in os.environ:
        raise SystemExit("run with: python -m torch.distributed.run --nproc_per_node=2 " + __file__)
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", 0))
    world = int(os.environ["WORLD_SIZE"])
    if args.device == "auto":
        cuda = torch.cuda.device_count() >= world
    else:
        cuda = args.device.startswith("cuda")
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(1)  # one core per rank
    dist.init_process_group("nccl" if cuda else "gloo")
    torch.manual_seed(0)
    d, depth, classes, batch, seq = (2048, 4, 256, 16, 1024) if cuda else (64, 2, 16, 4, 8)
    dtype = torch.bfloat16 if cuda else torch.float32

    with device:
        model = nn.Sequential(
            *[Block(d) for _ in range(depth)], nn.LayerNorm(d), nn.Linear(d, classes, bias=False)
        )
    model.to(dtype)
    model = DDP(model, device_ids=[local] if cuda else None)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator(device=device).manual_seed(rank)
    data = [
        (
            torch.randn(batch, seq, d, device=device, dtype=dtype, generator=g),
            torch.randint(0, classes, (batch, seq), device=device, generator=g),
        )
        for _ in range(2)
    ]
    state = {"i": 0}

    def step():
        x, y = data[state["i"] % len(data)]
        state["i"] += 1
        with model.no_sync() if args.fix == "nocomm" else nullcontext():
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
            opt.zero_grad(set_to_none=True)
            loss.backward()
        opt.step()

    for _ in range(3):
        step()
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    n = 0
    while True:  # rank 0 decides when to stop, every 10 steps
        step()
        n += 1
        if n % 10 == 0:
            stop = torch.tensor(
                [n >= 10 and time.perf_counter() - t0 >= args.seconds], device=device
            )
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
