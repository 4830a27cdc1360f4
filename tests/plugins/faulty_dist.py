"""A deliberately broken distributed scenario (2 ranks, gloo on the CPU) for the tests of forked
ranks and held torchrun workers (never shipped).

Selected with BOTTLENECK_SCENARIO_MODULES=tests.plugins.faulty_dist and +scenario=faulty_dist.
Every rank writes ``<variant>.<rank>.<pid>.json`` ({"pid", "ppid", "rank", "launch": the
harness's launch stamp, shared by a unit's ranks, "parent": its parent's command line}) into
$FAULTY_PID_DIR once set up, so a test can check that no rank outlives its unit and who started
each.

Variants: ``baseline`` and ``ideal`` finish (an all-reduce per step); ``rank_crash``: rank 1
raises in its first step while rank 0 sleeps an hour without a collective, so only the harness
stopping the unit's other ranks ends rank 0 before the time limit; ``rank_hang``: rank 1 sleeps
an hour in its first step, rank 0 waits for it in an all-reduce; ``slow``: inside its window each
step waits until $FAULTY_HOLD_FILE exists (a test keeps it busy as long as it needs).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist

from bottlenecks import phase
from harness.core.atomic import write_text
from harness.execution.worker import LAUNCHED_AT_ENV
from scenarios import (
    RunContext,
    Scenario,
    ScenarioConfig,
    Severity,
    Size,
    Teaching,
    Variant,
    Workload,
)


@dataclass(kw_only=True)
class FaultyDistConfig(ScenarioConfig):
    """Schema of the faulty_dist scenario."""

    severity: float = 1.0
    """Unused."""
    smoke: Size = field(default_factory=lambda: Size(warmup_steps=1, steps=3))
    """CPU size."""
    full: Size = field(default_factory=lambda: Size(warmup_steps=1, steps=3))
    """GPU size."""


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


SCENARIO = Scenario(
    name="faulty_dist",
    bottleneck="exposed_comm",
    title="Distributed faults for the harness tests",
    variants=(
        Variant(name="baseline", kind="baseline", summary="finishes"),
        Variant(name="rank_crash", kind="fix", summary="rank 1 raises, rank 0 sleeps"),
        Variant(name="rank_hang", kind="fix", summary="rank 1 sleeps past any timeout"),
        Variant(name="slow", kind="fix", summary="waits for $FAULTY_HOLD_FILE in its window"),
        Variant(name="ideal", kind="ideal", summary="finishes"),
    ),
    severity=Severity(meaning="unused", unit="1", low=0, high=10, why_default="test only"),
    teaching=Teaching(symptom="n/a", cause="n/a", fix="n/a"),
    config_cls=FaultyDistConfig,
    build=build,
    world_size=2,
)
