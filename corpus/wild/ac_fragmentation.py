"""GPT-style pretraining on packed documents of varying length, on a GPU shared with another
job: the script caps its own memory (torch.cuda.set_per_process_memory_fraction) at 10% over
what its longest batch needs, measured at start-up. No empty_cache anywhere.
# H200 estimate: 8 layers of width 1024 (16 heads), batch 8, lengths 256-1536 (a shuffled cycle
# of 16, ~7 K tokens a step), bf16 autocast: ~4 TFLOP of GEMMs and attention, ~10 ms of GPU
# work a step. With every length different the caching allocator's segments (one per tensor
# of 10 MB or more) fragment: blocks cut for one length fit the next one badly, reserved memory
# reaches the cap, and the allocator then frees cached segments (cudaFree: a device sync) and
# asks the driver again, several times a step (num_alloc_retries and cudaMalloc/cudaFree
# inside the steps) -> none assumed ~13-15 ms/step.
# --fix expandable (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: one segment per stream
# that grows and shrinks in 2 MB pages, so freed memory is reused whatever the sizes and the
# cap is not reached) -> ~10 ms (~1.4x).
# --fix nocap (the cap left out: the cache grows to its fragmented size, ~1.5-2x the peak, and
# never gives memory back) -> ~10 ms. It is the removal: no churn, same allocator and model.
"""

import argparse
import json
import os
import random
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, self.heads, d // self.heads).unbind(2)
        a = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        x = x + self.proj(a.transpose(1, 2).reshape(b, n, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab, dim, heads, depth):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(depth)])
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx):
        return self.head(self.ln(self.blocks(self.emb(idx))))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fix", default="none", choices=["none", "expandable", "nocap"])
    p.add_argument("--seconds", type=float, default=1.5)
    p.add_argument("--device", default="auto")
    args = p.parse_args()
    if args.fix == "expandable":  # before this process's first CUDA allocation
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    device = torch.device(
        args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    )
    cuda = device.type == "cuda"
    if cuda and args.fix == "expandable":
        torch.cuda.memory._set_allocator_settings("expandable_segments:True")
    torch.manual_seed(0)
    vocab, dim, heads, depth, batch = (16384, 1024, 16, 8, 8) if cuda else (256, 32, 2, 2, 2)
    scale = 1 if cuda else 32  # CPU: lengths 8-48
    rng = random.Random(1)
    lengths = [rng.randrange(256, 1537, 64) // scale for _ in range(16)]
    model = GPT(vocab, dim, heads, depth).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    corpus = torch.randint(0, vocab, (64, 1536 // scale + 1), device=device)
    state = {"i": 0}

    def step(n=None):
        i = state["i"]
        state["i"] += 1
        n = n or lengths[i % len(lengths)]
        rows = torch.arange(i * batch, (i + 1) * batch, device=device) % corpus.shape[0]
        tok = corpus[rows, : n + 1]
        with torch.autocast(device.type, dtype=torch.bfloat16):
            logits = model(tok[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1), tok[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    if cuda and args.fix != "nocap":  # the job's memory budget: the longest batch plus 10%
        step(max(lengths))
        torch.cuda.reset_peak_memory_stats()
        step(max(lengths))
        peak = torch.cuda.max_memory_allocated()
        total = torch.cuda.get_device_properties(device).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, 1.1 * peak / total))
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
