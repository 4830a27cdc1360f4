"""Short fine-tuning run of a small GPT-style model under torch.compile: the compile takes far
longer than the 50 training steps that follow it.

Batches are read the nanoGPT way: a fresh np.memmap of the token file per batch, random windows
sliced out, pinned and copied with non_blocking=True. Captured whole, the run is mostly the
compile (the compiler reads and writes many files, while the GPU idles), then ~1 s of steady,
GPU-bound training.
# H100 estimate (not yet timed): 6 blocks, width 768, vocabulary 8192 (~55 M parameters), batch
# 32 x 512 tokens, bf16 autocast: ~5.5 TFLOP per step -> GPU ~15-20 ms/step; host ~2-3 ms (the
# compiled graphs' launches, AdamW, the batch ~0.5 ms). Cold compile (forward and backward)
# ~20-40 s, from a warm inductor cache ~5-10 s; 50 steps ~1 s.
# Suspect --fix resident (the token file on the GPU, windows gathered there: no memmap, no
# copy): what a tool that reads the compiler's file reads as input stalls would suggest; the
# batch costs ~1% of a step -> ~1.0x.
"""

import argparse
import json
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

DATA = os.environ.get("CORPUS_DATA_DIR", "/var/tmp/wild_corpus") + "/tokens"


def token_file(n_tokens, vocab):
    """A uint16 token file (written once, then reused)."""
    os.makedirs(DATA, exist_ok=True)
    path = f"{DATA}/train_{vocab}_{n_tokens}.bin"
    if not os.path.exists(path) or os.path.getsize(path) != 2 * n_tokens:
        rng = np.random.default_rng(0)
        # a little structure, so the loss can fall: runs of repeated bigrams
        base = rng.integers(0, vocab, n_tokens // 4, dtype=np.uint16)
        np.repeat(base, 4).tofile(path + ".tmp")
        os.replace(path + ".tmp", path)
    return path


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        a = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab, d, layers, heads, seq):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fix", default="none", choices=["none", "resident"])
    p.add_argument("--steps", type=int, help="training steps after the warm-up (50; CPU: 10)")
    p.add_argument("--seconds", type=float, default=0.0, help="and at least this long")
    p.add_argument("--device", default="auto")
    args = p.parse_args()
    device = torch.device(
        args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    )
    torch.manual_seed(0)
    cuda = device.type == "cuda"
    steps = args.steps if args.steps is not None else (50 if cuda else 10)
    vocab, d, layers, heads, seq, batch = (
        (8192, 768, 6, 12, 512, 32) if cuda else (256, 64, 2, 4, 32, 4)
    )
    path = token_file(4_000_000 if cuda else 100_000, vocab)

    model = GPT(vocab, d, layers, heads, seq).to(device)
    # on a CPU-only box, skip inductor's C++ codegen (slow to build); the traced graphs are the same
    compiled = torch.compile(model) if cuda else torch.compile(model, backend="aot_eager")
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    on_gpu = (
        torch.from_numpy(np.fromfile(path, dtype=np.uint16).astype(np.int64)).to(device)
        if args.fix == "resident"
        else None
    )
    offsets = torch.arange(seq, device=device)

    def get_batch():
        if on_gpu is not None:
            ix = torch.randint(len(on_gpu) - seq - 1, (batch, 1), device=device) + offsets
            return on_gpu[ix], on_gpu[ix + 1]
        data = np.memmap(path, dtype=np.uint16, mode="r")  # re-opened per batch, as nanoGPT does
        ix = torch.randint(len(data) - seq - 1, (batch,))
        x = torch.stack([torch.from_numpy(data[i : i + seq].astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy(data[i + 1 : i + 1 + seq].astype(np.int64)) for i in ix])
        if cuda:
            x, y = x.pin_memory(), y.pin_memory()
        return x.to(device, non_blocking=True), y.to(device, non_blocking=True)

    def step():
        x, y = get_batch()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            logits = compiled(x)
        loss = F.cross_entropy(logits.float().view(-1, vocab), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    for _ in range(3):  # the first step compiles the forward and the backward
        step()
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    n = 0
    while n < steps or time.perf_counter() - t0 < args.seconds:
        loss = step()
        n += 1
    if cuda:
        torch.cuda.synchronize()
    ms = (time.perf_counter() - t0) * 1e3 / n
    print(f"final loss {loss.item():.3f}")
    print("RESULT " + json.dumps({"step_ms": round(ms, 3), "steps": n, "fix": args.fix}))


if __name__ == "__main__":
    main()
