"""Batch scoring with a sparse mixture-of-experts stack (bf16 inference): each block routes every
token to its top-2 of 8 SwiGLU experts and, as in the common Mixtral-style reference code, loops
over the experts picking each one's tokens with torch.where on the routing mask.

torch.where on a mask returns as many indices as there are routed tokens, so PyTorch must read
the count from the GPU: the host waits, once per expert and block, for everything queued before
it, and then issues the next expert's gather and matmuls while the GPU idles. Host and GPU take
turns instead of overlapping.
# H200 estimate: 8 blocks x 8 experts, 4096 tokens (d 1024, ffn 2816): each expert's SwiGLU on
# ~1024 tokens is ~50 us of GPU; each expert costs ~50-70 us of host dispatch (where, gathers,
# 3 matmuls, index_add) plus ~20 us of sync round trip -> none ~8 ms a batch (64 waits, GPU idle
# about half the time).
# --fix nosync (fixed-capacity routing: slot positions from a cumsum of the routing one-hot,
# tokens and gates scattered into per-expert tables of 1.25 x 1024 padded slots; the same expert
# SwiGLU, gathers and index_add on static shapes, no host read): the host runs ahead and the GPU
# works back to back: ~4.5 ms (~1.8x) despite the 25% padding. It removes every read.
"""

import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

CAPACITY = 1.25  # --fix nosync: slots per expert, as a multiple of an even share


class Expert(nn.Module):
    def __init__(self, d, ffn):
        super().__init__()
        self.w1 = nn.Linear(d, ffn, bias=False)
        self.w3 = nn.Linear(d, ffn, bias=False)
        self.w2 = nn.Linear(ffn, d, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class SparseMoeBlock(nn.Module):
    def __init__(self, d, ffn, experts, top_k, static):
        super().__init__()
        self.norm = nn.RMSNorm(d)
        self.gate = nn.Linear(d, experts, bias=False)
        self.experts = nn.ModuleList(Expert(d, ffn) for _ in range(experts))
        self.top_k = top_k
        self.static = static

    def route(self, h):
        probs = F.softmax(self.gate(h).float(), dim=-1)
        weights, chosen = torch.topk(probs, self.top_k, dim=-1)
        weights = (weights / weights.sum(dim=-1, keepdim=True)).to(h.dtype)
        return weights, chosen

    def forward(self, x):
        h = self.norm(x)
        weights, chosen = self.route(h)
        if self.static:
            return x + self.dispatch_static(h, weights, chosen)
        out = torch.zeros_like(h)
        mask = F.one_hot(chosen, num_classes=len(self.experts)).permute(2, 1, 0)
        for e, expert in enumerate(self.experts):
            slot, tok = torch.where(mask[e])  # the host reads how many tokens expert e got
            if tok.shape[0] == 0:
                continue
            y = expert(h[tok]) * weights[tok, slot, None]
            out.index_add_(0, tok, y)
        return x + out

    def dispatch_static(self, h, weights, chosen):
        n, d = h.shape
        e_count = len(self.experts)
        cap = int(CAPACITY * n * self.top_k / e_count)
        flat_e = chosen.reshape(-1)
        flat_tok = torch.arange(n, device=h.device).repeat_interleave(self.top_k)
        onehot = F.one_hot(flat_e, e_count)
        pos = (onehot.cumsum(0) - 1).gather(1, flat_e[:, None]).squeeze(1)
        dump = e_count * cap  # slots past capacity land here and are dropped
        dest = torch.where(pos < cap, flat_e * cap + pos, dump)
        tok_table = torch.full((dump + 1,), n, device=h.device).scatter_(0, dest, flat_tok)
        gate_table = torch.zeros(dump + 1, device=h.device, dtype=h.dtype)
        gate_table.scatter_(0, dest, weights.reshape(-1))
        padded = torch.cat([h, h.new_zeros(1, d)])
        out = h.new_zeros(n + 1, d)  # row n collects the empty slots
        for e, expert in enumerate(self.experts):
            tok = tok_table[e * cap : (e + 1) * cap]
            y = expert(padded[tok]) * gate_table[e * cap : (e + 1) * cap, None]
            out.index_add_(0, tok, y)
        return out[:n]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fix", default="none", choices=["none", "nosync"])
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--device", default="auto")
    args = p.parse_args()
    device = torch.device(
        args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    )
    torch.manual_seed(0)
    cuda = device.type == "cuda"
    if cuda:
        vocab, d, ffn, blocks, batch, seq = 32000, 1024, 2816, 8, 8, 512
    else:
        vocab, d, ffn, blocks, batch, seq = 512, 32, 64, 2, 4, 16
    dtype = torch.bfloat16 if cuda else torch.float32
    static = args.fix == "nosync"
    with device:  # built on the GPU: a CPU init of 550M parameters takes seconds
        embed = nn.Embedding(vocab, d)
        stack = nn.Sequential(*[SparseMoeBlock(d, ffn, 8, 2, static) for _ in range(blocks)])
        head = nn.Sequential(nn.RMSNorm(d), nn.Linear(d, 1))
    model = nn.ModuleDict({"embed": embed, "stack": stack, "head": head})
    model.to(dtype=dtype).eval()
    requests = [torch.randint(0, vocab, (batch, seq), device=device) for _ in range(4)]
    scores = []
    state = {"i": 0}

    @torch.inference_mode()
    def step():
        ids = requests[state["i"] % len(requests)]
        state["i"] += 1
        h = stack(embed(ids).reshape(-1, d))
        scores.append(head(h).reshape(batch, seq).mean(dim=1))  # kept on the GPU
        if len(scores) >= 100:
            scores.clear()

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
