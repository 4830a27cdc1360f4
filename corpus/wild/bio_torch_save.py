"""GPT-style training that saves the model's weights every 10 steps with torch.save, in the
training loop, for an evaluation job that watches the folder; the last two files are kept.
# H200 estimate: 3 layers of width 768 (12 heads), vocabulary 8192, batch 128 x 512 tokens,
# bf16 autocast, AdamW: ~34 M parameters, ~14 TFLOP a step, ~30-35 ms of GPU work. A checkpoint
# is the fp32 weights, ~135 MB: torch.save copies each CUDA tensor to pageable host memory (a
# blocking copy at ~1.5 GB/s, each one draining the stream), CRCs and writes the archive
# (~1 ms a MB), the GPU idle throughout -> ~150-230 ms every 10 steps -> none ~50 ms/step.
# --fix thread (the tensors copied into pinned host buffers on a side stream, the next optimizer
# step waiting for that copy on the GPU; a writer thread saves the buffers, ~250 ms beside the
# loop's ~330 ms period, the next checkpoint waiting for it if it is still writing) -> ~33 ms
# (~1.5x).
# --fix nosave (no checkpoint) -> ~32 ms (~1.55x). It is the removal: the writes gone,
# everything else unchanged.
"""

import argparse
import json
import os
import queue
import shutil
import tempfile
import threading
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

EVERY = 10
ROOT = os.environ.get("CORPUS_DATA_DIR", "/var/tmp/wild_corpus")


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, self.heads, d // self.heads).unbind(2)
        a = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        x = x + self.proj(a.transpose(1, 2).reshape(b, n, d))
        return x + self.mlp(self.ln2(x))


def pinned_like(obj, cuda):
    """Host buffers shaped like every tensor in a (nested) state dict."""
    if torch.is_tensor(obj):
        return torch.empty(obj.shape, dtype=obj.dtype, pin_memory=cuda and obj.is_cuda)
    if isinstance(obj, dict):
        return {k: pinned_like(v, cuda) for k, v in obj.items()}
    if isinstance(obj, list):
        return [pinned_like(v, cuda) for v in obj]
    return obj


def copy_into(dst, src):
    """Copy a (nested) state dict's tensors into the buffers pinned_like made."""
    if torch.is_tensor(src):
        dst.copy_(src, non_blocking=True)
    elif isinstance(src, dict):
        for k, v in src.items():
            if torch.is_tensor(v) or isinstance(v, (dict, list)):
                copy_into(dst[k], v)
            else:
                dst[k] = v
    elif isinstance(src, list):
        for d, s in zip(dst, src, strict=True):
            copy_into(d, s)


class Checkpointer:
    """Keeps the last two checkpoints in ``folder``; ``background``: snapshot into pinned buffers
    on a side stream and let a writer thread save them (the next snapshot waits for it)."""

    def __init__(self, folder, background, cuda):
        self.folder, self.background, self.cuda = folder, background, cuda
        self.saved, self.buffers, self.copied = [], None, None
        if background:
            self.jobs, self.idle = queue.Queue(), threading.Event()
            self.idle.set()
            self.side = torch.cuda.Stream() if cuda else None
            self.thread = threading.Thread(target=self.writer, daemon=True)
            self.thread.start()

    def save(self, obj, step):
        path = os.path.join(self.folder, f"ckpt_{step:07d}.pt")
        torch.save(obj, path)
        self.saved.append(path)
        while len(self.saved) > 2:
            os.remove(self.saved.pop(0))

    def writer(self):
        while (job := self.jobs.get()) is not None:
            event, step = job
            if event is not None:
                event.synchronize()
            self.save(self.buffers, step)
            self.idle.set()

    def __call__(self, ckpt, step):
        if not self.background:
            self.save(ckpt, step)
            return
        self.idle.wait()
        self.idle.clear()
        if self.buffers is None:
            self.buffers = pinned_like(ckpt, self.cuda)
        event = None
        if self.side is not None:
            self.side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.side):
                copy_into(self.buffers, ckpt)
                event = torch.cuda.Event()
                event.record(self.side)
            self.copied = event
        else:
            copy_into(self.buffers, ckpt)
        self.jobs.put((event, step))

    def before_update(self):
        if self.copied is not None:  # the snapshot must be taken before the update
            torch.cuda.current_stream().wait_event(self.copied)
            self.copied = None

    def close(self):
        if self.background:
            self.idle.wait()
            self.jobs.put(None)
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
    vocab, dim, heads, depth, batch, seq = (
        (8192, 768, 12, 3, 128, 512) if cuda else (128, 32, 2, 2, 2, 16)
    )
    every = EVERY if cuda else 5
    os.makedirs(ROOT, exist_ok=True)
    ckpt_dir = tempfile.mkdtemp(prefix="bio_torch_save-", dir=ROOT)
    model = nn.Sequential(nn.Embedding(vocab, dim), *[Block(dim, heads) for _ in range(depth)],
                          nn.LayerNorm(dim), nn.Linear(dim, vocab, bias=False)).to(device)  # fmt: skip
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    data = [torch.randint(0, vocab, (batch, seq + 1), device=device) for _ in range(4)]
    checkpoint = Checkpointer(ckpt_dir, args.fix == "thread", cuda)
    state = {"i": 0}

    def step():
        tok = data[state["i"] % len(data)]
        state["i"] += 1
        with torch.autocast(device.type, dtype=torch.bfloat16):
            logits = model(tok[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1), tok[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        checkpoint.before_update()
        opt.step()
        if args.fix != "nosave" and state["i"] % every == 0:
            ckpt = {"model": model.state_dict(), "step": state["i"]}
            checkpoint(ckpt, state["i"])

    try:
        for _ in range(every):  # the warm-up ends with a checkpoint: files and buffers made
            step()
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        n = 0
        while n < 10 or time.perf_counter() - t0 < args.seconds or n % every:
            step()
            n += 1
        if cuda:
            torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) * 1e3 / n
        checkpoint.close()
    finally:
        shutil.rmtree(ckpt_dir, ignore_errors=True)
    print("RESULT " + json.dumps({"step_ms": round(ms, 3), "steps": n, "fix": args.fix}))


if __name__ == "__main__":
    main()
