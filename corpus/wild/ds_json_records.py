"""Click-through-rate model (hashed categorical embeddings + a wide MLP) trained straight from
JSON-lines event records.

The records are kept as the raw lines of the event export. Every step the training loop takes
the next slice of lines and builds the batch itself: json.loads of each line, dict lookups for
the fields, feature hashing of the categorical values into embedding buckets, a padded list of
the item's tags, float features, then torch.tensor of the lists of lists. There is no
DataLoader, so the GPU waits while the loop parses.
# H200 estimate: GPU ~8 ms/step (batch 2048; 8 hashed fields x 64 dims + 16 tags + 13 dense
# into a 4096-wide 3-layer fp32 MLP, ~0.45 TFLOP at ~55 TFLOP/s); host ~12 us of Python per
# record (json.loads of ~560 bytes, hashing, list building, torch.tensor; 35 ms per batch on
# the 2-core dev box) -> ~25 ms per batch, which the GPU waits for -> none ~27 ms.
# --fix workers (the same parsing in a DataLoader with 8 worker processes, each building whole
# batches, pin_memory): ~4 ms per batch per worker-share, under the GPU's 8 ms -> ~8.5 ms
# (~3x); the parsing stays, in parallel.
# --fix resident (the input work removed entirely: POOL batches parsed before the loop, kept on
# the GPU and cycled; no parsing and no copy in the loop) -> the GPU's ~8 ms.
"""

import argparse
import itertools
import json
import time
import zlib
from contextlib import nullcontext

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

POOL = 8  # --fix resident: device batches built before the loop and cycled
FIELDS = ["user_id", "item_id", "shop_id", "brand", "category", "country", "device", "hour"]
DENSE = ["price", "discount", "rating", "n_reviews", "dwell_s", "scroll_depth", "age_days",
         "ctr_7d", "ctr_30d", "carts_7d", "views_7d", "position", "session_len"]  # fmt: skip
MAX_TAGS = 16


def make_lines(n, seed=0):
    """Event records as JSON lines, the way the export writes them."""
    rng = np.random.default_rng(seed)
    ints = rng.integers(0, [1 << 40, 1_000_000, 200_000, 5_000, 3_000, 6, 3, 24, 40, 40, 40, 24],
                        (n, 12))  # fmt: skip
    dense = rng.random((n, len(DENSE))).round(4).tolist()
    tag_ids = rng.integers(0, 500, (n, 24)).tolist()
    clicked = (rng.random(n) < 0.1).tolist()
    lines = []
    for i, r in enumerate(ints.tolist()):
        rec = {
            "event_id": f"ev-{r[0]:x}",
            "user_id": r[1],
            "item_id": r[2],
            "shop_id": r[3],
            "brand": f"brand_{r[4]}",
            "category": f"c{r[8]}/c{r[9]}/c{r[10]}",
            "country": ["de", "fr", "us", "br", "jp", "in"][r[5]],
            "device": ["ios", "android", "web"][r[6]],
            "hour": r[7],
            "tags": [f"t{t}" for t in tag_ids[i][: r[11]]],
            "dense": dict(zip(DENSE, dense[i], strict=True)),
            "clicked": clicked[i],
        }
        lines.append(json.dumps(rec))
    return lines


def bucket(field, value, buckets):
    return zlib.crc32(f"{field}={value}".encode()) % buckets


def parse_batch(lines, buckets):
    """JSON lines -> (categorical ids, tag ids, dense features, labels) tensors."""
    cats, tags, dense, labels = [], [], [], []
    for line in lines:
        rec = json.loads(line)
        cats.append([bucket(f, rec[f], buckets) for f in FIELDS])
        t = [bucket("tag", v, buckets) + 1 for v in rec["tags"][:MAX_TAGS]]
        tags.append(t + [0] * (MAX_TAGS - len(t)))
        d = rec["dense"]
        dense.append([float(d.get(k, 0.0)) for k in DENSE])
        labels.append(1.0 if rec["clicked"] else 0.0)
    return torch.tensor(cats), torch.tensor(tags), torch.tensor(dense), torch.tensor(labels)


class RecordBatches(Dataset):
    """--fix workers: batch k of the lines, parsed by the same function in a worker."""

    def __init__(self, lines, batch, buckets):
        self.lines, self.batch, self.buckets = lines, batch, buckets

    def __len__(self):
        return 1_000_000

    def __getitem__(self, k):
        start = (k * self.batch) % (len(self.lines) - self.batch)
        return parse_batch(self.lines[start : start + self.batch], self.buckets)


class CTRModel(nn.Module):
    def __init__(self, buckets, emb, width, depth):
        super().__init__()
        self.cat = nn.Embedding(buckets, emb)
        self.tags = nn.EmbeddingBag(buckets + 1, emb, mode="mean", padding_idx=0)
        layers, d_in = [], len(FIELDS) * emb + emb + len(DENSE)
        for _ in range(depth):
            layers += [nn.Linear(d_in, width), nn.ReLU()]
            d_in = width
        self.mlp = nn.Sequential(*layers, nn.Linear(d_in, 1))

    def forward(self, cats, tags, dense):
        x = torch.cat([self.cat(cats).flatten(1), self.tags(tags), dense], dim=1)
        return self.mlp(x).squeeze(1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fix", default="none", choices=["none", "workers", "resident"])
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--device", default="auto")
    args = p.parse_args()
    device = torch.device(
        args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    )
    torch.manual_seed(0)
    cuda = device.type == "cuda"
    n_lines, batch, buckets, emb, width, depth = (
        (16_384, 2048, 1 << 18, 64, 4096, 3) if cuda else (400, 16, 1 << 10, 8, 32, 2)
    )

    def nvtx(name):
        return torch.cuda.nvtx.range(name) if cuda else nullcontext()

    lines = make_lines(n_lines)
    model = CTRModel(buckets, emb, width, depth).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)

    if args.fix == "workers":
        loader = DataLoader(
            RecordBatches(lines, batch, buckets),
            batch_size=None,
            num_workers=8 if cuda else 2,
            pin_memory=cuda,
            persistent_workers=True,
        )
        batches = iter(loader)
    elif args.fix == "resident":
        pool = [
            tuple(t.to(device) for t in parse_batch(lines[k * batch : (k + 1) * batch], buckets))
            for k in range(POOL)
        ]
        batches = itertools.cycle(pool)
    else:

        def read_batches():
            for k in itertools.count():
                start = (k * batch) % (len(lines) - batch)
                yield parse_batch(lines[start : start + batch], buckets)

        batches = read_batches()

    def step():
        with nvtx("batch"):
            cats, tags, dense, y = (t.to(device, non_blocking=True) for t in next(batches))
        with nvtx("train"):
            loss = F.binary_cross_entropy_with_logits(model(cats, tags, dense), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

    for _ in range(5):
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
    print("RESULT " + json.dumps({"step_ms": round(ms, 3), "steps": n, "fix": args.fix}))


if __name__ == "__main__":
    main()
