"""Classifier training with hard-example mining: the loss is averaged over the samples whose loss
is above the batch mean (boolean-mask indexing), and the ids of those samples are read back with
torch.nonzero to steer the sampler and per-sample statistics in Python.

Both the mask indexing and nonzero need the number of selected rows on the host, so each step
waits for the GPU twice, and the Python bookkeeping and the next batch's sampling and numpy
gathering then run with the GPU idle. That host work is smaller than the GPU's step, so without
the syncs it would overlap the next step.
# H100 estimate: GPU ~14 ms/step (4 x 4096-wide fp32 layers, batch 2048); host ~2.5 ms
# bookkeeping + ~3 ms sampling and gathering + ~1.5 ms launches, exposed -> none ~21 ms.
# --fix nosync (masked mean instead of indexing; the mask and losses copied to pinned memory and
# read one step late): ~14.5 ms (~1.4x). --fix prebuilt (the dataset on the GPU, gathered there)
# and --fix nobook (no per-sample statistics) each remove one part of it: ~1.15x.
# Full removals (what a prediction is checked against): --fix noread (every sync gone: masked mean,
# nothing read back per step; the bookkeeping runs on the values last read, every 100 steps, so
# the host's work is unchanged) and --fix resident (the input work gone: POOL batches sampled and
# gathered before the loop and kept on the GPU; no sampling, no gather, no copy in the loop).
# --fix amp (bf16 autocast around the whole step: the fp32 GEMMs move from the SIMT FMA pipe to
# the tensor cores): not yet timed (fp32_math fires on its export: corpus/wild/README.md).
"""

import argparse
import json
import random
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

N_SAMPLES, N_FEATS, N_CLASSES = 200_000, 64, 10
POOL = 8  # --fix resident: device batches built before the loop and cycled
REPLAY = 4096  # most recent hard sample ids kept for re-sampling


class HardSampler:
    """Half of each batch uniform, half re-drawn from recent hard samples; keeps a per-sample
    loss average and hard count in Python dicts."""

    def __init__(self, batch, seed=0):
        self.batch, self.rng = batch, random.Random(seed)
        self.replay, self.avg_loss, self.hard_count = [], {}, {}

    def sample(self):
        k = self.batch // 2 if len(self.replay) >= self.batch // 2 else 0
        ids = self.rng.sample(range(N_SAMPLES), self.batch - k) + self.rng.choices(self.replay, k=k)
        return np.fromiter(ids, dtype=np.int64, count=self.batch)

    def update(self, ids, losses, hard_ids):
        for i, v in zip(ids.tolist(), losses, strict=True):
            self.avg_loss[i] = 0.9 * self.avg_loss.get(i, v) + 0.1 * v
        for i in hard_ids:
            self.hard_count[i] = self.hard_count.get(i, 0) + 1
        self.replay = (self.replay + list(hard_ids))[-REPLAY:]


def main():
    p = argparse.ArgumentParser()
    p.add_argument(
        "--fix",
        default="none",
        choices=["none", "nosync", "prebuilt", "nobook", "noread", "resident", "amp"],
    )
    p.add_argument("--seconds", type=float, default=1.5)
    p.add_argument("--device", default="auto")
    args = p.parse_args()
    device = torch.device(
        args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    )
    torch.manual_seed(0)
    cuda = device.type == "cuda"
    batch, width = (2048, 4096) if cuda else (128, 64)
    gen = np.random.default_rng(0)
    data_x = gen.standard_normal((N_SAMPLES, N_FEATS), dtype=np.float32)
    data_y = (data_x[:, :4].sum(axis=1) * 2).astype(np.int64) % N_CLASSES
    if args.fix == "prebuilt":
        data_x_dev, data_y_dev = (
            torch.from_numpy(data_x).to(device),
            torch.from_numpy(data_y).to(device),
        )
    layers = [nn.Linear(N_FEATS, width), nn.ReLU()]
    for _ in range(3):
        layers += [nn.Linear(width, width), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(width, N_CLASSES)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    sampler = HardSampler(batch)
    pin = {"mask": torch.empty(batch, dtype=torch.bool, pin_memory=cuda),
           "loss": torch.empty(batch, pin_memory=cuda)}  # fmt: skip
    pending = None  # --fix nosync: (ids, event) of the step whose mask and losses are in `pin`
    last = None  # --fix noread: (losses, mask) last read from the GPU
    state = {"i": 0}

    def next_batch():
        ids = sampler.sample()
        if args.fix == "prebuilt":
            idx = torch.from_numpy(ids).to(device, non_blocking=True)
            return ids, data_x_dev[idx], data_y_dev[idx]
        x = data_x[ids] + np.float32(0.05) * gen.standard_normal((batch, N_FEATS), dtype=np.float32)
        x, y = torch.from_numpy(x), torch.from_numpy(data_y[ids])
        if cuda:
            x, y = x.pin_memory(), y.pin_memory()
        return ids, x.to(device, non_blocking=True), y.to(device, non_blocking=True)

    if args.fix == "resident":
        pool = [next_batch() for _ in range(POOL)]
        pool = [(ids, x.to(device), y.to(device)) for ids, x, y in pool]

    def book(ids, losses, hard):
        if args.fix != "nobook":
            sampler.update(ids, losses, ids[hard].tolist())
        else:  # the sampler still needs the hard ids
            sampler.replay = (sampler.replay + ids[hard].tolist())[-REPLAY:]

    nxt = pool[0] if args.fix == "resident" else next_batch()

    def step():
        nonlocal nxt, pending, last
        ids, x, y = nxt
        state["i"] += 1
        per_sample = F.cross_entropy(model(x), y, reduction="none")
        hard = per_sample.detach() > per_sample.detach().mean()
        opt.zero_grad(set_to_none=True)
        if args.fix == "nosync":
            loss = (per_sample * hard).sum() / hard.sum().clamp(min=1)
            loss.backward()
            opt.step()
            if pending is not None:
                if pending[1] is not None:
                    pending[1].synchronize()  # the previous step: the GPU is already past it
                book(pending[0], pin["loss"].tolist(), pin["mask"].numpy().copy())
            pin["mask"].copy_(hard, non_blocking=True)
            pin["loss"].copy_(per_sample.detach(), non_blocking=True)
            ev = torch.cuda.Event() if cuda else None
            if ev is not None:
                ev.record()
            pending = (ids, ev)
        elif args.fix == "noread":
            loss = (per_sample * hard).sum() / hard.sum().clamp(min=1)
            loss.backward()
            opt.step()
            if last is None or state["i"] % 100 == 0:
                last = (per_sample.detach().tolist(), hard.cpu().numpy())
            book(ids, *last)
        else:
            loss = per_sample[hard].mean()  # boolean-mask indexing: the host needs the count
            loss.backward()
            opt.step()
            hard_rows = torch.nonzero(hard).squeeze(1).cpu().numpy()
            mask = np.zeros(len(ids), dtype=bool)
            mask[hard_rows] = True
            book(ids, per_sample.detach().tolist(), mask)
        nxt = pool[state["i"] % POOL] if args.fix == "resident" else next_batch()

    if args.fix == "amp":  # the whole step under bf16 autocast: its GEMMs on the tensor cores
        fp32_step = step

        def step():
            with torch.autocast(device.type, dtype=torch.bfloat16):
                return fp32_step()

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
    print("RESULT " + json.dumps({"step_ms": round(ms, 3), "steps": n, "fix": args.fix}))


if __name__ == "__main__":
    main()
