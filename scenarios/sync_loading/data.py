"""A synthetic JPEG data set, generated once and deterministically (no downloads), and the CPU
decode path an untuned training script uses."""

from __future__ import annotations

import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
from PIL import Image

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def _make_image(path: Path, width: int, height: int, seed: int) -> None:
    """Photo-like content: smooth colour fields plus sensor-like noise, so JPEG sizes and
    decode costs resemble real photographs rather than flat colour."""
    rng = np.random.default_rng(seed)
    coarse = Image.fromarray(rng.integers(0, 256, (6, 8, 3), dtype=np.uint8))
    base = np.asarray(coarse.resize((width, height), Image.BICUBIC), dtype=np.float32)
    noise = rng.normal(0.0, 10.0, (height, width, 3)).astype(np.float32)
    img = np.clip(base + noise, 0, 255).astype(np.uint8)
    Image.fromarray(img).save(path, format="JPEG", quality=90)


def ensure_dataset(cache_dir: Path, *, long_side: int, count: int, seed: int) -> list[Path]:
    """Generate ``count`` JPEGs of ``long_side`` x 3/4 pixels once; later calls reuse them.

    Written into a temporary folder and renamed, so concurrent or interrupted runs never see a
    half-made set.
    """
    width, height = int(long_side), max(1, round(long_side * 3 / 4))
    root = Path(cache_dir) / f"jpeg_{width}x{height}_n{count}_s{seed}"
    names = [f"{i:06d}.jpg" for i in range(count)]
    if (root / ".complete").is_file():
        return [root / n for n in names]
    tmp = root.with_name(f"{root.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        list(
            pool.map(
                lambda i: _make_image(tmp / names[i], width, height, seed * 1_000_003 + i),
                range(count),
            )
        )
    (tmp / ".complete").write_text(f"{count}\n")
    try:
        tmp.rename(root)
    except OSError:  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
    return [root / n for n in names]


def decode_resize(path: Path, size: int) -> np.ndarray:
    """Full-resolution decode, then resize: what PIL-based transforms do per sample."""
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB").resize((size, size), Image.BILINEAR))


def normalize_cpu(hwc: np.ndarray) -> torch.Tensor:
    """uint8 HWC -> normalised float32 CHW, on the CPU (ToTensor + Normalize).

    The float conversion happens in NumPy: a decoded PIL image is a read-only array, and the
    converted copy is the tensor's own writable memory (no extra copy, no warning from
    ``torch.from_numpy`` about a non-writable array)."""
    t = torch.from_numpy(hwc.astype(np.float32)).permute(2, 0, 1).div_(255.0)
    mean = torch.tensor(MEAN).view(3, 1, 1)
    std = torch.tensor(STD).view(3, 1, 1)
    return t.sub_(mean).div_(std)


class DeviceNormalize:
    """uint8 NHWC batch -> normalised float NCHW (channels_last strides) where it lives.

    The constants are uploaded once: building them per step would be two small pageable,
    blocking copies every step, i.e. a hidden host sync inside the fix.
    """

    def __init__(self, device: torch.device) -> None:
        self.mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1)
        self.std = torch.tensor(STD, device=device).view(1, 3, 1, 1)

    def __call__(self, nhwc_u8: torch.Tensor) -> torch.Tensor:
        x = nhwc_u8.permute(0, 3, 1, 2).float().div_(255.0)
        return x.sub_(self.mean).div_(self.std)


class JpegDataset(torch.utils.data.Dataset):
    """Map-style data set over the JPEG files; ``normalize`` picks float CHW or uint8 HWC."""

    def __init__(self, files: list[Path], num_classes: int, size: int, normalize: bool) -> None:
        self.files = files
        self.num_classes = num_classes
        self.size = size
        self.normalize = normalize

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        hwc = decode_resize(self.files[i], self.size)
        x = normalize_cpu(hwc) if self.normalize else torch.from_numpy(hwc.copy())
        return x, i % self.num_classes
