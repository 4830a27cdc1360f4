"""DDP training in which the main process also scores a held-out batch every step.

For a smooth validation curve on its progress bar, rank 0 runs the model on a fixed held-out
batch after every optimizer step (forward only, no_grad, 4x the training batch since nothing is
kept for backward). The other rank has nothing to do meanwhile: it starts the next step and
waits inside the first gradient all-reduce until rank 0 gets there. The ranks do unequal work;
the communication itself is small and hides under the backward.
Run: python -m torch.distributed.run --standalone --nproc_per_node=2 corpus/wild/dp_straggler.py
# With >= 2 GPUs (or --device cuda) one GPU per rank (LOCAL_RANK, NCCL), bf16; otherwise 2 CPU
# ranks (gloo), fp32, a tiny model, one torch thread each.
# H100 estimate (2 GPUs; from FLOPs and bytes at ~550 TFLOP/s bf16, 3.3 TB/s HBM and ~330 GB/s
# all-reduce bus bandwidth over NVLink; not measured): 4 blocks of d = 2048 (134M params). A
# training step of 8 x 1024 tokens a rank is 6 x 134M x 8192 = 6.6 TFLOP, ~12 ms (backward
# ~8 ms, under which the 268 MB all-reduce, ~0.8 ms, runs); AdamW ~0.6 ms. The held-out forward,
# 32 x 1024 tokens on rank 0: 2 x 134M x 32768 = 8.8 TFLOP, ~16 ms. ~130 kernels a step
# (GPU-bound). none ~12 + 16 + ~1 ~ 29 ms a step, rank 1 waiting ~16 ms of it in the all-reduce.
# --fix even (each rank scores its half of the held-out batch, the two sums all-reduced: the
# same total work, the same on every rank): ~12 + 8 + ~1 ~ 21 ms (~1.4x).
# Competing --fix nocomm (the training step under model.no_sync(): no gradient all-reduce at
# all; rank 0 still scores the whole held-out batch): rank 0's own work, ~28.6 ms (~1.0x):
# taking the communication away does not shorten the step.
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
    p.add_argument("--fix", default="none", choices=["none", "even", "nocomm"])
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
    d, depth, classes, batch, seq, held_out = (
        (2048, 4, 256, 8, 1024, 32) if cuda else (64, 2, 16, 4, 8, 16)
    )
    dtype = torch.bfloat16 if cuda else torch.float32

    with device:
        model = nn.Sequential(
            *[Block(d) for _ in range(depth)], nn.LayerNorm(d), nn.Linear(d, classes, bias=False)
        )
    model.to(dtype)
    ddp = DDP(model, device_ids=[local] if cuda else None)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4)
    g = torch.Generator(device=device).manual_seed(rank)
    data = [
        (
            torch.randn(batch, seq, d, device=device, dtype=dtype, generator=g),
            torch.randint(0, classes, (batch, seq), device=device, generator=g),
        )
        for _ in range(2)
    ]
    held = torch.Generator(device=device).manual_seed(1234)  # the same held-out batch everywhere
    x_val = torch.randn(held_out, seq, d, device=device, dtype=dtype, generator=held)
    y_val = torch.randint(0, classes, (held_out, seq), device=device, generator=held)
    val_history = []
    state = {"i": 0}

    def validate():
        if args.fix == "even":  # every rank scores its share; the sums are added up
            x, y = x_val.chunk(world)[rank], y_val.chunk(world)[rank]
            with torch.no_grad():
                total = F.cross_entropy(model(x).flatten(0, 1), y.flatten(), reduction="sum")
            dist.all_reduce(total)
        elif rank == 0:
            with torch.no_grad():
                total = F.cross_entropy(
                    model(x_val).flatten(0, 1), y_val.flatten(), reduction="sum"
                )
        else:
            return
        if rank == 0:
            val_history.append(total / y_val.numel())

    def step():
        x, y = data[state["i"] % len(data)]
        state["i"] += 1
        with ddp.no_sync() if args.fix == "nocomm" else nullcontext():
            loss = F.cross_entropy(ddp(x).flatten(0, 1), y.flatten())
            opt.zero_grad(set_to_none=True)
            loss.backward()
        opt.step()
        validate()

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
        val = torch.stack(val_history[-10:]).float().mean().item()
        result = {"step_ms": round(ms, 3), "steps": n, "fix": args.fix, "val_loss": round(val, 4)}
        print("RESULT " + json.dumps(result))
    dist.barrier()  # every rank done with the group before any tears it down


if __name__ == "__main__":
    main()
    # once main() has returned and its DDP model with it: the model holds the process group,
    # and a group torn down from the model's destructor can hang at exit (torch's gloo worker
    # thread waits for the GIL that destructor holds)
    dist.destroy_process_group()
