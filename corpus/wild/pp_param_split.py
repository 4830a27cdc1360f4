"""Two-stage pipeline (plain send/recv, GPipe schedule, 8 micro-batches) of a token classifier,
its layers cut where the parameter count halves.

Cutting by parameters is DeepSpeed's default (PipelineModule(partition_method="parameters")).
Here it misleads: the token embedding holds as many parameters as 6 of the 8 MLP blocks but costs
little compute (a row gather, and once a step a dense update of the table), so stage 0 gets the
embedding and 1 of the 8 blocks, stage 1 the other 7 and the head: about 1:4 in compute. Rank 0
spends most of each step blocked in recv, waiting for rank 1 to send back its gradients. Each rank
posts a step's receives as early as it can (rank 1 all of them at the start, rank 0 its
gradients' after its sends), so each micro-batch arrives while the one before it computes.
Run: python -m torch.distributed.run --standalone --nproc_per_node=2 corpus/wild/pp_param_split.py
# With >= 2 GPUs (or --device cuda) one GPU per rank (NCCL), bf16, d = 2048; otherwise 2 CPU
# ranks (gloo), fp32, d = 128, one torch thread each.
# Estimate (per micro-batch fwd+bwd, one block = 1 unit): stage 0 ~1, stage 1 ~7, plus once a
# step the embedding's dense gradient and AdamW update of the whole table (~4 units on CPU);
# GPipe step ~ m * 7 + 2 = 58 units at m = 8 (rank 0's update hides in its wait).
# --fix uniform (cut by layer count, partition_method="uniform": embedding + 4 blocks | 4 blocks
# + head): ~4 | ~4 -> ~(m + 1) * 4 + 4 (the update, now on the longest path) = 40 units (~1.45x).
# --fix balanced (cut where the per-layer times measured at start-up halve): the same 4 | 4 cut
# -> ~1.45x.
# Measured, 2 gloo ranks on 2 CPU cores, 7 rounds: none 87.9 ms a step, uniform 60.5 (1.45x),
# balanced 60.9 (1.44x). With each receive posted only when its tensor was needed, both fixes
# gave ~1.05x (this model at vocab 32 d, 2 | 6 blocks): gloo sends a tensor only once the recv
# is posted, from the sender's event-loop thread, and once both ranks compute (the fixed cuts)
# each hand-off waited 1-4 ms for it, on the longest path.
# H100 estimate (2 GPUs, from FLOPs and bytes at ~550 TFLOP/s bf16 and 3.3 TB/s; not measured):
# a micro-batch is 8 x 256 = 2048 tokens; one unit = 6 x 33.6M params x 2048 = 0.41 TFLOP,
# ~0.75 ms. The 98304 x 2048 embedding (201M params) costs a gather forward, and backward a
# dense 402 MB gradient made and accumulated each micro-batch (~0.6 ms). Stage 0 ~1.3 ms a
# micro-batch, stage 1 (7 blocks + a 512-class head) ~5.3 ms; ~500 kernels a step (GPU-bound).
# none ~0.3 (fill) + 8 x 5.3 + 1.0 (drain) + 1.0 (rank 0's AdamW, 235M params) ~ 45 ms a step.
# uniform (4 | 4): ~3.6 | ~3.1 ms a micro-batch -> ~9 x 3.6 + 1.4 (AdamW, 335M) ~ 34 ms (~1.3x).
# balanced: the same 4 | 4 cut from the measured layer times -> ~1.3x.
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


def cut_by_params(layers):
    counts = [sum(p.numel() for p in layer.parameters()) for layer in layers]
    total = sum(counts)
    return min(range(1, len(layers)), key=lambda k: abs(2 * sum(counts[:k]) - total))


def cut_by_time(layers, x, labels, device, rounds=5):
    """Time each layer's forward+backward on one micro-batch (the fastest of `rounds` passes over
    all layers, so a preempted pass does not count); cut where the summed times halve."""
    inputs = []
    with torch.no_grad():
        for layer in layers[:-1]:
            inputs.append(x)
            x = layer(x)
    inputs.append(x)
    times = [float("inf")] * len(layers)
    for _ in range(rounds):
        for i, (layer, inp) in enumerate(zip(layers, inputs, strict=True)):
            inp = inp if i == 0 else inp.detach().requires_grad_()
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = layer(inp)
            if i == len(layers) - 1:
                loss = F.cross_entropy(out.flatten(0, 1), labels.flatten())
            else:
                loss = out.float().square().mean()
            loss.backward()
            if device.type == "cuda":
                torch.cuda.synchronize()
            times[i] = min(times[i], time.perf_counter() - t0)
            layer.zero_grad(set_to_none=True)
    t = torch.tensor(times, dtype=torch.float64, device=device)
    dist.all_reduce(t)  # both ranks must choose the same cut
    t = t.tolist()
    return min(range(1, len(layers)), key=lambda k: max(sum(t[:k]), sum(t[k:])))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fix", default="none", choices=["none", "uniform", "balanced"])
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
    # vocab * d = 6 blocks' parameters (8 d^2 each): the embedding weighs 3/4 of the blocks
    d, depth, classes, seqs, seq, m = (
        (2048, 8, 512, 64, 256, 8) if cuda else (128, 8, 64, CPU_SEQS, 16, 8)
    )
    dtype = torch.bfloat16 if cuda else torch.float32
    vocab = 48 * d
    with device:  # parameters made where they live (no 0.5 GB initialised on the CPU first)
        layers = [layer.to(dtype) for layer in make_layers(vocab, d, depth, classes)]
    mb = seqs // m
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, vocab, (seqs, seq), generator=g).to(device)
    labels = torch.randint(0, classes, (seqs, seq), generator=g).to(device)

    if args.fix == "uniform":
        cut = len(layers) // 2
    elif args.fix == "balanced":
        for layer in layers:
            layer.to(device)
        cut = cut_by_time(layers, tokens[:mb], labels[:mb], device)
    else:
        cut = cut_by_params(layers)
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
            # post every gradient receive now, after the sends (NCCL runs them in posting order)
            grads = [torch.empty(shape, device=device, dtype=dtype) for _ in range(m)]
            recvs = [dist.irecv(grad, peer) for grad in grads]
            for y, r, grad in zip(outs, recvs, grads, strict=True):
                r.wait()
                y.backward(grad)
            for s in sends:
                s.wait()
        else:
            inputs, losses, sends = [], [], []
            # post every activation receive at once: each arrives while the previous computes
            hs = [torch.empty(shape, device=device, dtype=dtype) for _ in range(m)]
            recvs = [dist.irecv(h, peer) for h in hs]
            for y, r, h in zip(labels.chunk(m), recvs, hs, strict=True):
                r.wait()
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
