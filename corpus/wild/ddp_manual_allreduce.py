"""Data parallelism by hand: after backward, every gradient is all-reduced and divided in a loop.

The training loop of a user who skipped DistributedDataParallel: each rank computes its own
batch's gradients, then averages them parameter by parameter (``dist.all_reduce(p.grad)``,
``p.grad /= world``) before the optimizer step. Each all-reduce starts only once the whole
backward is done, one after another, so the whole gradient exchange (1.07 GB of bf16 gradients)
sits between the backward and the optimizer with nothing to hide under.
Run: python -m torch.distributed.run --standalone --nproc_per_node=2 corpus/wild/ddp_manual_allreduce.py
# With >= 2 GPUs (or --device cuda) one GPU per rank (LOCAL_RANK, NCCL), bf16; otherwise 2 CPU
# ranks (gloo), fp32, a tiny model, one torch thread each.
# H100 estimate (2 GPUs; from FLOPs and bytes at ~550 TFLOP/s bf16, 3.3 TB/s HBM and ~330 GB/s
# all-reduce bus bandwidth over NVLink; not measured): 4 blocks of d = 4096 (537M params), a
# batch of 1024 tokens: 6 x 537M x 1024 = 3.3 TFLOP, ~6.0 ms (backward ~4.0 ms). The 1.07 GB of
# gradients take ~3.25 ms to all-reduce, the divisions ~0.65 ms, SGD with momentum (~5.4 GB)
# ~1.6 ms. none ~6.0 + 3.25 + 0.65 + 1.6 ~ 11.5 ms a step; ~120 kernels a step (GPU-bound).
# --fix ddp (DistributedDataParallel, 25 MB buckets, gradient_as_bucket_view=True): each bucket's
# all-reduce starts as soon as its gradients are ready, under the rest of the backward (~4 ms,
# more than the ~3.25 ms exchange); what remains is the last bucket, the scaling of the buckets
# and the NCCL kernels' share of the SMs during the backward: ~6.0 + ~1.5 + 1.6 ~ 9 ms (~1.25x).
# --fix nocomm (no gradient averaging at all, the same model and optimizer): ~7.6 ms (~1.5x).
"""

import argparse
import json
import os
import time

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
    p.add_argument("--fix", default="none", choices=["none", "ddp", "nocomm"])
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
    torch.manual_seed(0)  # the same initial weights on every rank
    d, depth, classes, batch, seq = (4096, 4, 256, 8, 128) if cuda else (64, 4, 16, 4, 8)
    dtype = torch.bfloat16 if cuda else torch.float32

    with device:
        model = nn.Sequential(
            *[Block(d) for _ in range(depth)], nn.LayerNorm(d), nn.Linear(d, classes, bias=False)
        )
    model.to(dtype)
    net = model
    if args.fix == "ddp":
        net = DDP(model, device_ids=[local] if cuda else None, gradient_as_bucket_view=True)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    g = torch.Generator(device=device).manual_seed(rank)
    data = [
        (
            torch.randn(batch, seq, d, device=device, dtype=dtype, generator=g),
            torch.randint(0, classes, (batch, seq), device=device, generator=g),
        )
        for _ in range(4)
    ]
    state = {"i": 0}

    def average_gradients():
        for param in model.parameters():
            dist.all_reduce(param.grad)
            param.grad /= world

    def step():
        x, y = data[state["i"] % len(data)]
        state["i"] += 1
        loss = F.cross_entropy(net(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if args.fix == "none":
            average_gradients()
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
