"""Machine probe for sizing scenarios (run on the GPU machine): copy bandwidths, launch cost,
kernel time of tiny ops, and host decode rate. Prints one table; numbers feed scenario sizes."""

from __future__ import annotations

import io
import os
import time

import numpy as np
import torch
from PIL import Image


def bw(src: torch.Tensor, dst_device: str, reps: int = 10) -> float:
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    src.to(dst_device, non_blocking=src.is_pinned())
    torch.cuda.synchronize()
    s.record()
    for _ in range(reps):
        src.to(dst_device, non_blocking=src.is_pinned())
    e.record()
    torch.cuda.synchronize()
    return src.numel() * src.element_size() * reps / (s.elapsed_time(e) / 1e3) / 1e9


def main() -> None:
    print("gpu", torch.cuda.get_device_name(), "cpus", os.cpu_count())
    for mb in (16, 154, 616):
        n = mb * 2**20 // 4
        pageable = torch.randn(n)
        pinned = pageable.pin_memory()
        print(
            f"h2d {mb} MB: pageable {bw(pageable, 'cuda'):.1f} GB/s, pinned {bw(pinned, 'cuda'):.1f} GB/s"
        )
    x = torch.randn(32, 256, device="cuda")
    for _ in range(100):
        x = x * 1.0001
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    n = 20000
    for _ in range(n):
        x = x * 1.0001
    t_launch = (time.perf_counter() - t0) / n * 1e6
    torch.cuda.synchronize()
    t_all = (time.perf_counter() - t0) / n * 1e6
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = x
        for _ in range(1000):
            y = y * 1.0001
    g.replay()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(10):
        g.replay()
    torch.cuda.synchronize()
    t_graph = (time.perf_counter() - t0) / 10000 * 1e6
    print(
        f"tiny mul: host per launch {t_launch:.2f} us, wall per op {t_all:.2f} us, in graph {t_graph:.2f} us/op"
    )
    rng = np.random.default_rng(0)
    img = Image.fromarray(rng.integers(0, 255, (375, 500, 3), dtype=np.uint8))
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=90)
    data = buf.getvalue()
    t0 = time.perf_counter()
    for _ in range(200):
        with Image.open(io.BytesIO(data)) as im:
            np.asarray(im.convert("RGB").resize((224, 224), Image.BILINEAR))
    print(
        f"PIL decode+resize 500x375 (noise JPEG {len(data) // 1024} KB): {(time.perf_counter() - t0) / 200 * 1e3:.2f} ms/img"
    )


if __name__ == "__main__":
    main()
