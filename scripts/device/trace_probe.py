"""What nsys's trace options cost a distributed scenario: step times of its variants in one
process per rank (under torchrun), with or without nsys around it.

    torchrun --standalone --nproc-per-node=2 scripts/device/trace_probe.py \
        --scenario ddp_bucketing --variants ideal,tuned_buckets --size full --tag none

Each variant is built, set up, warmed up and timed (CUDA events) in turn inside one process per
rank; the window sits inside a cudaProfilerStart/Stop range, so ``nsys profile
--capture-range=cudaProfilerApi --capture-range-end=repeat`` traces the windows only, as the
harness does. Rank 0 prints one line per variant: ``PROBE tag variant mean_ms median_ms
host_ms`` (both ranks' means averaged), plus DDP's own communication timers where it has them.
``scripts/device/trace-probe.sh`` runs it once per nsys setting and tabulates the lines.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
from omegaconf import OmegaConf


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenario", required=True)
    p.add_argument("--variants", required=True, help="comma-separated variant names")
    p.add_argument("--size", default="full", choices=("smoke", "full"))
    p.add_argument("--tag", default="none", help="label of the nsys setting, printed back")
    p.add_argument("--warmup", type=int, default=None, help="warm-up steps (default: the size's)")
    p.add_argument("--steps", type=int, default=None, help="timed steps (default: the size's)")
    return p.parse_args()


def _time_variant(scen, cfg, size, name: str, ctx, warmup: int, steps: int) -> dict:
    on_gpu = ctx.device.type == "cuda"
    work = scen.builder()(cfg, size, name, ctx)
    work.setup()
    for i in range(warmup):
        work.step(i)
    if on_gpu:
        torch.cuda.synchronize(ctx.device)
    dist.barrier()
    work.start_window()
    events = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)] if on_gpu else []
    host: list[float] = []
    if on_gpu:
        torch.cuda.profiler.start()
        events[0].record()
    for j in range(steps):
        t0 = time.perf_counter()
        work.step(warmup + j)
        if on_gpu:
            events[j + 1].record()
        host.append(1e3 * (time.perf_counter() - t0))
    if on_gpu:
        torch.cuda.synchronize(ctx.device)
        torch.cuda.profiler.stop()
        step_ms = [events[j].elapsed_time(events[j + 1]) for j in range(steps)]
    else:
        step_ms = host
    metrics = work.metrics()
    work.close()
    return {
        "mean": statistics.fmean(step_ms),
        "median": statistics.median(step_ms),
        "host": statistics.fmean(host),
        **{k: v for k, v in metrics.items() if k.startswith("ddp_")},
    }


def main() -> None:
    args = _parse()
    from harness.core.config import discover_scenarios
    from scenarios import RunContext

    scen = discover_scenarios()[args.scenario]
    cfg = OmegaConf.to_object(OmegaConf.structured(scen.config_cls))
    size = cfg.size(args.size)
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    ctx = RunContext(
        device=device, size_name=args.size, seed=0, rank=rank, world_size=world,
        cache_dir=Path(tempfile.gettempdir()) / "trace-probe",
    )  # fmt: skip
    warmup = size.warmup_steps if args.warmup is None else args.warmup
    steps = size.steps if args.steps is None else args.steps
    for name in args.variants.split(","):
        res = _time_variant(scen, cfg, size, name, ctx, warmup, steps)
        both = [None] * world
        dist.all_gather_object(both, res)
        if rank == 0:
            avg = {k: statistics.fmean(r[k] for r in both) for k in res}
            extra = " ".join(f"{k}={v:.2f}" for k, v in avg.items() if k.startswith("ddp_"))
            print(
                f"PROBE {args.tag} {name} mean_ms={avg['mean']:.2f} median_ms={avg['median']:.2f} "
                f"host_ms={avg['host']:.2f} per_rank_mean={[round(r['mean'], 2) for r in both]} "
                f"{extra}",
                flush=True,
            )
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
