"""A causal language model whose attention is written out: scores, scale, mask, a hand-rolled
softmax (max, subtract, exp, sum, divide), then the weighted sum; bf16 autocast.
# H200 estimate: 4 layers of width 768 (12 heads of 64), batch 16 x 1024 tokens. Each layer's
# score tensor is 16 x 12 x 1024 x 1024 = 201 M elements (402 MB in bf16, 804 MB in fp32, which
# autocast gives exp, sum and the division): the scale, the mask, the five softmax ops and the
# cast back move ~7.6 GB forward and ~15 GB backward, ~6.3 ms a layer; the matmuls
# (projections, MLP, QK^T and PV) ~0.9 TFLOP, ~1.4 ms -> none ~7.7 ms a layer, ~32 ms/step;
# GPU-bound (~70 large kernels a layer).
# --fix fused (torch.softmax on the masked, scaled scores: one softmax kernel each way, in fp32
# under autocast; the scale and the mask left as two kernels) -> ~13.6 GB, ~3.7 ms a layer,
# ~5.1 ms in all (~1.5x).
# --fix compile (torch.compile of the function from scores to probabilities: scale, mask and
# softmax one kernel forward, one backward) -> ~2.5 GB, ~2.1 ms a layer in all (~3.5x). It is
# the removal: the chain's bytes moved once, the matmuls unchanged.
"""

import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def attention_probs(scores, mask, scale):
    scores = scores * scale
    scores = scores.masked_fill(mask, float("-inf"))
    scores = scores - scores.max(dim=-1, keepdim=True).values
    e = torch.exp(scores)
    return e / e.sum(dim=-1, keepdim=True)


def fused_probs(scores, mask, scale):
    return torch.softmax((scores * scale).masked_fill(mask, float("-inf")), dim=-1)


class Layer(nn.Module):
    def __init__(self, dim, heads, probs):
        super().__init__()
        self.heads, self.probs = heads, probs
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, mask):
        b, n, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, self.heads, d // self.heads).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        p = self.probs(q @ k.transpose(-2, -1), mask, 1.0 / math.sqrt(d // self.heads))
        x = x + self.out((p @ v).transpose(1, 2).reshape(b, n, d))
        return x + self.mlp(self.ln2(x))


class LM(nn.Module):
    def __init__(self, vocab, dim, heads, depth, probs):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(Layer(dim, heads, probs) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx):
        n = idx.shape[1]
        mask = torch.ones(n, n, dtype=torch.bool, device=idx.device).triu(1)
        x = self.emb(idx)
        for layer in self.layers:
            x = layer(x, mask)
        return self.head(self.norm(x))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fix", default="none", choices=["none", "fused", "compile"])
    p.add_argument("--seconds", type=float, default=1.5)
    p.add_argument("--device", default="auto")
    args = p.parse_args()
    device = torch.device(
        args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    )
    cuda = device.type == "cuda"
    torch.manual_seed(0)
    vocab, dim, heads, depth, batch, seq = (
        (8192, 768, 12, 4, 16, 1024) if cuda else (128, 32, 2, 2, 2, 16)
    )
    probs = {"none": attention_probs, "fused": fused_probs}.get(args.fix)
    if args.fix == "compile":
        # on a CPU-only box, skip inductor's C++ codegen (slow to build); the traced graphs are the same
        backend = "inductor" if cuda else "aot_eager"
        probs = torch.compile(attention_probs, backend=backend)
    model = LM(vocab, dim, heads, depth, probs).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    data = [torch.randint(0, vocab, (batch, seq + 1), device=device) for _ in range(4)]
    state = {"i": 0}

    def step():
        tok = data[state["i"] % len(data)]
        state["i"] += 1
        with torch.autocast(device.type, dtype=torch.bfloat16):
            logits = model(tok[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1), tok[:, 1:].flatten())
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
