"""A text encoder (nn.TransformerEncoder) fine-tuned on batches of whatever length the longest
document in them has, calling torch.cuda.empty_cache() after every step "to keep memory down".
# H200 estimate: 8 layers of width 768 (12 heads, FFN 3072), batch 16, lengths 256-1024 (a
# shuffled cycle of 16, ~10 K tokens a step), bf16 autocast: GEMMs ~3.5 TFLOP (~6 ms), the rest
# ~3 ms -> ~9 ms of GPU work. After empty_cache every activation of 10 MB or more (~15 a layer,
# ~120 a step) needs a fresh cudaMalloc, and the next empty_cache frees them again: ~120
# cudaFree calls after a device sync with the GPU idle (~50 us each assumed: ~6 ms) plus the
# mallocs between the launches (~40 us each: ~5 ms, partly hidden behind the GPU's queue) ->
# none ~15-16 ms/step.
# --fix nocall (the call dropped: the caching allocator keeps its blocks; a few cudaMallocs in
# the first steps only) -> ~9 ms (~1.7x). It is the removal: the allocator's churn gone,
# everything else unchanged.
# --fix bucket (lengths padded up to 4 buckets and the call dropped: fewer sizes, a compact
# cache; ~13% more tokens of padding) -> ~10.2 ms (~1.5x).
# --fix graphs (the host's dispatch removed, the lengths and the call kept: one CUDA graph per
# length of the cycle, each the whole step with a capturable AdamW, all in one memory pool;
# per step the batch is gathered eagerly as in none, copied into its length's static buffers,
# that graph replayed, then torch.cuda.empty_cache() called). It cannot keep the churn: a
# replayed graph allocates nothing (its activations' addresses are fixed at capture, and
# empty_cache leaves a live graph's pool alone), so ~120 cudaMalloc/cudaFree a step become the
# 1-2 of the eager gather's small segment, with the call's device sync. It so removes the
# launch overhead and the churn together: an upper bound for either cause alone, beside nocall
# (the churn alone) -> no faster than ~9 ms if the GPU's work is the floor; not yet timed.
"""

import argparse
import json
import random
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

BUCKETS = (448, 640, 832, 1024)


def capture_lengths(model, opt, lengths, docs, labels, batch):
    """One CUDA graph of the whole step per batch length (the PyTorch docs' way for a few
    shapes), each over static (tokens, y) after a few eager steps on a side stream. The graphs
    share one memory pool, the longest captured first: no tensor one replay writes is read
    after another graph's replay (the grads are written and used within each), so the pool
    needs the largest step's memory, not the sum."""
    emb, encoder, head = model

    def train_step(tokens, y):
        with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):  # as capture needs
            loss = F.cross_entropy(head(encoder(emb(tokens)).mean(1)), y)
        loss.backward()
        opt.step()

    graphs, pool = {}, None
    for n in sorted(lengths, reverse=True):
        tokens, y = docs[:batch, :n].clone(), labels[:batch].clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                opt.zero_grad(set_to_none=True)
                train_step(tokens, y)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph, pool=pool):
            train_step(tokens, y)
        pool = graph.pool()
        graphs[n] = (graph, tokens, y)
    return graphs


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fix", default="none", choices=["none", "nocall", "bucket", "graphs"])
    p.add_argument("--seconds", type=float, default=1.5)
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
    vocab, dim, heads, depth, batch = (30522, 768, 12, 8, 16) if cuda else (500, 32, 2, 2, 2)
    scale = 1 if cuda else 16  # CPU: lengths 16-64
    rng = random.Random(0)
    lengths = [rng.randrange(256, 1025, 32) // scale for _ in range(16)]  # one cycle of batches
    buckets = [b // scale for b in BUCKETS]

    emb = nn.Embedding(vocab, dim).to(device)
    layer = nn.TransformerEncoderLayer(
        dim, heads, 4 * dim, dropout=0.0, batch_first=True, norm_first=True
    )
    encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False).to(device)
    head = nn.Linear(dim, 2).to(device)
    params = [*emb.parameters(), *encoder.parameters(), *head.parameters()]
    opt = torch.optim.AdamW(params, lr=2e-5, capturable=args.fix == "graphs")
    docs = torch.randint(1, vocab, (64, 1024 // scale), device=device)
    labels = torch.randint(0, 2, (64,), device=device)
    state = {"i": 0}

    def step():
        i = state["i"]
        state["i"] += 1
        n = lengths[i % len(lengths)]
        if args.fix == "bucket":
            n = next(b for b in buckets if b >= n)
        rows = torch.arange(i * batch, (i + 1) * batch, device=device) % docs.shape[0]
        tokens, y = docs[rows, :n], labels[rows]
        with torch.autocast(device.type, dtype=torch.bfloat16):
            h = encoder(emb(tokens))
            loss = F.cross_entropy(head(h.mean(1)), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if args.fix == "none":
            torch.cuda.empty_cache()

    if args.fix == "graphs":
        graphs = capture_lengths(
            (emb, encoder, head), opt, sorted(set(lengths)), docs, labels, batch
        )

        def step():
            i = state["i"]
            state["i"] += 1
            n = lengths[i % len(lengths)]
            rows = torch.arange(i * batch, (i + 1) * batch, device=device) % docs.shape[0]
            graph, tokens, y = graphs[n]
            tokens.copy_(docs[rows, :n])
            y.copy_(labels[rows])
            graph.replay()
            torch.cuda.empty_cache()

    for _ in range(len(lengths)):
        step()
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    n = 0
    while n < 10 or time.perf_counter() - t0 < args.seconds or n % len(lengths):
        step()
        n += 1
    if cuda:
        torch.cuda.synchronize()
    ms = (time.perf_counter() - t0) * 1e3 / n
    print("RESULT " + json.dumps({"step_ms": round(ms, 3), "steps": n, "fix": args.fix}))


if __name__ == "__main__":
    main()
