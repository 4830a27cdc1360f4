"""100-class MLP classifier whose evaluation metrics are kept by a background thread: every
step the loop hands the batch's top-5 predictions to a metrics thread, which updates a
calibration histogram (ECE), a margin histogram, per-rank hit rates, a confusion matrix,
per-class tallies and top-1/top-5 hit counts in a Python loop over the 8192 predictions.

The thread was meant to keep metrics off the training loop's path, but its loop is pure Python
and holds the GIL. Every time the training thread lets go of the GIL (each CUDA launch, the
backward, the optimizer step) the metrics thread takes it, and the training thread then waits up
to a switch interval (5 ms) to get it back, so the GPU runs out of queued work.
# H100 estimate: GPU ~14 ms/step (4 residual MLP blocks of width 2048, batch 8192, bf16);
# launches ~5 ms; the metrics thread ~25 ms of Python per step, which the GIL serialises with
# the launches -> none ~30 ms (the same loop measured 31-34 ms with a 23 ms Python thread).
# --fix pool (the same per-step scoring in a multiprocessing.Pool of 4 processes, handed over
# once the batch's copy has landed): ~14.5 ms (~2x).
# --fix numpy (the same statistics vectorised with numpy inside the thread; numpy releases the
# GIL): ~14.5 ms.
# --fix nothread (no metrics thread and no metrics): the limit, ~14.5 ms.
"""

import argparse
import json
import multiprocessing
import queue
import threading
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

CLASSES = 100
BINS = 15  # calibration histogram


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 4 * width)
        self.fc2 = nn.Linear(4 * width, width)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


def new_stats():
    return {
        "n": 0,
        "top1": 0,
        "top5": 0,
        "bin_n": [0] * BINS,
        "bin_conf": [0.0] * BINS,
        "bin_hit": [0] * BINS,
        "margin_n": [0] * BINS,
        "mass5": 0.0,
        "rank_conf": [0.0] * 5,
        "rank_hit": [0] * 5,
        "seen": [0] * CLASSES,
        "predicted": [0] * CLASSES,
        "class_conf": [0.0] * CLASSES,
        "confusion": [[0] * CLASSES for _ in range(CLASSES)],
    }


def score_python(stats, conf, top5, labels):
    """Per prediction, in Python: confidence and hits at each of the 5 ranks, calibration bin,
    margin bin, confusion cell, per-class tallies, top-1 and top-5 hits, top-5 mass."""
    bin_n, bin_conf, bin_hit = stats["bin_n"], stats["bin_conf"], stats["bin_hit"]
    confusion, seen, predicted = stats["confusion"], stats["seen"], stats["predicted"]
    class_conf, margin_n = stats["class_conf"], stats["margin_n"]
    rank_conf, rank_hit = stats["rank_conf"], stats["rank_hit"]
    for c5, t5, y in zip(conf, top5, labels, strict=True):
        for rank, (t, ck) in enumerate(zip(t5, c5, strict=True)):
            rank_conf[rank] += ck
            if t == y:
                rank_hit[rank] += 1
        c = c5[0]
        b = min(int(c * BINS), BINS - 1)
        margin_n[min(int((c - c5[1]) * BINS), BINS - 1)] += 1
        stats["mass5"] += sum(c5)
        top = t5[0]
        bin_n[b] += 1
        bin_conf[b] += c
        seen[y] += 1
        predicted[top] += 1
        class_conf[top] += c
        if top == y:
            bin_hit[b] += 1
            stats["top1"] += 1
        if y in t5:
            stats["top5"] += 1
        confusion[y][top] += 1
    stats["n"] += len(labels)


def score_numpy(stats, conf, top5, labels):
    """The same statistics with whole-array numpy operations."""
    c = conf[:, 0]
    b = np.minimum((c * BINS).astype(np.int64), BINS - 1)
    margin = np.minimum(((c - conf[:, 1]) * BINS).astype(np.int64), BINS - 1)
    hit = top5[:, 0] == labels
    stats["bin_n"] += np.bincount(b, minlength=BINS)
    stats["bin_conf"] += np.bincount(b, weights=c, minlength=BINS)
    stats["margin_n"] += np.bincount(margin, minlength=BINS)
    stats["mass5"] += float(conf.sum())
    stats["rank_conf"] += conf.sum(axis=0)
    stats["rank_hit"] += (top5 == labels[:, None]).sum(axis=0)
    stats["bin_hit"] += np.bincount(b, weights=hit, minlength=BINS).astype(np.int64)
    stats["top1"] += int(hit.sum())
    stats["top5"] += int((top5 == labels[:, None]).any(axis=1).sum())
    stats["seen"] += np.bincount(labels, minlength=CLASSES)
    stats["predicted"] += np.bincount(top5[:, 0], minlength=CLASSES)
    stats["class_conf"] += np.bincount(top5[:, 0], weights=c, minlength=CLASSES)
    cells = np.bincount(labels * CLASSES + top5[:, 0], minlength=CLASSES * CLASSES)
    stats["confusion"] += cells.reshape(CLASSES, CLASSES)
    stats["n"] += len(labels)


def numpy_stats():
    return {
        "n": 0,
        "top1": 0,
        "top5": 0,
        "bin_n": np.zeros(BINS, np.int64),
        "bin_conf": np.zeros(BINS),
        "bin_hit": np.zeros(BINS, np.int64),
        "margin_n": np.zeros(BINS, np.int64),
        "mass5": 0.0,
        "rank_conf": np.zeros(5),
        "rank_hit": np.zeros(5, np.int64),
        "seen": np.zeros(CLASSES, np.int64),
        "predicted": np.zeros(CLASSES, np.int64),
        "class_conf": np.zeros(CLASSES),
        "confusion": np.zeros((CLASSES, CLASSES), np.int64),
    }


def score_chunk(conf, top5, labels):
    """In a pool process: one step's statistics, returned for the parent to add up."""
    stats = new_stats()
    score_python(stats, conf.tolist(), top5.tolist(), labels.tolist())
    return {k: np.asarray(v) for k, v in stats.items()}


class MetricsThread(threading.Thread):
    def __init__(self, vectorised):
        super().__init__(daemon=True)
        self.inbox = queue.Queue()
        self.vectorised = vectorised
        self.stats = numpy_stats() if vectorised else new_stats()

    def run(self):
        while True:
            item = self.inbox.get()
            if item is None:
                return
            ready, conf, top5, labels = item
            if ready is not None:
                ready.synchronize()  # the copy to host memory has landed
            if self.vectorised:
                score_numpy(self.stats, conf.numpy(), top5.numpy(), labels.numpy())
            else:
                score_python(self.stats, conf.tolist(), top5.tolist(), labels.tolist())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fix", default="none", choices=["none", "pool", "numpy", "nothread"])
    p.add_argument("--seconds", type=float, default=1.5)
    p.add_argument("--device", default="auto")
    args = p.parse_args()
    device = torch.device(
        args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    )
    cuda = device.type == "cuda"
    batch, feats, width, depth = (8192, 512, 2048, 4) if cuda else (1024, 64, 128, 2)

    pool = None
    totals = numpy_stats()
    if args.fix == "pool":  # forked before CUDA is touched; the workers never use it
        pool = multiprocessing.get_context("fork").Pool(4)

    def merge(part):  # in the pool's result thread: a few small array additions
        for k in totals:
            totals[k] += part[k]

    torch.manual_seed(0)
    with torch.device(device):
        model = nn.Sequential(
            nn.Linear(feats, width),
            *[Block(width) for _ in range(depth)],
            nn.Linear(width, CLASSES),
        )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda or None)
    data = [
        (
            torch.randn(batch, feats, device=device),
            torch.randint(0, CLASSES, (batch,), device=device),
        )
        for _ in range(4)
    ]
    thread = None
    if args.fix in ("none", "numpy"):
        thread = MetricsThread(vectorised=args.fix == "numpy")
        thread.start()
    pending = []  # --fix pool: (event, conf, top5, labels) whose copy may not have landed yet
    state = {"i": 0}

    def step():
        x, y = data[state["i"] % len(data)]
        state["i"] += 1
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            logits = model(x)
        loss = F.cross_entropy(logits.float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if args.fix == "nothread":
            return
        conf, top5 = logits.detach().float().softmax(dim=-1).topk(5, dim=-1)
        host = [t.to("cpu", non_blocking=cuda) for t in (conf, top5, y)]
        ready = None
        if cuda:
            ready = torch.cuda.Event()
            ready.record()
        if thread is not None:
            thread.inbox.put((ready, *host))
            return
        pending.append((ready, *host))
        while pending and (pending[0][0] is None or pending[0][0].query()):
            _, c, t5, lab = pending.pop(0)
            pool.apply_async(score_chunk, (c.numpy(), t5.numpy(), lab.numpy()), callback=merge)

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
    for _, c, t5, lab in pending:  # --fix pool: the last steps' copies have landed by now
        pool.apply_async(score_chunk, (c.numpy(), t5.numpy(), lab.numpy()), callback=merge)
    if thread is not None:
        thread.inbox.put(None)
        thread.join()
    if pool is not None:
        pool.close()
        pool.join()
    print("RESULT " + json.dumps({"step_ms": round(ms, 3), "steps": n, "fix": args.fix}))


if __name__ == "__main__":
    main()
