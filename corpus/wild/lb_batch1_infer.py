"""Batch-1 autoregressive-style inference of a small transformer encoder, one request at a time.

# H100 estimate: 6 blocks x ~14 kernels + embed/head ~ 90 kernels of ~3-5 us -> GPU ~0.35 ms per
# request; host ~90 ops x ~12-20 us (Python modules + dispatch + launch) -> none ~1.3-1.8 ms.
# --fix graphs: the forward captured once in a CUDA graph, replayed per request -> ~0.4 ms -> ~3-4x.
# Default --seconds is short (0.4) so the whole-process export stays small.
"""

import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (
            self.qkv(self.ln1(x))
            .view(b, t, 3, self.heads, d // self.heads)
            .transpose(1, 3)
            .unbind(2)
        )
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class TinyLM(nn.Module):
    def __init__(self, vocab=1000, d=256, layers=6, heads=4, seq=32):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(1, seq, d))
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, ids):
        x = self.tok(ids) + self.pos
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x[:, -1]))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fix", default="none", choices=["none", "graphs"])
    p.add_argument("--seconds", type=float, default=0.4)
    p.add_argument("--device", default="auto")
    args = p.parse_args()
    device = torch.device(
        args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    )
    cuda = device.type == "cuda"
    if args.fix == "graphs" and not cuda:
        print(
            "RESULT "
            + json.dumps({"step_ms": None, "steps": 0, "fix": args.fix, "skipped": "needs CUDA"})
        )
        return
    torch.manual_seed(0)
    model = TinyLM().to(device).eval()
    requests = torch.randint(0, 1000, (64, 1, 32), device=device)
    state = {"i": 0}

    if args.fix == "graphs":
        static_ids = requests[0].clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), torch.no_grad():
            for _ in range(3):
                model(static_ids)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(graph):
            static_next = model(static_ids).argmax(-1)

        def step():
            static_ids.copy_(requests[state["i"] % len(requests)])
            state["i"] += 1
            graph.replay()
            return static_next
    else:

        @torch.no_grad()
        def step():
            ids = requests[state["i"] % len(requests)]
            state["i"] += 1
            return model(ids).argmax(-1)

    for _ in range(10):
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
