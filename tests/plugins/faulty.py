"""A deliberately broken scenario for the harness's fault tests (never shipped).

Selected with BOTTLENECK_SCENARIO_MODULES=tests.plugins.faulty and +scenario=faulty. Its
variants finish, raise, or hang, so tests can check that one variant's failure never loses
another's results.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from harness.markers import phase
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
class FaultySize(Size):
    """Tiny sizes: the point is the harness, not the work."""

    work: int = 64
    """Side of the matrix multiplied each step."""


@dataclass(kw_only=True)
class FaultyConfig(ScenarioConfig):
    """Schema of the faulty scenario."""

    severity: float = 1.0
    """Unused; range 0..10 to test validation."""
    smoke: FaultySize = field(default_factory=lambda: FaultySize(warmup_steps=1, steps=3))
    """CPU size."""
    full: FaultySize = field(default_factory=lambda: FaultySize(warmup_steps=1, steps=3))
    """GPU size."""


class Fine(Workload):
    def __init__(self, size: FaultySize, ctx: RunContext, delay_s: float) -> None:
        self.size, self.ctx, self.delay_s = size, ctx, delay_s

    def setup(self) -> None:
        self.a = torch.randn(self.size.work, self.size.work, device=self.ctx.device)

    def step(self, index: int) -> None:
        with phase("forward"):
            self.a = torch.tanh(self.a @ self.a)
            time.sleep(self.delay_s)


class Crash(Fine):
    def step(self, index: int) -> None:
        raise RuntimeError("deliberate failure in the faulty scenario's crash variant")


class Hang(Fine):
    def step(self, index: int) -> None:
        time.sleep(3600)


def build(cfg: FaultyConfig, size: FaultySize, variant: str, ctx: RunContext) -> Workload:
    if variant == "crash":
        return Crash(size, ctx, 0.0)
    if variant == "hang":
        return Hang(size, ctx, 0.0)
    return Fine(size, ctx, 0.02 if variant == "baseline" else 0.0)


SCENARIO = Scenario(
    name="faulty",
    bottleneck="host_sync",
    title="Faults for the harness tests",
    variants=(
        Variant(name="baseline", kind="baseline", summary="finishes, slowly"),
        Variant(name="crash", kind="fix", summary="raises in its first step"),
        Variant(name="hang", kind="fix", summary="sleeps past any timeout"),
        Variant(name="ideal", kind="ideal", summary="finishes, fast"),
    ),
    severity=Severity(meaning="unused", unit="1", low=0, high=10, why_default="test only"),
    teaching=Teaching(symptom="n/a", cause="n/a", fix="n/a"),
    config_cls=FaultyConfig,
    build=build,
)
