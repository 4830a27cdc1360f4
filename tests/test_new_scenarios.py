"""The five scenarios of the new classes, beyond the generated contract tests: what each variant
changes is what its summary says (precision, layout, kernels per chain, the lengths and the
release period, the checkpoint written and cleaned up), checked at CPU size."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import scenarios
from scenarios import RunContext

FOUND = scenarios.discover()


def _workload(name: str, variant: str, tmp_path: Path, **size: object):
    scen = FOUND[name]
    cfg = scen.default_config()
    smoke = cfg.size("smoke")
    for key, value in size.items():
        setattr(smoke, key, value)
    ctx = RunContext(device=torch.device("cpu"), size_name="smoke", seed=0, cache_dir=tmp_path)
    return scen.builder()(cfg, smoke, variant, ctx), smoke


class _Ops(TorchDispatchMode):
    """ATen ops dispatched (no views)."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        if not func.is_view:
            self.names.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def _ops(fn, *args) -> list[str]:
    with _Ops() as mode:
        fn(*args).sum().backward()
    return mode.names


def test_unfused_chain_variants_run_one_pass_where_the_baseline_runs_many() -> None:
    from scenarios.unfused_chain import workload as W

    x = torch.randn(8, 16, requires_grad=True)
    w = torch.ones(16, requires_grad=True)
    harness = {"sum", "ones_like", "add_"}  # the .sum().backward() and the leaf's grad write

    def count(f, *args):
        return sum(op not in harness for op in _ops(f, *args))

    counts = {f.__name__: count(f, x, w) if "norm" in f.__name__ else count(f, x)
              for f in (W.gelu, W.rms_norm, W.one_pass_act, W.one_pass_norm, W.fused_gelu)}  # fmt: skip
    assert counts["gelu"] >= 16 and counts["rms_norm"] >= 16  # a kernel per op, both ways
    assert counts["one_pass_act"] == counts["one_pass_norm"] == counts["fused_gelu"] == 2
    # the hand-written functions compute what the fused ops do
    torch.testing.assert_close(W.gelu(x), W.fused_gelu(x), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(W.rms_norm(x, w), W.fused_rms_norm(x, w), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("variant", "precision", "dtype"),
    [("baseline", "highest", torch.float32), ("tf32", "high", torch.float32),
     ("bf16_autocast", "highest", torch.float32), ("ideal", "highest", torch.bfloat16)],
)  # fmt: skip
def test_fp32_matmul_sets_each_variants_precision(tmp_path, variant, precision, dtype) -> None:
    before = torch.get_float32_matmul_precision()
    try:
        w, _ = _workload("fp32_matmul", variant, tmp_path)
        w.setup()
        assert torch.get_float32_matmul_precision() == precision
        assert {p.dtype for p in w.model.parameters()} == {dtype}
        assert w.autocast == (variant == "bf16_autocast")
    finally:
        torch.set_float32_matmul_precision(before)


@pytest.mark.parametrize("variant", ["baseline", "channels_last"])
def test_nchw_conv_keeps_its_layout(tmp_path, variant) -> None:
    w, _ = _workload("nchw_conv", variant, tmp_path)
    w.setup()
    last = variant == "channels_last"
    convs = [m for m in w.model.modules() if isinstance(m, torch.nn.Conv2d)]
    assert all(c.weight.is_contiguous(memory_format=torch.channels_last) == last for c in convs)
    w.step(3)  # the conv weights keep their layout through an optimizer step
    assert all(c.weight.is_contiguous(memory_format=torch.channels_last) == last for c in convs)


def test_empty_cache_lengths_are_one_seeded_sequence_and_buckets_cover_them() -> None:
    from scenarios.empty_cache import EmptyCacheSize
    from scenarios.empty_cache.workload import bucket_edges, lengths

    size = EmptyCacheSize()
    a, b = lengths(size, 0), lengths(size, 0)
    assert np.array_equal(a, b) and not np.array_equal(a, lengths(size, 1))
    assert a.min() >= size.min_len and a.max() <= size.max_len and not (a % 64).any()
    assert len(set(a[:50].tolist())) > 10  # it changes every step
    edges = bucket_edges(size)
    assert len(edges) == size.buckets and edges[-1] == size.max_len
    padded = np.array([next(e for e in edges if e >= n) for n in a])
    assert 0 < (padded - a).mean() / a.mean() < 0.06  # the padding the docstring counts on


def test_empty_cache_releases_only_in_the_baseline_and_pads_only_when_bucketed(tmp_path) -> None:
    for variant, period in (("baseline", 1), ("no_empty_cache", 1), ("bucketed", 1)):
        w, _ = _workload("empty_cache", variant, tmp_path)
        assert w.period_steps == period
        assert w.release_every == (1 if variant == "baseline" else 0)
        w.setup()
        w.start_window()
        for i in range(3):
            w.step(i)
        m = w.metrics()
        assert (m["padded_token_share"] > 0) == (variant == "bucketed")
    cfg = FOUND["empty_cache"].config_cls(severity=7)
    ctx = RunContext(device=torch.device("cpu"), size_name="smoke", seed=0, cache_dir=tmp_path)
    assert FOUND["empty_cache"].builder()(cfg, cfg.smoke, "baseline", ctx).period_steps == 7


def test_empty_cache_windows_see_the_same_lengths_whatever_the_warm_up(tmp_path) -> None:
    seen = {}
    for warmup in (2, 5):  # warm-ups end after a time budget: windows start at other indices
        w, _ = _workload("empty_cache", "no_empty_cache", tmp_path)
        w.setup()
        for i in range(warmup):
            w.step(i)
        w.start_window()
        at = [w.position(warmup + j) for j in range(4)]
        seen[warmup] = [int(w.lengths[k]) for k in at]
        assert at == [0, 1, 2, 3]
    assert seen[2] == seen[5]


def test_empty_cache_attention_leaves_out_cudnn(monkeypatch) -> None:
    """cuDNN's SDPA builds a plan per new length on the host: a cost of the changing shapes
    that is not the allocator's, so the layers run on the other fused backends."""
    from torch.nn.attention import SDPBackend

    from scenarios.empty_cache import workload as W

    assert SDPBackend.CUDNN_ATTENTION not in W.ATTENTION_BACKENDS
    assert SDPBackend.MATH not in W.ATTENTION_BACKENDS  # no silent unfused fallback
    calls = []
    real = W.F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append(torch.backends.cuda.cudnn_sdp_enabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(W.F, "scaled_dot_product_attention", spy)
    x = torch.randn(2, 16, 32, requires_grad=True)
    W.Layer(32, 2)(x).sum().backward()
    assert calls == [False]  # called inside the backends' context
    assert torch.backends.cuda.cudnn_sdp_enabled()  # and only there


@pytest.mark.parametrize("variant", ["baseline", "async_snapshot", "async_save"])
def test_sync_checkpoint_writes_the_weights_and_cleans_up(tmp_path, variant) -> None:
    w, size = _workload("sync_checkpoint", variant, tmp_path)
    assert w.period_steps == size.every_override == 3
    w.setup()
    w.start_window()
    for i in range(3, 9):  # two whole periods
        w.step(i)
    m = w.metrics()  # waits for the writes
    assert m["checkpoints_per_step"] == pytest.approx(1 / 3)
    folder = w.folder
    assert folder is not None and folder.parent == tmp_path
    if variant != "async_save":
        saved = torch.load(folder / "latest.pt")
        for k, t in w.model.state_dict().items():
            torch.testing.assert_close(saved[k], t)  # the snapshot of the last update
    else:
        assert any((folder / "dcp").iterdir())
    w.close()
    assert not folder.exists()


def test_sync_checkpoint_ideal_writes_nothing(tmp_path) -> None:
    w, _ = _workload("sync_checkpoint", "ideal", tmp_path)
    assert w.period_steps == 1
    w.setup()
    w.step(2)
    w.close()
    assert list(tmp_path.iterdir()) == []
