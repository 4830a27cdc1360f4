"""Conv net fed by a DataLoader with 8 workers, pinned memory and light transforms: GPU-bound.

# H100 estimate: GPU ~10 ms/step (batch 128 at 64 px, 128-channel convs ~1.4 TFLOP TF32 + BN);
# one worker makes a batch in ~6 ms (flip + normalize + collate), 8 workers -> ~0.8 ms/batch,
# so the queue is always full. Suspect --fix workers (12 workers): <= 1.02x.
# --fix amp (bf16 autocast around the whole step: its TF32 convolutions run in bf16 on the
# tensor cores): not yet timed (fp32_math fires on its export, predicted 1.24x:
# corpus/wild/README.md).
"""

import argparse
import json
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


class Images(Dataset):
    def __init__(self, n, px):
        rng = np.random.default_rng(0)
        self.images = rng.integers(0, 256, (n, 3, px, px), dtype=np.uint8)
        self.labels = rng.integers(0, 10, n)
        self.mean = np.array([0.485, 0.456, 0.406], np.float32).reshape(3, 1, 1) * 255
        self.std = np.array([0.229, 0.224, 0.225], np.float32).reshape(3, 1, 1) * 255

    def __len__(self):
        return 10_000_000

    def __getitem__(self, i):
        img = self.images[i % len(self.images)]
        if i % 2:
            img = img[:, :, ::-1]
        x = (img.astype(np.float32) - self.mean) / self.std
        return torch.from_numpy(x), int(self.labels[i % len(self.labels)])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fix", default="none", choices=["none", "workers", "amp"])
    p.add_argument("--seconds", type=float, default=1.5)
    p.add_argument("--device", default="auto")
    args = p.parse_args()
    device = torch.device(
        args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    )
    torch.manual_seed(0)
    cuda = device.type == "cuda"
    batch, px, w = (128, 64, 128) if cuda else (16, 32, 8)

    workers = (12 if args.fix == "workers" else 8) if cuda else (3 if args.fix == "workers" else 2)
    loader = DataLoader(
        Images(1024, px),
        batch_size=batch,
        num_workers=workers,
        pin_memory=cuda,
        persistent_workers=True,
        prefetch_factor=2,
    )
    model = nn.Sequential(
        nn.Conv2d(3, w, 3, padding=1),
        nn.BatchNorm2d(w),
        nn.ReLU(),
        nn.Conv2d(w, w, 3, padding=1),
        nn.BatchNorm2d(w),
        nn.ReLU(),
        nn.Conv2d(w, w, 3, padding=1),
        nn.BatchNorm2d(w),
        nn.ReLU(),
        nn.Conv2d(w, w, 3, padding=1),
        nn.BatchNorm2d(w),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(w, 10),
    ).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    batches = iter(loader)

    def step():
        x, y = next(batches)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    if args.fix == "amp":  # the whole step under bf16 autocast: its GEMMs on the tensor cores
        fp32_step = step

        def step():
            with torch.autocast(device.type, dtype=torch.bfloat16):
                return fp32_step()

    for _ in range(8):
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
