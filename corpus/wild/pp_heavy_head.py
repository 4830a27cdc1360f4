"""Two-stage pipeline (plain send/recv, GPipe schedule, 8 micro-batches) of a frame-to-token
model with a large output vocabulary, its blocks split evenly between the stages.

The usual hand split: half the transformer-style blocks on each rank, the input projection on
the first, the output head and the loss on the last. The head is a width x 8192 projection plus
a softmax cross-entropy over 8192 classes per token: as much compute as 8 blocks. Stage 1 (4
blocks + head) does about 3x stage 0's work (input projection + 4 blocks), so rank 0 waits in
recv for most of each step.
Run: python -m torch.distributed.run --standalone --nproc_per_node=2 corpus/wild/pp_heavy_head.py
# With >= 2 GPUs (or --device cuda) one GPU per rank (NCCL), bf16, d = 2048, a 131072-token
# vocabulary (a Llama-3-sized one); otherwise 2 CPU ranks (gloo), fp32, d = 128, one torch
# thread each.
# Estimate (per micro-batch fwd+bwd, one block = 1 unit): stage 0 ~4, stage 1 ~4 + 8 = 12;
# GPipe step ~ m * 12 + 4 = 100 units at m = 8.
# --fix by_params (cut where the parameter count halves, DeepSpeed's default
# partition_method="parameters"; the head holds as many parameters as 8 blocks): all 8 blocks
# | head -> ~8 | ~8-9 -> ~ m * 9 + 8 = 80 units (~1.25-1.4x).
# --fix balanced (the contiguous cut, each stage keeping >= 1 block, that minimises the slower
# stage's per-layer times measured at start-up, head + loss counted on the last stage):
# proj + 7 blocks | 1 block + head -> ~8 | ~9 -> ~80 units (~1.25x).
# H100 estimate (2 GPUs, from FLOPs and bytes at ~550 TFLOP/s bf16 and 3.3 TB/s; not measured):
# a micro-batch is 8 x 128 = 1024 tokens; one unit = 6 x 33.6M params x 1024 = 0.21 TFLOP,
# ~0.37 ms; the head 6 x 268M x 1024 = 1.65 TFLOP, ~3.0 ms, and the loss over 1024 x 131072
# logits (~0.8 GB of bf16 traffic) ~0.45 ms. Stage 0 ~1.5 ms a micro-batch, stage 1 ~4.9 ms;
# ~25 kernels a micro-batch forward, ~45 backward: ~600 a step, ~70 us each (GPU-bound).
# none ~0.5 (fill) + 8 x 4.9 + 1.0 (drain) + ~0.6 (AdamW; rank 1's 402M params ~1.7 ms partly
# under rank 0's drain) ~ 41 ms a step, rank 0 idle in recv ~70% of it.
# by_params (8 blocks | head): ~3.0 | ~3.4 ms -> ~31 ms (~1.3x).
# balanced (7 blocks | 1 block + head; the head alone on stage 1 is not allowed): ~2.6 | ~3.8
# ms -> ~34 ms (~1.2x): on GPUs the loss makes the head's stage the slower one.
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
    def __init__(self, d, vocab):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc = nn.Linear(d, vocab)

    def forward(self, x):
        return self.fc(self.norm(x))


def make_layers(features, d, depth, vocab):
    return [nn.Linear(features, d), *[Block(d) for _ in range(depth)], Head(d, vocab)]


def cut_by_params(layers):
    counts = [sum(p.numel() for p in layer.parameters()) for layer in layers]
    total = sum(counts)
    return min(range(1, len(layers)), key=lambda k: abs(2 * sum(counts[:k]) - total))


def cut_by_time(layers, x, labels, device, rounds=5):
    """Time each layer's forward+backward on one micro-batch (the fastest of `rounds` passes over
    all layers, so a preempted pass does not count); the head is timed with its loss. Return the
    contiguous cut that minimises the slower stage's summed time, each stage keeping at least one
    block: layers = [input projection, blocks..., head], so the cut k is in [2, len(layers) - 2]
    (stage 0 = layers[:k], stage 1 = layers[k:])."""
    inputs = []
    with torch.no_grad():
        for layer in layers[:-1]:
            inputs.append(x)
            x = layer(x)
    inputs.append(x)
    grads = [torch.randn_like(inp) for inp in inputs[1:]]  # d loss / d output of layers[:-1]
    times = [float("inf")] * len(layers)
    for _ in range(rounds):
        for i, (layer, inp) in enumerate(zip(layers, inputs, strict=True)):
            inp = inp if i == 0 else inp.detach().requires_grad_()
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = layer(inp)
            if i == len(layers) - 1:
                F.cross_entropy(out.flatten(0, 1), labels.flatten()).backward()
            else:  # as in the pipeline: backward from a received gradient, no extra loss ops
                out.backward(grads[i])
            if device.type == "cuda":
                torch.cuda.synchronize()
            times[i] = min(times[i], time.perf_counter() - t0)
            layer.zero_grad(set_to_none=True)
    t = torch.tensor(times, dtype=torch.float64, device=device)
    dist.all_reduce(t)  # both ranks must choose the same cut
    t = t.tolist()
    # k = 1 (no block on stage 0) or len(layers) - 1 (all blocks on stage 0, the head alone on
    # stage 1) are not pipeline splits: the head (~8+ blocks' work) alone can outweigh every
    # block, so an unconstrained search picked [8, 0].
    cuts = range(2, len(layers) - 1)
    return min(cuts, key=lambda k: max(sum(t[:k]), sum(t[k:])))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fix", default="none", choices=["none", "by_params", "balanced"])
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
    # the head's d x vocab matmul = 8 blocks' two d x 4d ones (vocab = 64 d)
    d, depth, features, seqs, seq, m = (
        (2048, 8, 80, 64, 128, 8) if cuda else (128, 8, 80, CPU_SEQS, 16, 8)
    )
    dtype = torch.bfloat16 if cuda else torch.float32
    vocab = 64 * d
    with device:  # parameters made where they live (no 0.5 GB initialised on the CPU first)
        layers = [layer.to(dtype) for layer in make_layers(features, d, depth, vocab)]
    mb = seqs // m
    g = torch.Generator().manual_seed(1)
    frames = torch.randn(seqs, seq, features, generator=g).to(device, dtype)
    labels = torch.randint(0, vocab, (seqs, seq), generator=g).to(device)

    if args.fix == "by_params":
        cut = cut_by_params(layers)
    elif args.fix == "balanced":
        for layer in layers:
            layer.to(device)
        cut = cut_by_time(layers, frames[:mb], labels[:mb], device)
    else:
        cut = 1 + depth // 2  # input projection + half the blocks | the other half + head
    stage = nn.Sequential(*(layers[:cut] if rank == 0 else layers[cut:])).to(device)
    del layers
    opt = torch.optim.AdamW(stage.parameters(), lr=1e-4)
    shape = (mb, seq, d)

    def step():
        opt.zero_grad(set_to_none=True)
        if rank == 0:
            outs, sends = [], []
            for x in frames.chunk(m):
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
