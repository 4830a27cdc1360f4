"""empty_cache's workloads (torch): a small language model on variable-length batches.

Imported only where a variant runs (its worker, or the fork server that preloads what workers
need): the package's ``__init__`` holds the metadata the harness reads without torch.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from bottlenecks import BACKWARD, FORWARD, OPTIMIZER, phase
from scenarios import _models
from scenarios._base import RunContext, Workload

from . import EmptyCacheConfig, EmptyCacheSize

IGNORE = -100  # cross_entropy's ignore_index: the padded positions of a bucketed batch
#: Lengths drawn per seed (the sequence repeats after this many steps).
SEQUENCE = 4096
#: The attention backends the layers may use: every one but cuDNN's. cuDNN's SDPA builds an
#: execution plan, and JIT-compiles its kernels, on the host the first time it sees a sequence
#: length (forward and backward), with the GPU idle: on lengths that change every step that is
#: a cost of its own in every variant, ideal included, and not the allocator's. Flash and
#: memory-efficient attention run any length with precompiled kernels.
ATTENTION_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]


class Layer(nn.Module):
    """A pre-norm transformer layer: causal self-attention (SDPA, :data:`ATTENTION_BACKENDS`)
    and a GELU MLP."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.fc1, self.fc2 = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        qkv = self.qkv(self.ln1(x)).view(b, n, 3, self.heads, d // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        with sdpa_kernel(ATTENTION_BACKENDS):  # the backward runs what the forward chose
            att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, n, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class LanguageModel(nn.Module):
    def __init__(self, vocab: int, width: int, heads: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.layers = nn.Sequential(*(Layer(width, heads) for _ in range(layers)))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.layers(self.embed(tokens))))


def lengths(size: EmptyCacheSize, seed: int) -> np.ndarray:
    """The seeded sequence of lengths, one a step: multiples of ``len_multiple`` from
    ``min_len`` to ``max_len``, uniform."""
    rng = np.random.default_rng(seed + 50)
    m = size.len_multiple
    return m * rng.integers(size.min_len // m, size.max_len // m + 1, size=SEQUENCE)


def bucket_edges(size: EmptyCacheSize) -> list[int]:
    """``buckets`` lengths, evenly spaced up to ``max_len`` (multiples of ``len_multiple``)."""
    m, span = size.len_multiple, size.max_len - size.min_len
    return sorted(
        {size.max_len - m * (span * i // (size.buckets * m)) for i in range(size.buckets)}
    )


class Loop(Workload):
    """Next-token training on a length from the seeded sequence; ``release_every``: steps
    between two ``empty_cache`` calls (0: never).

    The sequence is read from the window's first step on (:meth:`position`), not from the step
    index: warm-ups end after a time budget, so variants reach their windows at different
    indices, and every window must see the same lengths for the variants to be compared step
    for step."""

    def __init__(
        self, cfg: EmptyCacheConfig, size: EmptyCacheSize, ctx: RunContext, variant: str
    ) -> None:
        self.size, self.ctx, self.variant = size, ctx, variant
        self.release_every = int(cfg.severity) if variant == "baseline" else 0
        self.period_steps = max(1, self.release_every)
        self.lengths = lengths(size, ctx.seed)
        self.edges = bucket_edges(size) if variant == "bucketed" else []
        self.samples_per_step = size.batch_size
        self.tokens = self.padded = self.steps = 0
        self.stats0: dict[str, float] = {}
        self.window_first: int | None = 0  # the step index position 0 is at (None: the next)

    def setup(self) -> None:
        s, dev = self.size, self.ctx.device
        if self.variant == "expandable_segments":  # before the variant's own allocations
            torch.cuda.memory._set_allocator_settings("expandable_segments:True")
        with self.ctx.stage("build_model"), torch.device(dev):
            self.model = LanguageModel(s.vocab, s.width, s.heads, s.layers)
            self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4, fused=self.ctx.on_gpu)
        gen = torch.Generator(device=dev).manual_seed(self.ctx.seed)
        with self.ctx.stage("data"):
            self.data = torch.randint(
                0, s.vocab, (s.num_sequences, s.max_len + 1), generator=gen, device=dev
            )
        with self.ctx.stage("first_step"):  # optimizer state and handles, outside the window
            self.train(0, s.min_len)
            if self.variant == "ideal":  # and the cache warmed to the longest batch
                self.train(1, s.max_len)
            if self.ctx.on_gpu:
                torch.cuda.synchronize(dev)
        if self.variant == "expandable_segments":  # the worker's first tensor came before
            segs = torch.cuda.memory.memory_snapshot()
            grown = sum(g["total_size"] for g in segs if g.get("is_expandable"))
            self.expandable = grown / max(1, sum(g["total_size"] for g in segs))

    def batch(self, index: int, n: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Inputs and targets of ``n`` tokens (padded up to its bucket where bucketed)."""
        s = self.size
        rows = torch.arange(s.batch_size, device=self.data.device)  # no host-to-device copy
        seq = self.data[(rows + index * s.batch_size) % s.num_sequences]
        inputs, targets = seq[:, :n], seq[:, 1 : n + 1]
        padded = next((e for e in self.edges if e >= n), n)
        if padded > n:
            inputs = F.pad(inputs, (0, padded - n))
            targets = F.pad(targets, (0, padded - n), value=IGNORE)
        return inputs, targets, padded

    def train(self, index: int, n: int) -> int:
        inputs, targets, padded = self.batch(index, n)
        amp = torch.autocast(self.ctx.device.type, dtype=torch.bfloat16)
        with phase(FORWARD), amp:
            logits = self.model(inputs)
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE)
        with phase(BACKWARD):
            loss.backward()
        with phase(OPTIMIZER):
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
        return padded

    def position(self, index: int) -> int:
        """Step ``index``'s place in the length sequence: counted from the window's first step
        (from 0 before the window)."""
        if self.window_first is None:
            self.window_first = index
        return index - self.window_first

    def start_window(self) -> None:
        self.tokens = self.padded = self.steps = 0
        self.window_first = None
        if self.ctx.on_gpu:
            torch.cuda.reset_peak_memory_stats(self.ctx.device)
            self.stats0 = dict(torch.cuda.memory_stats(self.ctx.device))

    def step(self, index: int) -> None:
        at = self.position(index)
        n = int(self.lengths[at % len(self.lengths)])
        padded = self.train(at, n)
        if self.release_every and (at + 1) % self.release_every == 0:
            torch.cuda.empty_cache()  # a no-op without CUDA
        self.steps += 1
        self.tokens += n * self.size.batch_size
        self.padded += (padded - n) * self.size.batch_size

    def metrics(self) -> dict[str, float]:
        steps = max(1, self.steps)
        out = {
            "params_m": _models.parameter_count(self.model) / 1e6,
            "tokens_per_step": self.tokens / steps,
            "padded_token_share": self.padded / max(1, self.tokens + self.padded),
        }
        if self.ctx.on_gpu:
            now = torch.cuda.memory_stats(self.ctx.device)
            for key in ("num_device_alloc", "num_device_free", "num_alloc_retries"):
                if key in now:
                    out[f"{key}_per_step"] = (now[key] - self.stats0.get(key, 0)) / steps
            out["reserved_gib_peak"] = now.get("reserved_bytes.all.peak", 0) / 2**30
            if self.variant == "expandable_segments":
                out["expandable_reserved_share"] = self.expandable
        return out


def build(cfg: EmptyCacheConfig, size: EmptyCacheSize, variant: str, ctx: RunContext) -> Workload:
    """The workload for ``variant``."""
    return Loop(cfg, size, ctx, variant)
