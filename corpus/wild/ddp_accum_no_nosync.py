"""Gradient accumulation under DDP without no_sync(): every micro-batch's backward all-reduces.

A fine-tuning job whose memory allows only small micro-batches (4 sequences of 128 tokens)
accumulates 4 of them per optimizer step, written the way most tutorials write it: loss / 4,
backward, and an optimizer step every 4th micro-batch. Under DistributedDataParallel every
backward launches the all-reduce of the whole model's gradients (268M bf16 parameters, 537 MB),
so a step moves 4x the bytes it needs; the averaged gradients come out the same.
Run: python -m torch.distributed.run --standalone --nproc_per_node=2 corpus/wild/ddp_accum_no_nosync.py
# With >= 2 GPUs (or --device cuda) one GPU per rank (LOCAL_RANK, NCCL), bf16; otherwise 2 CPU
# ranks (gloo), fp32, a tiny model, one torch thread each.
# H100 estimate (2 GPUs; from FLOPs and bytes at ~550 TFLOP/s bf16, 3.3 TB/s HBM and ~330 GB/s
# all-reduce bus bandwidth over NVLink; not measured): 2 blocks of d = 4096 (268M params); a
# micro-batch of 512 tokens is 6 x 268M x 512 = 0.82 TFLOP, ~1.5 ms (backward ~1.0 ms). Its
# 537 MB all-reduce takes ~1.6 ms, started bucket by bucket under the backward, so it trails the
# backward by ~0.6-0.9 ms, and DDP's bucket copies (gradient into its bucket scaled by 1/world,
# and back) add ~0.65 ms of HBM traffic: ~3.0 ms a micro-batch.
# none ~4 x 3.0 + 1.2 (AdamW over 268M bf16 params, ~3.8 GB) ~ 13 ms a step; ~300 kernels a
# step, ~40 us each (GPU-bound), the host ~3 ms.
# --fix nosync (the first 3 micro-batches under model.no_sync(), the 4th all-reduces the
# accumulated gradients): ~3 x 1.5 + 3.0 + 1.2 ~ 8.7 ms (~1.5x).
# --fix nocomm (every micro-batch under no_sync(): no all-reduce at all, the same model, DDP
# wrapper and optimizer): ~4 x 1.5 + 1.2 ~ 7.2 ms (~1.8x).
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
    p.add_argument("--fix", default="none", choices=["none", "nosync", "nocomm"])
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
    d, depth, classes, micro, seq, accum = (
        (4096, 2, 256, 4, 128, 4) if cuda else (64, 2, 16, 4, 8, 4)
    )
    dtype = torch.bfloat16 if cuda else torch.float32

    with device:
        model = nn.Sequential(
            *[Block(d) for _ in range(depth)], nn.LayerNorm(d), nn.Linear(d, classes, bias=False)
        )
    model.to(dtype)
    model = DDP(model, device_ids=[local] if cuda else None)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    g = torch.Generator(device=device).manual_seed(rank)
    micro_batches = [
        (
            torch.randn(micro, seq, d, device=device, dtype=dtype, generator=g),
            torch.randint(0, classes, (micro, seq), device=device, generator=g),
        )
        for _ in range(accum)
    ]

    def step():
        for i, (x, y) in enumerate(micro_batches):
            last = i == accum - 1
            skip = args.fix == "nocomm" or (args.fix == "nosync" and not last)
            with model.no_sync() if skip else nullcontext():
                loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten()) / accum
                loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

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
