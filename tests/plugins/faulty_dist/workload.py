"""faulty_dist's workloads (torch).

Imported only where a variant runs (its worker, or the fork server that preloads what workers
need): the package's ``__init__`` holds the metadata the harness reads without torch.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

from bottlenecks import phase
from harness.core.atomic import write_text
from harness.execution.worker import LAUNCHED_AT_ENV
from scenarios import (
    RunContext,
    Size,
    Workload,
)

from . import (
    FaultyDistConfig,
)


class Ranked(Workload):
    """An all-reduce of a small tensor per step; the variant decides how rank 1 misbehaves."""

    samples_per_step = 1

    def __init__(self, ctx: RunContext, variant: str) -> None:
        self.ctx, self.variant = ctx, variant
        self.in_window = False
        hold = os.environ.get("FAULTY_HOLD_FILE") if variant == "slow" else None
        self.hold = Path(hold) if hold else None

    def setup(self) -> None:
        self.t = torch.ones(64, device=self.ctx.device)
        folder = os.environ.get("FAULTY_PID_DIR")
        if folder:
            name = f"{self.variant}.{self.ctx.rank}.{os.getpid()}.json"
            parent = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().replace(b"\0", b" ")
            record = {
                "pid": os.getpid(), "ppid": os.getppid(), "rank": self.ctx.rank,
                "launch": os.environ.get(LAUNCHED_AT_ENV), "parent": parent.decode(),
            }  # fmt: skip
            write_text(Path(folder) / name, json.dumps(record))

    def start_window(self) -> None:
        self.in_window = True

    def step(self, index: int) -> None:
        with phase("forward"):
            if self.variant == "rank_crash":
                if self.ctx.rank == 1:
                    raise RuntimeError("deliberate failure of rank 1 in faulty_dist's rank_crash")
                time.sleep(3600)  # no collective: only the harness can end this rank
            if self.variant == "rank_hang" and self.ctx.rank == 1:
                time.sleep(3600)
            dist.all_reduce(self.t)
            while self.in_window and self.hold is not None and not self.hold.exists():
                time.sleep(0.05)  # held by the test until it has seen what it waits for


def build(cfg: FaultyDistConfig, size: Size, variant: str, ctx: RunContext) -> Workload:
    return Ranked(ctx, variant)
