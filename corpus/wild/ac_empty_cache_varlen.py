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
"""

import argparse
import json
import random
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

BUCKETS = (448, 640, 832, 1024)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fix", default="none", choices=["none", "nocall", "bucket"])
    p.add_argument("--seconds", type=float, default=1.5)
    p.add_argument("--device", default="auto")
    args = p.parse_args()
    device = torch.device(
        args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    )
    cuda = device.type == "cuda"
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
    opt = torch.optim.AdamW(params, lr=2e-5)
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
