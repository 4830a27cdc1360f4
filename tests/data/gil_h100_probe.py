"""How much a busy Python thread costs a GPU training loop through the GIL, per design.

The probe behind the H100 figures in scenarios/gil_contention.py and the GIL-trace fixture
(2026-11-25; only lint edits since).

python3 probe.py --mode MODE --depth D --width W --batch B [--steps N] [--k K] [--threads T]
Prints one JSON line: step_ms (CUDA events over N steps), host_ms (Python time of one step
with the GPU idle before it), the side work done per second.
"""

import argparse
import itertools
import json
import multiprocessing as mp
import os
import queue
import random
import threading
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

WORDS = [f"w{i}" for i in range(5000)]


def make_records(n, words, seed=0):
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(words)).upper() for _ in range(n)]


def tokenize(rec, vocab):
    toks = rec.lower().split()
    ids = [vocab.get(t, 1) for t in toks]
    grams = [(a * 31 + b) % 65536 for a, b in itertools.pairwise(ids)]
    return ids[:64] + grams[:64]


def spin_work(stop, counter, words):
    vocab = {w: i + 2 for i, w in enumerate(WORDS)}
    recs = make_records(512, words)
    while not stop.is_set():
        for r in recs:
            tokenize(r, vocab)
        counter.value += len(recs)


def spin_vec(stop, counter, words):
    rng = np.random.default_rng(0)
    arr = rng.integers(0, 5000, size=(512, words))
    while not stop.is_set():
        ids = arr + 2
        grams = (ids[:, :-1] * 31 + ids[:, 1:]) % 65536
        np.sort(grams, axis=1)
        counter.value += 512


class Box:
    value = 0


def pr_counts_python(preds, targets, thresholds, tp, fp):
    for p, y in zip(preds, targets, strict=True):
        for j, t in enumerate(thresholds):
            if p >= t:
                if y > 0.5:
                    tp[j] += 1
                else:
                    fp[j] += 1


def pr_counts_numpy(preds, targets, thresholds, tp, fp):
    hit = preds[:, None] >= thresholds[None, :]
    pos = targets > 0.5
    tp += (hit & pos[:, None]).sum(0)
    fp += (hit & ~pos[:, None]).sum(0)


def metrics_thread(q, k, counter, vec):
    th = [j / k for j in range(k)]
    tha = np.array(th)
    tp, fp = ([0] * k, [0] * k) if not vec else (np.zeros(k, np.int64), np.zeros(k, np.int64))
    while True:
        item = q.get()
        if item is None:
            return
        p, y = item
        p, y = p.float().cpu(), y.float().cpu()
        if vec:
            pr_counts_numpy(p.numpy(), y.numpy(), tha, tp, fp)
        else:
            pr_counts_python(p.tolist(), y.tolist(), th, tp, fp)
        counter.value += 1


def score_proc(p, y, k):
    th = [j / k for j in range(k)]
    tp, fp = [0] * k, [0] * k
    pr_counts_python(p.tolist(), y.tolist(), th, tp, fp)
    return tp[0]


class Block(nn.Module):
    def __init__(self, w):
        super().__init__()
        self.norm = nn.LayerNorm(w)
        self.fc1 = nn.Linear(w, 4 * w)
        self.fc2 = nn.Linear(4 * w, w)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", default="none")
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--width", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=8192)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--k", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--words", type=int, default=48)
    ap.add_argument("--clean-exit", action="store_true")
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    dev = torch.device(a.device)
    gpu = dev.type == "cuda"
    torch.manual_seed(0)
    with torch.device(dev):
        model = nn.Sequential(*[Block(a.width) for _ in range(a.depth)], nn.Linear(a.width, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=gpu or None)
    x = torch.randn(a.batch, a.width, device=dev)
    y = (torch.rand(a.batch, 1, device=dev) > 0.5).float()

    stop = threading.Event()
    counter = Box()
    threads, procs, pool, q = [], [], None, None
    pending = []
    if a.mode in ("spin", "spin_vec"):
        fn = spin_work if a.mode == "spin" else spin_vec
        for _ in range(a.threads):
            t = threading.Thread(target=fn, args=(stop, counter, a.words), daemon=True)
            t.start()
            threads.append(t)
    elif a.mode == "spin_proc":
        ctx = mp.get_context("spawn")
        pstop = ctx.Event()
        val = ctx.Value("q", 0)
        for _ in range(a.threads):
            p = ctx.Process(target=spin_work, args=(pstop, val, a.words), daemon=True)
            p.start()
            procs.append(p)
        counter = val
        time.sleep(3)
    elif a.mode in ("metrics", "metrics_vec"):
        q = queue.Queue()
        t = threading.Thread(
            target=metrics_thread, args=(q, a.k, counter, a.mode == "metrics_vec"), daemon=True
        )
        t.start()
        threads.append(t)
    elif a.mode == "metrics_proc":
        pool = mp.get_context("fork").Pool(4)
        pool.map(abs, range(8))

    done = Box()

    def step():
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=gpu):
            out = model(x)
            loss = F.binary_cross_entropy_with_logits(out.float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if q is not None:
            q.put((torch.sigmoid(out.detach()[:, 0]), y[:, 0]))
        elif pool is not None:
            p = torch.sigmoid(out.detach()[:, 0]).float().to("cpu", non_blocking=True)
            yy = y[:, 0].to("cpu", non_blocking=True)
            ev = torch.cuda.Event()
            ev.record()
            pending.append((ev, p, yy))
            while pending and pending[0][0].query():
                _, pp, py = pending.pop(0)
                pool.apply_async(
                    score_proc,
                    (pp.numpy(), py.numpy(), a.k),
                    callback=lambda r: setattr(done, "value", done.value + 1),
                )

    sync = torch.cuda.synchronize if gpu else (lambda: None)
    for _ in range(5):
        step()
    sync()
    host = []
    for _ in range(3):
        sync()
        t0 = time.perf_counter()
        step()
        host.append(time.perf_counter() - t0)
        sync()
    c0 = counter.value
    w0 = time.perf_counter()
    if gpu:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
    for _ in range(a.steps):
        step()
    if gpu:
        e.record()
        e.synchronize()
    wall = time.perf_counter() - w0
    ms = s.elapsed_time(e) / a.steps if gpu else 1e3 * wall / a.steps
    side = (counter.value - c0) / wall
    backlog = q.qsize() if q is not None else len(pending)
    stop.set()
    if a.mode == "spin_proc":
        pstop.set()
    if q is not None:
        q.put(None)
    if pool is not None:
        pool.terminate()
    print(
        "RESULT "
        + json.dumps(
            {
                "mode": a.mode,
                "depth": a.depth,
                "width": a.width,
                "batch": a.batch,
                "k": a.k,
                "threads": a.threads,
                "step_ms": round(ms, 2),
                "host_ms": round(1e3 * min(host), 2),
                "side_per_s": round(side, 1),
                "backlog": backlog,
                "done": done.value,
            }
        ),
        flush=True,
    )
    if not a.clean_exit:
        os._exit(0)


if __name__ == "__main__":
    main()
