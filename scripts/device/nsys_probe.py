"""What nsys costs a profiled worker, part by part (issue 25): imports under nsys, the time a
process waits in ``cudaProfilerStop``, and whether one traced fork server can hand each forked
child its own report (``--capture-range-end=repeat`` with ``--trace-fork-before-exec=true``).

    python scripts/device/nsys_probe.py import            # prints IMPORT <seconds>
    python scripts/device/nsys_probe.py single WINDOW_S   # one CUDA process: warm-up, window
    python scripts/device/nsys_probe.py server W1 W2 ...  # a parent that never touches CUDA
                                                          # forks one child per window, in turn

Each child (or the single process) prints one ``PROBE {json}`` line: its CUDA set-up, window and
``cudaProfilerStop`` times. Run it under ``nsys profile`` with the harness's options
(``scripts/device/nsys-probe.sh`` does every case and exports the reports).
"""

from __future__ import annotations

import json
import os
import sys
import time


def _imports() -> float:
    t = time.perf_counter()
    import torch
    import torch._dynamo  # noqa: F401

    return time.perf_counter() - t


def _window(window_s: float) -> dict[str, float]:
    """CUDA set-up, a warm-up, then ``window_s`` of small kernels inside a profiler range."""
    import torch

    t = time.perf_counter()
    x = torch.randn(256, 256, device="cuda")
    torch.cuda.synchronize()
    cuda_s = time.perf_counter() - t
    for _ in range(500):
        x = x * 1.0001 + 0.0001
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    t = time.perf_counter()
    launches = 0
    while time.perf_counter() - t < window_s:
        for _ in range(100):
            x = x * 1.0001 + 0.0001
        launches += 200
        torch.cuda.synchronize()
    window = time.perf_counter() - t
    t = time.perf_counter()
    torch.cuda.profiler.stop()
    stop_s = time.perf_counter() - t
    return {"pid": os.getpid(), "cuda_s": round(cuda_s, 3), "window_s": round(window, 3),
            "launches": launches, "stop_s": round(stop_s, 3)}  # fmt: skip


def main(argv: list[str]) -> int:
    mode = argv[0]
    if mode == "import":
        print(f"IMPORT {_imports():.3f}", flush=True)
        return 0
    imp = _imports()
    if mode == "single":
        out = _window(float(argv[1]))
        print(
            "PROBE " + json.dumps(out | {"mode": "single", "import_s": round(imp, 3)}), flush=True
        )
        return 0
    print(f"SERVER import_s={imp:.3f}", flush=True)
    for w in argv[1:]:
        t = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            out = _window(float(w))
            print("PROBE " + json.dumps(out | {"mode": "child"}), flush=True)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        print(f"CHILD pid={pid} status={status} wall_s={time.perf_counter() - t:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
