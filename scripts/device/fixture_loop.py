"""The programs scripts/device/capture-fixtures.sh profiles (standalone: torch and the stdlib).

    python3 scripts/device/fixture_loop.py train --seconds 30 [--exit normal|os_exit]
    python3 scripts/device/fixture_loop.py overhead --launches 20000 --items 2000

``train``: a CUDA training loop (a 4-layer fp32 MLP, width 8192, batch 4096: ~100 ms a step on
an H100, so a few seconds of it stay a small export) that prints a line per 10 steps. capture-fixtures.sh kills it with SIGTERM mid-loop (``timeout`` inside
nsys: Python's default SIGTERM action ends the process at once, no atexit, so the CUDA
activity nsys buffered in it is never flushed), or lets it leave through ``os._exit(0)`` after
``--seconds`` (the same: no atexit, no flush). Those exports are what issue 26 item 7 needs: CUDA
API rows of a process whose GPU activity never arrived.

``overhead``: per-call cost of tiny kernel launches (``x.add_(1)`` on a one-element tensor,
``--launches`` times after a warm-up) and of ``.item()`` round trips (``--items`` times), in
microseconds per call, the median of ``--rounds`` timed rounds; run once unprofiled and once
under each nsys --trace set, the difference is what tracing adds per call. Prints
``RESULT {json}``. On a box without CUDA both modes run on the CPU (their code paths, not
numbers anyone should read).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn as nn


def train(device: torch.device, seconds: float, exit_mode: str) -> None:
    """Train until ``seconds`` have passed (or a signal ends the process)."""
    cuda = device.type == "cuda"
    width, batch = (8192, 4096) if cuda else (64, 32)
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(4):
        layers += [nn.Linear(width, width), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(width, 10)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(batch, width, device=device)
    y = torch.randint(0, 10, (batch,), device=device)
    t0 = time.perf_counter()
    step = 0
    while time.perf_counter() - t0 < seconds:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        if step % 10 == 0:
            print(f"step {step} t={time.perf_counter() - t0:.2f}s", flush=True)
    if cuda:
        torch.cuda.synchronize()
    print("RESULT " + json.dumps({"mode": "train", "steps": step, "exit": exit_mode}), flush=True)
    if exit_mode == "os_exit":
        os._exit(0)


def _per_call_us(fn, calls: int, rounds: int, sync) -> float:
    """Median over ``rounds`` of the microseconds per call of ``calls`` calls of ``fn``."""
    times = []
    for _ in range(rounds):
        sync()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        times.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(times)


def overhead(
    device: torch.device, launches: int, items: int, rounds: int, profiler_range: bool = False
) -> dict:
    """Microseconds per tiny launch, per ``.item()`` and per small ``nn.Linear`` call (a cuBLAS
    GEMM and a bias kernel, launched through the driver API), after a warm-up of each.
    ``profiler_range``: measure between ``cudaProfilerStart`` and ``Stop`` (an nsys capture
    range, as the harness profiles its window), not from the process's start."""
    cuda = device.type == "cuda"

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    x = torch.empty(1, device=device).zero_()
    lin = torch.nn.Linear(16, 16).to(device)
    inp = torch.randn(8, 16, device=device)
    _per_call_us(lambda: x.add_(1), 1000, 1, sync)  # warm-up: allocator, dispatcher, caches
    _per_call_us(x.item, 100, 1, sync)
    _per_call_us(lambda: lin(inp), 200, 1, sync)
    if profiler_range and cuda:
        torch.cuda.profiler.start()
    out = {
        "mode": "overhead",
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "launches": launches,
        "items": items,
        "rounds": rounds,
        "us_per_launch": round(_per_call_us(lambda: x.add_(1), launches, rounds, sync), 3),
        "us_per_item": round(_per_call_us(x.item, items, rounds, sync), 3),
        "us_per_linear": round(_per_call_us(lambda: lin(inp), launches // 4, rounds, sync), 3),
    }
    if profiler_range and cuda:
        torch.cuda.profiler.stop()
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("mode", choices=["train", "overhead"])
    p.add_argument("--seconds", type=float, default=30.0, help="train: loop length")
    p.add_argument("--exit", default="normal", choices=["normal", "os_exit"], dest="exit_mode")
    p.add_argument("--launches", type=int, default=20000)
    p.add_argument("--items", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--device", default="auto")
    p.add_argument(
        "--profiler-range",
        action="store_true",
        help="overhead: measure inside "
        "cudaProfilerStart/Stop (nsys --capture-range=cudaProfilerApi)",
    )
    args = p.parse_args(argv)
    auto = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(auto if args.device == "auto" else args.device)
    if args.mode == "train":
        train(device, args.seconds, args.exit_mode)
    else:
        res = overhead(device, args.launches, args.items, args.rounds, args.profiler_range)
        print("RESULT " + json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
