"""Regression MLP trained with a live "training monitor" thread feeding a dashboard: the loop
appends host-side scalars to a history (step time, learning rate, samples seen, data wait), and
the monitor refreshes the dashboard's summary every millisecond: for every series, the mean,
standard deviation, min, max and percentiles of its last 4000 values, computed in Python lists;
for every parameter, its name, group, shape and size; all formatted into one JSON snapshot.

The monitor never reads a tensor's value (no syncs), but each refresh is several milliseconds of
pure Python and it only sleeps 1 ms between refreshes, so it holds the GIL nearly all the time.
Every time the training thread releases the GIL (each CUDA launch) it has to wait for the
monitor to hand it back (up to the 5 ms switch interval), and the GPU runs out of queued work.
# H200 estimate: GPU ~8 ms/step (8 pre-norm residual blocks of width 1536, batch 4096, bf16,
# ~250 launches); the training thread's host work ~3 ms, ~2 ms of it holding the GIL; the
# monitor ~5-7 ms of Python per refresh, 1 ms asleep -> the training thread gets ~1 ms of GIL
# time per refresh -> none ~15-25 ms.
# --fix slow_poll (the monitor refreshes once a second): one refresh per ~100 steps -> ~8 ms
# (~2-3x).
# --fix nothread (no monitor thread; the history is still appended): the limit, ~8 ms.
"""

import argparse
import collections
import json
import math
import threading
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

SERIES = (
    "step_ms",
    "data_wait_ms",
    "lr",
    "samples_per_s",
    "samples_seen",
    "warmup_frac",
    "tokens_per_s",
    "host_ms",
    "queue_depth",
    "mem_reserved_mb",
    "epoch_frac",
    "wall_s",
)


def summarize(values):
    """Mean, std, min, max and percentiles of a series, in Python."""
    xs = sorted(values)
    n = len(xs)
    mean = sum(xs) / n
    var = sum((x - mean) ** 2 for x in xs) / max(n - 1, 1)
    pct = {f"p{q}": xs[min(n - 1, int(q / 100 * n))] for q in (1, 5, 25, 50, 75, 95, 99)}
    return {"n": n, "mean": mean, "std": math.sqrt(var), "min": xs[0], "max": xs[-1], **pct}


class Monitor(threading.Thread):
    """Refreshes `self.snapshot` (a JSON string a dashboard serves) every `period` s."""

    def __init__(self, model, history, period):
        super().__init__(daemon=True)
        self.model, self.history, self.period = model, history, period
        self.stop = threading.Event()
        self.snapshot, self.refreshes = "", 0

    def refresh(self):
        params, groups = {}, collections.defaultdict(int)
        for name, p in self.model.named_parameters():
            group = name.split(".")[0] + ("." + name.split(".")[1] if "." in name else "")
            size = math.prod(p.shape)
            groups[group] += size
            params[name] = {"group": group, "shape": list(p.shape), "numel": size}
        series = {k: summarize(list(v)) for k, v in self.history.items() if v}
        self.snapshot = json.dumps({"series": series, "params": params, "groups": groups})
        self.refreshes += 1

    def run(self):
        while not self.stop.wait(self.period):
            self.refresh()


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x):
        return x + self.down(F.silu(self.up(self.norm(x))))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fix", default="none", choices=["none", "slow_poll", "nothread"])
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--device", default="auto")
    args = p.parse_args()
    device = torch.device(
        args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    )
    cuda = device.type == "cuda"
    batch, feats, width, depth, window = (
        (4096, 256, 1536, 8, 4000) if cuda else (64, 16, 32, 2, 200)
    )

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(feats, width), *[Block(width) for _ in range(depth)], nn.Linear(width, 1)
    ).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=cuda or None)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 1000))
    data = [
        (torch.randn(batch, feats, device=device), torch.randn(batch, 1, device=device))
        for _ in range(4)
    ]
    # the history the run resumed with: the monitor summarizes the last `window` values
    history = {
        k: collections.deque((float(i) for i in range(window)), maxlen=window) for k in SERIES
    }
    monitor = None
    if args.fix != "nothread":
        monitor = Monitor(model, history, 1.0 if args.fix == "slow_poll" else 0.001)
        monitor.start()
    state = {"i": 0, "last": time.perf_counter()}

    def step():
        x, y = data[state["i"] % len(data)]
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            out = model(x)
        loss = F.mse_loss(out.float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        now = time.perf_counter()
        dt, state["last"] = now - state["last"], now
        state["i"] += 1
        row = (
            dt * 1e3,
            0.0,
            sched.get_last_lr()[0],
            batch / dt,
            state["i"] * batch,
            min(1.0, state["i"] / 1000),
            batch / dt,
            dt * 1e3,
            0,
            0.0,
            state["i"] / 1e4,
            now,
        )
        for k, v in zip(SERIES, row, strict=True):
            history[k].append(float(v))

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
    if monitor is not None:
        monitor.stop.set()
        monitor.join()
    print("RESULT " + json.dumps({"step_ms": round(ms, 3), "steps": n, "fix": args.fix}))


if __name__ == "__main__":
    main()
