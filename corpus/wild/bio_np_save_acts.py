"""Training a feed-forward stack while dumping one layer's activations for offline analysis: a
forward hook keeps them, and every 10 steps the loop np.save's them (fp32) to one of four
rotating files.
# H200 estimate: 8 blocks of width 1024 (hidden 4096) on 16384 tokens, bf16 autocast: 6.6
# TFLOP of GEMMs (~10 ms) plus LayerNorm, GELU and AdamW (~3 ms): ~13 ms a step. The dump is
# the 16384 x 4096 hidden activation as fp32, 268 MB: .float().cpu() (a blocking pageable copy,
# ~45 ms at ~6 GB/s) and np.save into the page cache (~90 ms at ~3 GB/s) on the loop thread,
# the GPU idle -> ~135 ms every 10 steps -> none ~26.5 ms/step.
# --fix thread (the activation cast on the GPU and copied into a pinned buffer on a side stream;
# a writer thread waits for that copy and np.save's the buffer, ~90 ms of a 130 ms period; the
# next dump waits for it if it is still writing) -> ~13.5 ms (~2x).
# --fix nosave (no dump) -> ~13 ms (~2x). It is the removal: the copies and writes gone,
# everything else unchanged.
"""

import argparse
import json
import os
import shutil
import tempfile
import threading
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

EVERY = 10
ROOT = os.environ.get("CORPUS_DATA_DIR", "/var/tmp/wild_corpus")


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up, self.down = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.act = nn.GELU()

    def forward(self, x):
        return x + self.down(self.act(self.up(self.norm(x))))


class Dumper:
    """np.save of an activation into one of four rotating files; ``background``: the activation
    copied into a pinned buffer on a side stream and saved by a writer thread (the next dump
    waits for it)."""

    def __init__(self, folder, background, shape, cuda):
        self.folder, self.background = folder, background
        if background:
            self.buf = torch.empty(shape, pin_memory=cuda)
            self.side = torch.cuda.Stream() if cuda else None
            self.idle, self.ready = threading.Event(), threading.Semaphore(0)
            self.idle.set()
            self.job = {}
            self.thread = threading.Thread(target=self.writer, daemon=True)
            self.thread.start()

    def path(self, k):
        return os.path.join(self.folder, f"acts_{k % 4}.npy")

    def writer(self):
        while True:
            self.ready.acquire()
            if self.job.get("stop"):
                return
            if self.job["event"] is not None:
                self.job["event"].synchronize()
            np.save(self.path(self.job["k"]), self.buf.numpy())
            self.idle.set()

    def __call__(self, acts, k):
        if not self.background:
            np.save(self.path(k), acts.float().cpu().numpy())
            return
        self.idle.wait()
        self.idle.clear()
        event = None
        if self.side is not None:
            self.side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.side):
                self.buf.copy_(acts.float(), non_blocking=True)
                event = torch.cuda.Event()
                event.record(self.side)
            acts.record_stream(self.side)
        else:
            self.buf.copy_(acts.float())
        self.job.update(k=k, event=event)
        self.ready.release()

    def close(self):
        if self.background:
            self.idle.wait()
            self.job["stop"] = True
            self.ready.release()
            self.thread.join()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fix", default="none", choices=["none", "thread", "nosave"])
    p.add_argument("--seconds", type=float, default=1.5)
    p.add_argument("--device", default="auto")
    args = p.parse_args()
    device = torch.device(
        args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    )
    cuda = device.type == "cuda"
    torch.manual_seed(0)
    dim, depth, tokens = (1024, 8, 16384) if cuda else (32, 2, 64)
    model = nn.Sequential(*[Block(dim) for _ in range(depth)]).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    data = [
        (torch.randn(tokens, dim, device=device), torch.randn(tokens, dim, device=device))
        for _ in range(4)
    ]
    kept = {}
    model[depth // 2].act.register_forward_hook(
        lambda m, i, out: kept.__setitem__("acts", out.detach())
    )
    os.makedirs(ROOT, exist_ok=True)
    out_dir = tempfile.mkdtemp(prefix="bio_np_save_acts-", dir=ROOT)
    state = {"i": 0}

    dump = Dumper(out_dir, args.fix == "thread", (tokens, 4 * dim), cuda)

    def step():
        x, y = data[state["i"] % len(data)]
        state["i"] += 1
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = F.mse_loss(model(x).float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if args.fix != "nosave" and state["i"] % EVERY == 0:
            dump(kept["acts"], state["i"] // EVERY)

    try:
        for _ in range(EVERY):
            step()
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        n = 0
        while n < 10 or time.perf_counter() - t0 < args.seconds or n % EVERY:
            step()
            n += 1
        if cuda:
            torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) * 1e3 / n
        dump.close()
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    print("RESULT " + json.dumps({"step_ms": round(ms, 3), "steps": n, "fix": args.fix}))


if __name__ == "__main__":
    main()
