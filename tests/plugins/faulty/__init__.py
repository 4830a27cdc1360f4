"""A deliberately broken scenario for the harness's fault tests (never shipped).

Selected with BOTTLENECK_SCENARIO_MODULES=tests.plugins.faulty and +scenario=faulty. Its
variants finish, raise, hang (with child processes), run out of memory, run slowly or kill
the traced fork server they were forked from, so tests
can check that one variant's failure never loses another's results.

Environment knobs (the worker inherits the test's environment):
FAULTY_PID_FILE: where 'hang' writes the PIDs of the children it starts;
FAULTY_SLOW_S: seconds 'slow' sleeps per step (default 1.5);
FAULTY_HOLD_FILE: once inside its measured window, 'slow' also waits each step until this file
exists, so a test can keep a run busy exactly as long as it needs (no fixed sleep to outlast);
FAULTY_HOLD_PROFILED=1: 'slow' holds only where nsys traces it (its profile, not its timing);
FAULTY_LEAVE=1: in its set-up 'slow' leaves what a killed process cannot clean up: a
multiprocessing temporary folder (``pymp-*``, as torch's loader workers make) and a daemon that
sleeps for an hour with PID 1 as its parent (as ``nsys --start-agent`` is).
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


SCENARIO = Scenario(
    name="faulty",
    bottleneck="host_sync",
    title="Faults for the harness tests",
    variants=(
        Variant(name="baseline", kind="baseline", summary="finishes, slowly"),
        Variant(name="crash", kind="fix", summary="raises in its first step"),
        Variant(name="hang", kind="fix", summary="sleeps past any timeout"),
        Variant(name="ideal", kind="ideal", summary="finishes, fast"),
        Variant(name="oom", kind="fix", summary="allocates 20 GiB in its first step"),
        Variant(
            name="orphan",
            kind="fix",
            summary="kills the traced fork server it was forked from, then finishes",
        ),
        Variant(name="slow", kind="fix", summary="sleeps $FAULTY_SLOW_S (1.5) s a step"),
    ),
    severity=Severity(meaning="unused", unit="1", low=0, high=10, why_default="test only"),
    teaching=Teaching(symptom="n/a", cause="n/a", fix="n/a"),
    config_cls=FaultyConfig,
    build=f"{__name__}.workload:build",
)
