"""Bag-of-words text classifier trained on a pre-tokenized shard while a background thread
tokenizes the next shards: lower-casing, a regex split, a vocabulary lookup per word, hashed
bigrams, truncation and padding, all in Python, one document at a time.

Training and tokenizing were meant to overlap, but the tokenizer thread never waits on
anything: it holds the GIL for as long as the interpreter lets it (the switch interval, 5 ms).
Each time the training thread releases the GIL (every CUDA launch, the backward, the optimizer
step) the tokenizer takes it, and the training thread waits up to 5 ms to get it back before it
can launch its next kernel: the GPU spends most of each step idle.
# H100 estimate: GPU ~13 ms/step (EmbeddingBag over 128 ids per document, then 4 residual MLP
# blocks of width 2048, batch 8192, bf16); launches ~5 ms. A Python thread that never blocks cost
# a similar loop 40x (600 ms/step against 14 ms) -> none: hundreds of ms per step.
# --fix process (the same tokenizer in a multiprocessing.Process writing .npy shards): ~13 ms.
# --fix nothread (no next-shard preparation at all): the limit, ~13 ms.
"""

import argparse
import itertools
import json
import multiprocessing
import os
import random
import re
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

WORD = re.compile(r"[a-z0-9']+")
IDS = 128  # per document: 64 word ids, then 64 hashed bigrams
BUCKETS = 1 << 18
UNK, PAD = 1, 0


def data_dir():
    root = os.environ.get("CORPUS_DATA_DIR", "/tmp/wild_corpus")
    d = Path(root) / "gil_shard_prep"
    d.mkdir(parents=True, exist_ok=True)
    return d


def raw_documents(n_docs):
    """`n_docs` synthetic reviews (Zipf-like words, punctuation, mixed case), cached as text."""
    path = data_dir() / f"docs_{n_docs}.txt"
    if not path.exists():
        rng = random.Random(0)
        letters = "abcdefghijklmnopqrstuvwxyz"
        words = [
            "".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(30000)
        ]
        weights = [1.0 / (r + 1) for r in range(len(words))]
        lines = []
        for _ in range(n_docs):
            toks = rng.choices(words, weights, k=rng.randint(40, 90))
            lines.append(" ".join(t.capitalize() if rng.random() < 0.1 else t for t in toks) + ".")
        tmp = path.with_suffix(".tmp")
        tmp.write_text("\n".join(lines))
        tmp.rename(path)
    return path.read_text().split("\n")


def build_vocab(docs, size=50000):
    counts = {}
    for d in docs[:5000]:
        for w in WORD.findall(d.lower()):
            counts[w] = counts.get(w, 0) + 1
    ranked = sorted(counts, key=counts.get, reverse=True)[: size - 2]
    return {w: i + 2 for i, w in enumerate(ranked)}


def tokenize(doc, vocab):
    """One document -> IDS ints: word ids then hashed bigrams, truncated and padded."""
    ids = [vocab.get(w, UNK) for w in WORD.findall(doc.lower())]
    grams = [(a * 1000003 + b) % BUCKETS for a, b in itertools.pairwise(ids)]
    half = IDS // 2
    ids, grams = ids[:half], grams[:half]
    return ids + [PAD] * (half - len(ids)) + grams + [PAD] * (half - len(grams))


def tokenize_shards(docs, vocab, stop, out_dir=None):
    """Tokenize shard after shard until `stop` is set (the next epochs' data)."""
    shard = 0
    while not stop.is_set():
        rows = []
        for doc in docs:
            if stop.is_set():
                return
            rows.append(tokenize(doc, vocab))
        if out_dir is not None:
            np.save(Path(out_dir) / f"shard_{shard % 4}.npy", np.asarray(rows, np.int32))
        shard += 1


class Classifier(nn.Module):
    def __init__(self, dim, width, depth, classes=2):
        super().__init__()
        self.embed = nn.EmbeddingBag(BUCKETS, dim, mode="mean", padding_idx=PAD)
        self.proj = nn.Linear(dim, width)
        self.blocks = nn.ModuleList(
            nn.Sequential(
                nn.LayerNorm(width),
                nn.Linear(width, 4 * width),
                nn.GELU(),
                nn.Linear(4 * width, width),
            )
            for _ in range(depth)
        )
        self.head = nn.Linear(width, classes)

    def forward(self, ids):
        h = self.proj(self.embed(ids))
        for block in self.blocks:
            h = h + block(h)
        return self.head(h)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fix", default="none", choices=["none", "process", "nothread"])
    p.add_argument("--seconds", type=float, default=1.5)
    p.add_argument("--device", default="auto")
    args = p.parse_args()
    device = torch.device(
        args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    )
    cuda = device.type == "cuda"
    # the CPU size's bag table: 1 << 15 rows (still above the ~30k word ids), not 1 << 18, whose
    # dense AdamW update made its step ~1 s
    global BUCKETS
    batch, dim, width, depth, n_docs, BUCKETS = (
        (8192, 512, 2048, 4, 20000, 1 << 18) if cuda else (256, 32, 64, 2, 2000, 1 << 15)
    )

    docs = raw_documents(n_docs)
    vocab = build_vocab(docs)
    shard = torch.tensor([tokenize(d, vocab) for d in docs])  # the current shard, tokenized
    labels = torch.tensor([len(d) % 2 for d in docs])

    stop = threading.Event()
    worker = None
    out_dir = tempfile.mkdtemp(prefix="gil_shard_prep_")
    if args.fix == "none":
        worker = threading.Thread(target=tokenize_shards, args=(docs, vocab, stop, out_dir))
    elif args.fix == "process":  # forked before CUDA is touched; the child never uses it
        stop = multiprocessing.get_context("fork").Event()
        worker = multiprocessing.get_context("fork").Process(
            target=tokenize_shards, args=(docs, vocab, stop, out_dir)
        )
    if worker is not None:
        worker.start()

    torch.manual_seed(0)
    with torch.device(device):
        model = Classifier(dim, width, depth)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda or None)
    ids, ys = shard.to(device), labels.to(device)
    gen = torch.Generator(device=device).manual_seed(0)

    def step():
        pick = torch.randint(0, ids.shape[0], (batch,), device=device, generator=gen)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            logits = model(ids[pick])
        loss = F.cross_entropy(logits.float(), ys[pick])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(3):
        step()
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    n = 0
    while n < 10 or time.perf_counter() - t0 < args.seconds:
        step()
        n += 1
    if cuda:
        torch.cuda.synchronize()
    ms = (time.perf_counter() - t0) * 1e3 / n
    stop.set()
    if worker is not None:
        worker.join()
    for f in Path(out_dir).glob("*.npy"):
        f.unlink()
    os.rmdir(out_dir)
    print("RESULT " + json.dumps({"step_ms": round(ms, 3), "steps": n, "fix": args.fix}))


if __name__ == "__main__":
    main()
