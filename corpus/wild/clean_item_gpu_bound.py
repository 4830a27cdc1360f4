"""Small causal language model (2 wide pre-norm nn.TransformerEncoderLayer blocks, bf16 autocast)
trained on random tokens, reading `loss.item()` every step for a running average and a progress
line every 50 steps.

The read makes the host wait for each step, but the step is long and the host's work is short:
after the read the host issues the next step's first kernels within a fraction of a ms and then
queues the rest while the GPU computes, so the GPU idles only for that fraction.
# H200 estimate: GPU ~35-45 ms/step (2 blocks, d 4096, ffn 16384, 8 x 1024 tokens, an 8192-word
# head: ~22 TFLOP fwd+bwd in bf16, plus ~5 ms of AdamW over 420M fp32 parameters); host ~2-3 ms
# of dispatch -> none is GPU-bound, the read costing ~0.1-0.3 ms of idle GPU a step (< 1%).
# Suspect --fix noitem (the loss summed on the GPU and read every 100 steps): <= 1.01x.
"""

import argparse
import json
import time

import torch
import torch.nn as nn


class TinyLM(nn.Module):
    def __init__(self, vocab, d, ffn, heads, layers):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        block = nn.TransformerEncoderLayer(
            d, heads, ffn, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, ids):
        mask = nn.Transformer.generate_square_subsequent_mask(ids.shape[1], device=ids.device)
        h = self.blocks(self.embed(ids), mask=mask, is_causal=True)
        return self.head(self.norm(h))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fix", default="none", choices=["none", "noitem"])
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--device", default="auto")
    args = p.parse_args()
    device = torch.device(
        args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    )
    torch.manual_seed(0)
    cuda = device.type == "cuda"
    if cuda:
        vocab, d, ffn, heads, layers, batch, seq = 8192, 4096, 16384, 32, 2, 8, 1024
    else:
        vocab, d, ffn, heads, layers, batch, seq = 128, 32, 64, 4, 2, 4, 16
    with device:  # built on the GPU: a CPU init of 420M parameters takes seconds
        model = TinyLM(vocab, d, ffn, heads, layers)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    tokens = [torch.randint(0, vocab, (batch, seq + 1), device=device) for _ in range(4)]
    total = torch.zeros((), device=device)  # --fix noitem: losses summed on the GPU
    state = {"i": 0, "avg": 0.0}

    def step():
        t = tokens[state["i"] % len(tokens)]
        state["i"] += 1
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            logits = model(t[:, :-1])
        loss = nn.functional.cross_entropy(logits.float().reshape(-1, vocab), t[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if args.fix == "noitem":
            total.add_(loss.detach())
            if state["i"] % 100 == 0:
                state["avg"] = total.item() / 100
                total.zero_()
        else:
            state["avg"] = 0.98 * state["avg"] + 0.02 * loss.item()
        if state["i"] % 50 == 0:
            print(f"step {state['i']} loss {state['avg']:.4f}")

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
