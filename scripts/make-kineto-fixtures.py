"""Writes tests/data/kineto/*.pt.trace.json.gz: small PyTorch Profiler (Kineto) traces made on
the CPU, one per kind of loop the CPU can reproduce, for the ``hta`` adapter's tests.

- ``gil_metrics_thread``: the training step shares the GIL with a pure-Python metrics thread;
- ``data_stall``: every step waits for a slow synchronous loader (a sleep);
- ``host_sync_like``: every step reads a scalar back (``.item()``) before going on;
- ``two_ranks``: two gloo ranks (distributedInfo ranks 0 and 1), rank 1 doing twice the work.

Each trace has ``distributedInfo`` (a gloo process group, as the harness's Kineto run has on
every rank) and ``ProfilerStep#N`` ranges (a schedule). Run: ``python
scripts/make-kineto-fixtures.py [OUT_DIR]`` (a few seconds; the traces differ run to run in
their timings, which the tests derive from each trace, never hard-code).
"""

from __future__ import annotations

import gzip
import os
import shutil
import sys
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, schedule

STEPS = 3


def _model() -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU()), torch.randn(16, 64)


def _train(m: torch.nn.Module, x: torch.Tensor, before: object = None, work: int = 1) -> None:
    if callable(before):
        before()
    for _ in range(work):
        with torch.profiler.record_function("forward"):
            y = m(x).sum()
        with torch.profiler.record_function("backward"):
            y.backward()


def capture(out: Path, step: object, rank: int = 0) -> Path:
    """Profile STEPS calls of ``step`` and write the gzipped trace to ``out``."""
    sched = schedule(wait=0, warmup=1, active=STEPS)
    raw = out.with_suffix("").with_suffix(".json")
    with profile(activities=[ProfilerActivity.CPU], schedule=sched,
                 on_trace_ready=lambda p: p.export_chrome_trace(str(raw))) as prof:  # fmt: skip
        for _ in range(STEPS + 1):
            step()
            prof.step()
    with raw.open("rb") as src, gzip.open(out, "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()
    return out


def _group(rank: int, world: int, store: dist.Store) -> None:
    dist.init_process_group("gloo", rank=rank, world_size=world, store=store)


def single(out_dir: Path) -> None:
    _group(0, 1, dist.HashStore())
    m, x = _model()
    stop = threading.Event()

    def metrics() -> None:  # pure Python: holds the GIL between its bytecodes
        while not stop.is_set():
            sum(i * i for i in range(20_000))

    t = threading.Thread(target=metrics, daemon=True)
    t.start()
    capture(out_dir / "gil_metrics_thread.pt.trace.json.gz", lambda: _train(m, x))
    stop.set()
    t.join()
    capture(out_dir / "data_stall.pt.trace.json.gz",
            lambda: _train(m, x, before=lambda: time.sleep(0.01)))  # fmt: skip
    capture(out_dir / "host_sync_like.pt.trace.json.gz",
            lambda: _train(m, x, before=lambda: m(x).sum().item()))  # fmt: skip
    dist.destroy_process_group()


def two_ranks(rank: int, out_dir: str, port: int) -> None:
    store = dist.TCPStore("127.0.0.1", port, 2, rank == 0)
    _group(rank, 2, store)
    m, x = _model()

    def step() -> None:
        _train(m, x, work=1 + rank)
        dist.barrier()

    capture(Path(out_dir) / f"two_ranks-rank{rank}.pt.trace.json.gz", step, rank)
    dist.destroy_process_group()


def main() -> None:
    out_dir = Path(sys.argv[1] if len(sys.argv) > 1 else "tests/data/kineto")
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    single(out_dir)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.multiprocessing.spawn(two_ranks, args=(str(out_dir), 29577), nprocs=2)
    for p in sorted(out_dir.glob("*.pt.trace.json.gz")):
        print(f"{p}: {p.stat().st_size} bytes")


if __name__ == "__main__":
    main()
