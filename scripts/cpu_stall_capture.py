"""A user's own CPU training loop, with no NVTX at all: what the data_stall fixtures capture.

    nsys profile --trace=osrt --sample=none --cpuctxsw=none -o OUT \\
        python scripts/cpu_stall_capture.py --load sync|memory

``sync`` loads each batch on the training thread: per item, a file opened and read, then
decoded (zlib) and augmented (numpy), as a hand-written loop without a DataLoader does.
``memory`` decodes every batch before the loop (the clean counterpart: the same model and
steps, no input work inside the loop). A 0.3 s sleep just before the loop and a 0.1 s one after it mark
where it runs in the OS-runtime table (``tests/data/README.md`` says how the exports were cut there).
Nothing here names a range: the detector has to find the input work from the OS runtime alone.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np
import torch

ITEM = (3, 96, 96)


def write_items(folder: Path, n: int) -> list[Path]:
    """``n`` compressed items (float32 images), as files on disk."""
    rng = np.random.default_rng(0)
    paths = []
    for i in range(n):
        img = rng.standard_normal(ITEM, dtype=np.float32).round(1)
        p = folder / f"item{i:04d}.z"
        p.write_bytes(zlib.compress(img.tobytes(), 6))
        paths.append(p)
    return paths


def load_item(path: Path) -> np.ndarray:
    """Read, decode and augment one item: the input work of one sample."""
    with open(path, "rb") as f:
        raw = f.read()
    img = np.frombuffer(zlib.decompress(raw), np.float32).reshape(ITEM)
    img = img[:, ::-1, :] * 0.5 + 0.1  # flip and normalise
    for _ in range(6):  # a few augmentations' worth of host work
        img = np.clip(np.roll(img, 1, axis=2) * 1.01, -3, 3)
    return np.ascontiguousarray(img)


def batch(paths: list[Path]) -> torch.Tensor:
    return torch.from_numpy(np.stack([load_item(p) for p in paths]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--load", choices=("sync", "memory"), required=True)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch", type=int, default=24)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(
        torch.nn.AvgPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(int(np.prod(ITEM)) // 4, 512),
        torch.nn.ReLU(),
        torch.nn.Linear(512, 10),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_items(Path(tmp), args.batch * 8)
        groups = [paths[i : i + args.batch] for i in range(0, len(paths), args.batch)]
        ready = [batch(g) for g in groups] if args.load == "memory" else None
        time.sleep(0.3)  # marks the loop's start in the OS-runtime table
        for step in range(args.steps):
            x = ready[step % len(ready)] if ready else batch(groups[step % len(groups)])
            y = torch.zeros(x.shape[0], dtype=torch.long)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        time.sleep(0.1)  # and its end


if __name__ == "__main__":
    main()
