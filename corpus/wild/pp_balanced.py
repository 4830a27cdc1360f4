"""Two-stage pipeline (plain send/recv, GPipe schedule, 4 micro-batches) of a token classifier
whose stages are already balanced: 4 equal blocks each, the embedding (a row gather) on the
first rank and a small classifier head on the last.

Each rank still waits in recv for a fifth of every step: the GPipe fill and drain (one
micro-batch of the other stage) plus the per-micro-batch hand-offs. That wait is the schedule's
bubble, the same on both ranks, not an imbalance: no split of the blocks shortens it.
Run: python -m torch.distributed.run --standalone --nproc_per_node=2 corpus/wild/pp_balanced.py
# With >= 2 GPUs (or --device cuda) one GPU per rank (NCCL), bf16, d = 2048; otherwise 2 CPU
# ranks (gloo), fp32, d = 128, one torch thread each.
# Estimate (per micro-batch fwd+bwd, one block = 1 unit): stage 0 ~4, stage 1 ~4;
# GPipe step ~ m * 4 + 4 = 20 units at m = 4, each rank idle ~4 of them.
# Suspect --fix shift (a naive reading of rank 0's recv waits: give stage 0 one more block,
# 5 | 3): stage 0 ~5 -> ~ m * 5 + 3 = 23 units (~0.87x, slower).
# H100 estimate (2 GPUs, from FLOPs and bytes at ~550 TFLOP/s bf16 and 3.3 TB/s; not measured):
# a micro-batch is 16 x 256 = 4096 tokens; one unit = 6 x 33.6M params x 4096 = 0.83 TFLOP,
# ~1.5 ms; the 65536 x 2048 embedding's dense gradient ~0.3 ms a micro-batch. Stage 0 ~6.3 ms a
# micro-batch, stage 1 ~6.1 ms; ~260 kernels a step (GPU-bound). none ~5 x 6.3 + 1.1 (AdamW,
# 268M params) ~ 32 ms a step, each rank idle ~1/5 of it (the bubble). shift: ~4 x 7.8 + 4.5 +
# 1.4 ~ 37 ms (~0.87x).
"""

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

#: Sequences per step on the CPU: 64, the size captured and timed on 2 CPU ranks; the tests'
#: dry run of every switch (tests/test_corpus_scripts.py) sets PP_CPU_SEQS=16, the same code
#: paths with smaller micro-batches.
CPU_SEQS = int(os.environ.get("PP_CPU_SEQS", "64"))


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class Head(nn.Module):
    def __init__(self, d, classes):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc = nn.Linear(d, classes)

    def forward(self, x):
        return self.fc(self.norm(x))


def make_layers(vocab, d, depth, classes):
    return [nn.Embedding(vocab, d), *[Block(d) for _ in range(depth)], Head(d, classes)]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fix", default="none", choices=["none", "shift"])
    p.add_argument("--seconds", type=float, default=1.5)
    p.add_argument("--device", default="auto")
    args = p.parse_args()
    if "WORLD_SIZE" not in os.environ:
        raise SystemExit("run with: python -m torch.distributed.run --nproc_per_node=2 " + __file__)
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", 0))
    if args.device == "auto":
        cuda = torch.cuda.device_count() >= 2
    else:
        cuda = args.device.startswith("cuda")
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(1)  # one core per rank
    dist.init_process_group("nccl" if cuda else "gloo")
    peer = 1 - rank
    torch.manual_seed(0)
    d, depth, classes, seqs, seq, m = (
        (2048, 8, 512, 64, 256, 4) if cuda else (128, 8, 64, CPU_SEQS, 16, 4)
    )
    dtype = torch.bfloat16 if cuda else torch.float32
    vocab = 32 * d
    with device:  # parameters made where they live (no 0.5 GB initialised on the CPU first)
        layers = [layer.to(dtype) for layer in make_layers(vocab, d, depth, classes)]
    mb = seqs // m
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, vocab, (seqs, seq), generator=g).to(device)
    labels = torch.randint(0, classes, (seqs, seq), generator=g).to(device)

    cut = 1 + depth // 2  # embedding + 4 blocks | 4 blocks + head
    if args.fix == "shift":
        cut += 1  # embedding + 5 blocks | 3 blocks + head
    stage = nn.Sequential(*(layers[:cut] if rank == 0 else layers[cut:])).to(device)
    del layers
    opt = torch.optim.AdamW(stage.parameters(), lr=1e-4)
    shape = (mb, seq, d)

    def step():
        opt.zero_grad(set_to_none=True)
        if rank == 0:
            outs, sends = [], []
            for x in tokens.chunk(m):
                y = stage(x)
                sends.append(dist.isend(y.detach().contiguous(), peer))
                outs.append(y)
            for y in outs:
                grad = torch.empty(shape, device=device, dtype=dtype)
                dist.recv(grad, peer)
                y.backward(grad)
            for s in sends:
                s.wait()
        else:
            inputs, losses, sends = [], [], []
            for y in labels.chunk(m):
                h = torch.empty(shape, device=device, dtype=dtype)
                dist.recv(h, peer)
                h.requires_grad_()
                out = stage(h)
                losses.append(F.cross_entropy(out.flatten(0, 1), y.flatten()) / m)
                inputs.append(h)
            for h, loss in zip(inputs, losses, strict=True):
                loss.backward()
                sends.append(dist.isend(h.grad, peer))
            for s in sends:
                s.wait()
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
        split = [cut - 1, depth - cut + 1]  # blocks per stage
        print(
            "RESULT "
            + json.dumps({"step_ms": round(ms, 3), "steps": n, "fix": args.fix, "blocks": split})
        )
    dist.barrier()  # both ranks done with every send and receive before gloo tears down
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
