"""The ``harness.timing`` config section: how a scenario's timing rounds run and how many it gets.

Why a section of its own: the rounds' design (sliced or back to back, where the threads run,
when to add a round) is one decision made together, measured in docs/measurement.md, and the
run records it with its manifest.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PIN_MODES", "TimingConfig"]

#: ``harness.timing.pin`` choices.
PIN_MODES = ("auto", "on", "off")


@dataclass(kw_only=True)
class TimingConfig:
    """How timing rounds run (``harness.timing``)."""

    slices: bool = True
    """Time each round's variants in short interleaved slices: the round's processes (one per
    variant) are all set up and held, then take turns, ABBA, each slice about ``slice_s`` of
    whole steps, the others stopped meanwhile (harness/execution/slicing.py). False: each
    variant's window back to back, one process after the other."""
    spread_rounds: bool = True
    """Run the planned rounds round-major: round 1 of every scenario, then round 2 of every
    scenario..., and put an added round after the rounds already queued, so that a scenario's
    rounds lie minutes apart. The host's speed modes last from seconds to minutes; rounds in a
    row meet one stretch of them, which a rerun does not meet again (docs/measurement.md,
    "Rounds spread over the run"). False: each scenario's rounds one after the other, an added
    round right after the one that asked for it."""
    slice_s: float = 0.1
    """The length of a slice (seconds) where a step allows; a longer step is a slice of its
    own (of one ``Workload.period_steps``)."""
    pin: str = "auto"
    """In a sliced round, the launching thread of every variant on one core, helper threads
    and loader processes on the others: ``on``, ``off``, or ``auto`` (on with 4 CPUs or more)."""
    warmup_s: float | None = 1.0
    """A sliced round's warm-up budget per worker (seconds; None: ``harness.max_warmup_s``,
    and at most that; ``harness.max_warmup_s=null`` runs every warm-up step here too): the
    warm-up ends once past it and past ``warmup_min_steps`` steps and the workload's
    ``extra_warmup_steps``."""
    warmup_min_steps: int = 2
    """The fewest warm-up steps of a sliced round's worker."""
    window_s: float | None = 1.0
    """A sliced round's window budget per worker (seconds of measured steps; None:
    ``harness.max_window_s``, and at most that; ``harness.max_window_s=null`` measures the
    size's steps here too). Short: the interval comes from the rounds, and a round's slices
    pair one state of the host, so a long window buys little; rounds are added where the
    noise is (``target_half_width``)."""
    slice_probes: bool = False
    """Probe the host's speed right before and right after every slice: a short Python loop
    on the loop's core and on a helper core, a copy between two host buffers and the launch
    rate (result.json ``slices.probes``; ``harness.execution.hostprobe.SliceProbe``). Outside
    the measured steps; about 1-3 ms a slice. What it is for: telling which of the host's
    speed modes each slice met (docs/measurement.md)."""
    min_steps: int = 4
    """The fewest measured steps of a sliced round's worker (two cycles of a one-step slice)."""
    target_half_width: float = 0.05
    """Rounds are added to a scenario while one of its pairs' 95% intervals is wider than
    this (relative half-width: sqrt(high / low) - 1), up to ``max_rounds`` and while
    ``budget_s`` allows."""
    max_rounds: int | None = None
    """The most timing rounds a scenario gets (``harness.repeats`` is the fewest). None: 8 on
    a GPU; on the CPU ``harness.repeats`` (no rounds are added)."""
    budget_s: float | None = 420.0
    """The suite's wall-time budget (seconds): a round is added only while the run's time so
    far, the round and what the rest of the plan is estimated to take fit in it
    (harness/execution/wallplan.py). None: no budget (``max_rounds`` alone)."""

    def __post_init__(self) -> None:
        if self.slice_s <= 0:
            raise ValueError(f"harness.timing.slice_s must be > 0 seconds, got {self.slice_s}")
        if self.pin not in PIN_MODES:
            raise ValueError(f"harness.timing.pin must be one of {PIN_MODES}, got {self.pin!r}")
        if self.warmup_s is not None and self.warmup_s < 0:
            raise ValueError(f"harness.timing.warmup_s must be >= 0 or null, got {self.warmup_s}")
        if self.window_s is not None and self.window_s <= 0:
            raise ValueError(f"harness.timing.window_s must be > 0 or null, got {self.window_s}")
        if self.min_steps < 1:
            raise ValueError(f"harness.timing.min_steps must be >= 1, got {self.min_steps}")
        if self.warmup_min_steps < 1:
            raise ValueError(
                f"harness.timing.warmup_min_steps must be >= 1, got {self.warmup_min_steps}"
            )
        if not 0 < self.target_half_width < 1:
            raise ValueError(
                "harness.timing.target_half_width must be within (0, 1), "
                f"got {self.target_half_width}"
            )
        if self.max_rounds is not None and self.max_rounds < 1:
            raise ValueError(f"harness.timing.max_rounds must be >= 1, got {self.max_rounds}")
        if self.budget_s is not None and self.budget_s <= 0:
            raise ValueError(f"harness.timing.budget_s must be > 0 or null, got {self.budget_s}")
