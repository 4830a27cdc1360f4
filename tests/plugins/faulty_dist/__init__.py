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

from dataclasses import dataclass, field

from scenarios import (
    Scenario,
    ScenarioConfig,
    Severity,
    Size,
    Teaching,
    Variant,
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
    build=f"{__name__}.workload:build",
    world_size=2,
)
