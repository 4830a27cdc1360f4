"""A small ViT trained on image batches, with TF32 switched off "so runs on different GPUs match".

The patch embedding is a strided conv, the encoder is nn.TransformerEncoder (pre-norm,
no dropout), the head a linear layer on the class token. Everything is fp32.
# H200 estimate: batch 64 of 224 px (196 patches + class token = 197 tokens, 12.6 K a step),
# 4 layers of width 768 (12 heads, MLP 3072): GEMMs 6 * 28.3M * 12.6K = 2.15 TFLOP and
# attention ~0.1 TFLOP a step -> ~40 ms on the FMA units (fp32, TF32 off); LayerNorm, GELU,
# softmax and AdamW in fp32 ~2.5 ms -> none ~43 ms/step, GPU-bound.
# --fix tf32 (matmul TF32 allowed again: tensor cores at ~395 TFLOP/s) -> ~5.7 + 2.5 ms -> ~5x.
# --fix amp (bf16 autocast: GEMMs and flash attention in bf16 at ~700 TFLOP/s, elementwise work
# halved) -> ~3.2 + 1.5 ms -> ~9x. It is the removal too: the same GEMMs on the bf16 tensor
# cores, the rest of the script unchanged.
"""

import argparse
import json
import time
from contextlib import nullcontext

import torch
import torch.nn as nn
import torch.nn.functional as F

# reproducibility across GPU generations
torch.backends.cuda.matmul.allow_tf32 = False


class ViT(nn.Module):
    def __init__(self, image, patch, dim, depth, heads, classes):
        super().__init__()
        self.embed = nn.Conv2d(3, dim, patch, patch)
        n = (image // patch) ** 2
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, n + 1, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(
            dim, heads, 4 * dim, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        return self.head(self.norm(self.encoder(x))[:, 0])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fix", default="none", choices=["none", "tf32", "amp"])
    p.add_argument("--seconds", type=float, default=1.5)
    p.add_argument("--device", default="auto")
    args = p.parse_args()
    device = torch.device(
        args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    )
    cuda = device.type == "cuda"
    torch.manual_seed(0)
    if args.fix == "tf32":
        torch.backends.cuda.matmul.allow_tf32 = True
    image, patch, dim, depth, heads, batch = (
        (224, 16, 768, 4, 12, 64) if cuda else (32, 8, 32, 2, 2, 4)
    )
    model = ViT(image, patch, dim, depth, heads, 1000).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05)
    data = [
        (
            torch.randn(batch, 3, image, image, device=device),
            torch.randint(0, 1000, (batch,), device=device),
        )
        for _ in range(4)
    ]
    amp = args.fix == "amp"
    state = {"i": 0}

    def step():
        x, y = data[state["i"] % len(data)]
        state["i"] += 1
        with torch.autocast(device.type, dtype=torch.bfloat16) if amp else nullcontext():
            loss = F.cross_entropy(model(x), y)
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
