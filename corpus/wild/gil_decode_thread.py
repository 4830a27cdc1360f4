"""Next-item recommender (a small transformer over a user's last 64 events) trained on raw
session logs: each training example is one JSON line (user, country, platform and a list of
events, each an item SKU, an event type and a dwell time). A prefetch thread decodes the next
batches while the GPU trains: json.loads per line, a vocabulary lookup per SKU, dwell times
bucketed, sessions padded, then torch.tensor, into a queue.Queue(maxsize=4).

The thread keeps up: the queue is full almost every time the loop asks for a batch, so the loop
never waits on it. But the decoding is pure Python and holds the GIL for the whole batch, so
every time the training thread releases the GIL (each CUDA launch) it waits for the decoder to
give it back (up to the 5 ms switch interval): while a batch is decoded the training thread
launches one kernel every few ms and the GPU runs dry.
# H200 estimate: GPU ~5-6 ms/step (4 layers of d_model 512, 192 sessions x 63 events, a
# 16384-item head, bf16, ~250 launches); the training thread's own host work ~3 ms; the decoder
# ~10-14 ms of Python per batch (~60 us per session; 25 ms on a 2-core CI box), a little more than
# the GPU step but less than the loop's step, so the queue stays full. While it decodes, each of
# the training thread's GIL releases hands it the GIL for a switch interval: the two are
# serialised (only the backward, which runs without the GIL, overlaps) -> none ~13-17 ms.
# --fix process (the same decoder in 4 DataLoader worker processes: a batch every ~3 ms between
# them, tensors handed over in shared memory): ~6 ms (~2.5x).
# --fix nothread (8 batches decoded before the loop and cycled, no thread): the limit, ~6 ms.
"""

import argparse
import json
import math
import queue
import random
import threading
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

EVENT_TYPES = {"view": 1, "click": 2, "cart": 3, "buy": 4}
DWELL_BUCKETS = 16
PAD = 0


def make_log(n_lines, n_items, events, seed=0):
    """Synthetic session log lines (JSON text), as the export job writes them."""
    rng = random.Random(seed)
    types = list(EVENT_TYPES)
    lines = []
    for s in range(n_lines):
        evs = [
            {
                "sku": f"sku_{int(rng.paretovariate(1.2)) % n_items:06d}",
                "type": rng.choice(types),
                "dwell_ms": rng.randint(50, 60000),
            }
            for _ in range(rng.randint(events // 2, events + 16))
        ]
        rec = {
            "session": f"s{s:08d}",
            "user": f"u{rng.randint(0, 10**6)}",
            "country": rng.choice(["de", "fr", "us", "br", "in", "jp"]),
            "platform": rng.choice(["ios", "android", "web"]),
            "events": evs,
        }
        lines.append(json.dumps(rec))
    return lines


def decode_batch(lines, vocab, events):
    """JSON lines -> (items, types, dwell) int64 tensors [batch, events], left-padded."""
    items, kinds, dwell = [], [], []
    for line in lines:
        rec = json.loads(line)
        evs = rec["events"][-events:]
        it = [vocab.get(e["sku"], 1) for e in evs]
        ty = [EVENT_TYPES.get(e["type"], 0) for e in evs]
        dw = [min(int(math.log2(1 + e["dwell_ms"])), DWELL_BUCKETS - 1) for e in evs]
        pad = [PAD] * (events - len(evs))
        items.append(pad + it)
        kinds.append(pad + ty)
        dwell.append(pad + dw)
    return torch.tensor(items), torch.tensor(kinds), torch.tensor(dwell)


class SessionBatches(torch.utils.data.IterableDataset):
    """Endless batches of random log lines, decoded (by the thread or in worker processes)."""

    def __init__(self, lines, vocab, batch, events):
        self.lines, self.vocab, self.batch, self.events = lines, vocab, batch, events

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        rng = random.Random(info.id if info else 0)
        while True:
            yield decode_batch(rng.sample(self.lines, self.batch), self.vocab, self.events)


def prefetch(batches, q, stop):
    for b in batches:
        while not stop.is_set():
            try:
                q.put(b, timeout=0.1)
                break
            except queue.Full:
                pass
        if stop.is_set():
            return


class NextItem(nn.Module):
    def __init__(self, n_items, d, layers, events):
        super().__init__()
        self.item = nn.Embedding(n_items, d, padding_idx=PAD)
        self.kind = nn.Embedding(len(EVENT_TYPES) + 1, d)
        self.dwell = nn.Embedding(DWELL_BUCKETS, d)
        self.pos = nn.Parameter(torch.zeros(events, d))
        layer = nn.TransformerEncoderLayer(d, 8, 4 * d, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, n_items)

    def forward(self, items, kinds, dwell):
        h = self.item(items) + self.kind(kinds) + self.dwell(dwell) + self.pos[: items.shape[1]]
        mask = nn.Transformer.generate_square_subsequent_mask(items.shape[1], device=h.device)
        return self.head(self.norm(self.encoder(h, mask=mask, is_causal=True)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fix", default="none", choices=["none", "process", "nothread"])
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--device", default="auto")
    args = p.parse_args()
    device = torch.device(
        args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    )
    cuda = device.type == "cuda"
    batch, events, d, layers, n_items, n_lines = (
        (192, 64, 512, 4, 16384, 2000) if cuda else (16, 16, 32, 1, 512, 200)
    )

    lines = make_log(n_lines, n_items, events)
    vocab = {f"sku_{i:06d}": i for i in range(2, n_items)}  # the catalogue's id table
    data = SessionBatches(lines, vocab, batch, events)
    q, stop, fixed = queue.Queue(maxsize=4), threading.Event(), None
    if args.fix == "process":  # workers forked before CUDA is touched; they never use it
        loader = torch.utils.data.DataLoader(data, batch_size=None, num_workers=4)
        source = iter(loader)
    elif args.fix == "nothread":
        it = iter(data)
        fixed = [next(it) for _ in range(8)]
    else:
        threading.Thread(target=prefetch, args=(iter(data), q, stop), daemon=True).start()

    torch.manual_seed(0)
    model = NextItem(n_items, d, layers, events).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda or None)
    state = {"i": 0}

    def next_batch():
        state["i"] += 1
        if fixed is not None:
            return fixed[state["i"] % len(fixed)]
        return next(source) if args.fix == "process" else q.get()

    def step():
        items, kinds, dwell = (t.to(device, non_blocking=True) for t in next_batch())
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            logits = model(items[:, :-1], kinds[:, :-1], dwell[:, :-1])
        loss = F.cross_entropy(
            logits.float().flatten(0, 1), items[:, 1:].flatten(), ignore_index=PAD
        )
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
    print("RESULT " + json.dumps({"step_ms": round(ms, 3), "steps": n, "fix": args.fix}))


if __name__ == "__main__":
    main()
