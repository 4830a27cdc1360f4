"""Image classifier whose Dataset does heavy CPU augmentation in the main process.

# H100 estimate: augmentation ~0.5 ms/sample x 64 = ~35 ms/batch on one core, GPU ~3 ms/step
# -> none ~35 ms/step (GPU idle waiting for data); --fix workers (8 procs) ~4.5 ms -> ~7x.
# --fix resident (the input work removed entirely: POOL batches augmented before the loop and kept
# on the GPU, cycled; no loading and no copy in the loop) -> the GPU's ~3 ms.
"""

import argparse
import itertools
import json
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

POOL = 8  # --fix resident: device batches built before the loop and cycled


class AugmentedImages(Dataset):
    def __init__(self, n_base, size, crop, length):
        rng = np.random.default_rng(0)
        self.images = rng.integers(0, 256, (n_base, size, size, 3), dtype=np.uint8)
        self.labels = rng.integers(0, 10, n_base)
        self.crop = crop
        self.length = length

    def __len__(self):
        return self.length

    def __getitem__(self, i):
        rng = np.random.default_rng(i)
        img = self.images[i % len(self.images)].astype(np.float32) / 255.0
        top, left = rng.integers(0, img.shape[0] - self.crop, 2)
        img = img[top : top + self.crop, left : left + self.crop]
        if rng.random() < 0.5:
            img = img[:, ::-1]
        # 5x5 box blur, written the obvious way
        padded = np.pad(img, ((2, 2), (2, 2), (0, 0)), mode="reflect")
        blurred = np.zeros_like(img)
        for dy in range(5):
            for dx in range(5):
                blurred += padded[dy : dy + self.crop, dx : dx + self.crop]
        img = blurred / 25.0
        # colour jitter
        img = img * rng.uniform(0.8, 1.2, 3).astype(np.float32) + rng.uniform(-0.1, 0.1)
        img = np.clip(img, 0.0, 1.0)
        img = (img - 0.5) / 0.25
        return torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1))), int(
            self.labels[i % len(self.labels)]
        )


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fix", default="none", choices=["none", "workers", "resident"])
    p.add_argument("--seconds", type=float, default=1.5)
    p.add_argument("--device", default="auto")
    args = p.parse_args()
    device = torch.device(
        args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    )
    torch.manual_seed(0)
    size, crop, batch = (128, 112, 64) if device.type == "cuda" else (24, 16, 4)

    ds = AugmentedImages(512, size, crop, 10_000_000)
    if args.fix == "workers":
        loader = DataLoader(
            ds,
            batch_size=batch,
            num_workers=8,
            pin_memory=device.type == "cuda",
            persistent_workers=True,
            prefetch_factor=4,
        )
    else:
        loader = DataLoader(ds, batch_size=batch, num_workers=0)

    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, 10),
    ).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    if args.fix == "resident":  # in the loop, .to(device) of a device tensor is a no-op
        pool = [
            (x.to(device), y.to(device)) for _, (x, y) in zip(range(POOL), loader, strict=False)
        ]
        batches = itertools.cycle(pool)
    else:
        batches = iter(loader)

    def step():
        x, y = next(batches)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(5):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    n = 0
    while n < 10 or time.perf_counter() - t0 < args.seconds:
        step()
        n += 1
    if device.type == "cuda":
        torch.cuda.synchronize()
    ms = (time.perf_counter() - t0) * 1e3 / n
    print("RESULT " + json.dumps({"step_ms": round(ms, 3), "steps": n, "fix": args.fix}))


if __name__ == "__main__":
    main()
