"""pageable_copies: sizes, validation, and every variant's CPU path (the GPU path runs on the
lead's H100 only)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from scenarios import RunContext
from scenarios.pageable_copies import SCENARIO, PageableCopiesConfig, PageableCopiesSize
from scenarios.pageable_copies.workload import PinnedPrefetch, build


def _ctx(tmp_path: Path) -> RunContext:
    return RunContext(device=torch.device("cpu"), size_name="smoke", seed=0, cache_dir=tmp_path)


def test_default_severity_is_an_imagenet_float32_batch():
    cfg = PageableCopiesConfig()
    assert cfg.full.images_per_step(cfg.severity) == 256
    assert cfg.full.image_bytes() * 256 == 256 * 3 * 224 * 224 * 4


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"image_size": 30, "patch": 8}, "must divide image_size"),
        ({"severity_scale": 0.0}, "severity_scale"),
        ({"severity_scale": 2.0}, "severity_scale"),
        ({"depth": 0}, "'depth' must be >= 1"),
        ({"num_classes": 1}, "num_classes"),
    ],
)
def test_size_validation(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        PageableCopiesSize(**kwargs)


def test_severity_out_of_range():
    with pytest.raises(ValueError, match="out of range"):
        PageableCopiesConfig(severity=5000)


@pytest.mark.parametrize("variant", SCENARIO.variant_names)
def test_variant_runs_on_cpu(variant, tmp_path):
    cfg = PageableCopiesConfig()
    size = cfg.smoke
    wl = build(cfg, size, variant, _ctx(tmp_path))
    wl.setup()
    try:
        for i in range(size.warmup_steps):
            wl.step(i)
        wl.start_window()  # as the worker does: metrics cover the steps after it
        for i in range(size.warmup_steps, size.warmup_steps + 2):
            wl.step(i)
        m = wl.metrics()
    finally:
        wl.close()
    assert m["host_batch_mb"] == pytest.approx(154 * size.severity_scale, rel=0.01)
    if variant == "ideal":
        assert "h2d_gbps" not in m
    else:
        assert m["h2d_gbps"] > 0 and m["h2d_host_ms_median"] >= 0
    # The link micro-benchmarks exist only on a GPU.
    assert "pinned_h2d_gbps_limit" not in m


def test_prefetch_consumes_batches_in_order(tmp_path):
    cfg = PageableCopiesConfig()
    wl = PinnedPrefetch(cfg, cfg.smoke, _ctx(tmp_path))
    wl.setup()
    seen = []
    wl.trainer.step = lambda x, y: seen.append(x)
    for i in range(5):
        wl.step(i)
    for i, x in enumerate(seen):
        assert torch.equal(x, wl.host[i % len(wl.host)][0])


def test_patch_embedding_is_the_convolution_as_one_gemm():
    """The embedding computes a stride-``patch`` Conv2d's map, with no convolution in the model
    (cuDNN's 3-channel convolution brought SIMT math and layout conversions of its own)."""
    from scenarios.pageable_copies.workload import PatchMLP, patchify

    torch.manual_seed(0)
    patch, dim = 4, 8
    model = PatchMLP(patch=patch, dim=dim, hidden=16, depth=1, num_classes=3)
    assert not any(isinstance(m, torch.nn.Conv2d) for m in model.modules())
    conv = torch.nn.Conv2d(3, dim, patch, patch)
    with torch.no_grad():  # the Linear's inputs run (row, column, channel) within a patch
        conv.weight.copy_(model.embed.weight.view(dim, patch, patch, 3).permute(0, 3, 1, 2))
        conv.bias.copy_(model.embed.bias)
    x = torch.randn(2, 3, 16, 16)
    want = conv(x).flatten(2).transpose(1, 2)
    torch.testing.assert_close(model.embed(patchify(x, patch)), want, rtol=1e-5, atol=1e-5)
