"""A small Transformer tagger trained with tiny batches on sequences bucketed to 32/64/96/128
tokens (the bucket changes every step), in eager mode.
# H200 estimate: batch 8, 4 layers of width 256 (4 heads, MLP 1024), AdamW (foreach): every
# kernel works on 0.25-1 K tokens and finishes in 2-5 us, while eager dispatch and the launch
# cost the host ~8-12 us each; ~250 kernels forward and backward plus the optimizer's -> host
# ~3-4 ms a step, GPU ~0.8 ms -> none ~3.5 ms/step, the GPU mostly idle.
# --fix graphs (the host's dispatch removed entirely, same kernels: one CUDA graph per bucket
# length captured before the loop, each the whole step with a capturable AdamW; per step only
# the batch is copied into its bucket's static buffers and that graph replayed) -> ~0.9 ms
# (~4x). It is the removal.
"""

import argparse
import json
import random
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

BUCKETS = (32, 64, 96, 128)
CYCLE = 16


class Tagger(nn.Module):
    def __init__(self, vocab, dim, depth, tags):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        layer = nn.TransformerEncoderLayer(
            dim, 4, 4 * dim, dropout=0.0, batch_first=True, norm_first=True
        )
        self.enc = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.out = nn.Linear(dim, tags)

    def forward(self, ids):
        return self.out(self.enc(self.emb(ids)))


def capture(loss_of, train_step, opt, x, y):
    """One bucket's whole training step as a CUDA graph over static copies of (x, y), after a
    few eager steps on a side stream (the PyTorch docs' whole-network recipe)."""
    sx, sy = x.clone(), y.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            train_step(sx, sy)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        loss_of(sx, sy).backward()
        opt.step()
    return g, sx, sy


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fix", default="none", choices=["none", "graphs"])
    p.add_argument("--seconds", type=float, default=0.4)
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
    vocab, tags, batch, dim, depth = (5000, 17, 8, 256, 4) if cuda else (200, 5, 2, 16, 1)
    buckets = BUCKETS if cuda else tuple(b // 8 for b in BUCKETS)
    rng = random.Random(0)
    order = [rng.choice(buckets) for _ in range(CYCLE)]
    data = {
        b: [(torch.randint(0, vocab, (batch, b), device=device), torch.randint(0, tags, (batch, b), device=device))
            for _ in range(2)]
        for b in buckets
    }  # fmt: skip
    model = Tagger(vocab, dim, depth, tags).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, capturable=args.fix == "graphs")
    state = {"i": 0}

    def loss_of(x, y):
        return F.cross_entropy(model(x).flatten(0, 1), y.flatten())

    def train_step(x, y):
        opt.zero_grad(set_to_none=True)
        loss_of(x, y).backward()
        opt.step()

    if args.fix == "graphs":
        graphs = {b: capture(loss_of, train_step, opt, *data[b][0]) for b in buckets}

        def step():
            b = order[state["i"] % CYCLE]
            x, y = data[b][state["i"] % 2]
            state["i"] += 1
            g, sx, sy = graphs[b]
            sx.copy_(x)
            sy.copy_(y)
            g.replay()
    else:

        def step():
            b = order[state["i"] % CYCLE]
            x, y = data[b][state["i"] % 2]
            state["i"] += 1
            train_step(x, y)

    for _ in range(CYCLE):
        step()
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    n = 0
    while n < 10 or time.perf_counter() - t0 < args.seconds or n % CYCLE:
        step()
        n += 1
    if cuda:
        torch.cuda.synchronize()
    ms = (time.perf_counter() - t0) * 1e3 / n
    print("RESULT " + json.dumps({"step_ms": round(ms, 3), "steps": n, "fix": args.fix}))


if __name__ == "__main__":
    main()
