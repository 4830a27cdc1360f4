"""sync_loading's ``ideal`` keeps the baseline loader's first batches resident: the threaded
decode must give those very batches (images, order, wrap-around, collation)."""

from __future__ import annotations

from pathlib import Path

import torch

from scenarios.sync_loading import SyncLoadingSize
from scenarios.sync_loading.data import JpegDataset, ensure_dataset
from scenarios.sync_loading.workload import _decoded_batches, _Forever


def test_ideal_batches_are_the_baseline_loaders_first_batches(tmp_path: Path) -> None:
    size = SyncLoadingSize(
        warmup_steps=1, steps=2, batch_size=8, image_size=32, num_images=10,
        num_classes=3, ideal_batches=3, loader_workers=2,
    )  # fmt: skip
    files = ensure_dataset(tmp_path, long_side=64, count=size.num_images, seed=0)
    ds = JpegDataset(files, size.num_classes, size.image_size, normalize=True)
    loader = torch.utils.data.DataLoader(ds, batch_size=8, sampler=_Forever(len(ds)))
    it = iter(loader)
    want = [next(it) for _ in range(size.ideal_batches)]  # 24 images of 10: wraps twice
    got = _decoded_batches(files, size)
    assert len(got) == len(want)
    for (x, y), (gx, gy) in zip(want, got, strict=True):
        assert gx.dtype == x.dtype and gy.dtype == y.dtype
        assert torch.equal(gx, x) and torch.equal(gy, y)
