"""Ground truth, measured: what each variant should show, from the timed saving of removing the
cause, set against the same bar the detector uses.

For a variant and its scenario's class, the measured saving (:mod:`harness.judge.measure`: ``1
- t(removal) / t(variant)``, paired within rounds, with its interval) is set against the class's
bar, ``diagnosis.<class>.min_saving_share`` from the run's composed thresholds (an override
moves the truth with the detector). The state (:class:`TruthState`):

- ``fires``: the interval's low end is at or above the bar; the class should fire;
- ``clear``: its high end is below the bar; the class should not fire;
- ``either``: the interval straddles the bar: shown and counted apart, never refutes;
- ``not_taken``: a baseline measured ``clear``: the injection did not take on this machine (not
  judged);
- ``oversubscribed``: the saving reaches the bar, but the variant's step loop waited for a core
  (runnable, on a run queue: :mod:`harness.core.schedwait`) longer per step than the removal's
  did, by at least ``diagnosis.oversubscribed_min_share`` of the measured gap, and without that
  extra wait the saving's interval would not reach the bar (:func:`oversubscribed`): the gap is
  CPU oversubscription (a fix's own pool process beside the loop on a loaded 2-core box), not
  the class's mechanism (a thread asleep on the GIL, a rank asleep on its peer). For a class
  whose cost is the loop asleep (``ClassSpec.loop_asleep``: gil_contention) the loop's extra
  CPU time counts with its extra wait: a core shared with another busy thread runs the loop
  slower without putting it on a run queue, and removing the cause cannot save CPU time there.
  Not judged; the sentence names the numbers;
- ``no_removal``: nothing to time the variant against (no ideal, no limit, no timed round).

The declared roles (``Variant.expectation``: ``bottleneck``, ``clean``, ``partial``) stay as a
check only: where the measurement disagrees, the measurement decides and the sentence says so.

A class other than the scenario's own is held to the same measured gap (:func:`off_targets`):
a fired finding whose predicted saving exceeds the gap beyond both intervals is a false
positive; one within it is a second cause, not an error.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from analysis.findings import Finding, State
from analysis.plots import numbers
from harness.core.runfolder import OffTargetState, TruthState
from harness.judge.measure import Saving
from scenarios import Scenario

__all__ = [
    "BAR_KEYS",
    "OffTarget",
    "OffTargetState",
    "Truth",
    "TruthState",
    "bar_of",
    "expect",
    "judge_own",
    "off_targets",
    "oversubscribed",
    "pct",
    "pct_ci",
    "predicted_saving",
    "predicted_text",
    "state_of",
    "without_wait",
]


#: The threshold of a class's section that is its saving bar, first found wins (exposed_comm
#: states its bar as the exposed share of the window, the same currency).
BAR_KEYS: tuple[str, ...] = ("min_saving_share", "min_nccl_exposed_share")


def bar_of(thresholds: Any, klass: str) -> float | None:
    """The saving share at which ``klass``'s detector fires, from the run's composed
    thresholds (``analysis.detect.load_thresholds``); None when its section has no bar."""
    section = getattr(thresholds, klass, None)
    for key in BAR_KEYS:
        if getattr(section, key, None) is not None:
            return float(getattr(section, key))
    return None


def pct(share: float) -> str:
    """A share as a percentage with no decimals ('17%')."""
    return f"{share * 100:.0f}%"


def pct_ci(share: float, low: float, high: float) -> str:
    """'17% [15-19%]', as the report's tables write a share (one formatter); the share alone
    where the interval is unknown (NaN), never a made-up one."""
    return numbers.share_ci(share, low, high)


def state_of(saving: Saving, bar: float) -> TruthState:
    """fires / clear / either: the saving's interval against the bar."""
    if saving.low >= bar:
        return TruthState.FIRES
    if saving.high < bar:
        return TruthState.CLEAR
    return TruthState.EITHER


@dataclass(frozen=True)
class Truth:
    """One variant's measured truth for its scenario's class."""

    klass: str
    """The scenario's class."""
    state: TruthState
    saving: Saving | None
    """The measured saving of removing the cause (None: ``no_removal``)."""
    bar: float | None
    """The class's bar (``diagnosis.<class>.min_saving_share``)."""
    declared: str
    """The variant's declared role: ``bottleneck``, ``clean`` or ``partial``."""
    because: str
    """The sentence: the measurement against the bar, and the declared role where they
    disagree, or why there is no truth."""
    extra_wait_share: float | None = None
    """The variant's step loop's run-queue wait per step beyond the removal's, as a share of
    the variant's step (None: not measured, e.g. no schedstat or a measured limit)."""
    extra_cpu_share: float | None = None
    """The same for the loop's CPU time per step, counted only for a class whose cost is the
    loop asleep (``ClassSpec.loop_asleep``); None otherwise or where not measured."""

    @property
    def extra_share(self) -> float | None:
        """What the loop spent beyond the removal's loop other than asleep: its extra wait for
        a core, plus its extra CPU time where counted (None: neither measured)."""
        if self.extra_wait_share is None and self.extra_cpu_share is None:
            return None
        return (self.extra_wait_share or 0.0) + (self.extra_cpu_share or 0.0)

    @property
    def expected(self) -> str:
        """The class the variant should show, or ``none``: measured where there is a
        measurement (``none`` for ``oversubscribed``: its gap was a wait for a core), the
        declared role where there is none."""
        if self.state in (TruthState.FIRES, TruthState.EITHER):
            return self.klass
        if self.state is TruthState.NO_REMOVAL and self.declared != "clean":
            return self.klass
        return "none"

    @property
    def declared_agrees(self) -> bool | None:
        """Whether the declared role says what the measurement says (None: undecided)."""
        if not self.state.decided:
            return None
        return (self.declared != "clean") == (self.state is TruthState.FIRES)

    def measured(self) -> str:
        """'data_stall measured 17% [15-19%] >= bar 15% (fires)'; for an oversubscribed
        variant, the run-queue wait that explains it and the saving without it."""
        s = self.saving
        if s is None or self.bar is None:
            return f"{self.klass} not measured ({self.because})"
        rel = {TruthState.FIRES: ">=", TruthState.CLEAR: "<"}.get(
            state_of(s, self.bar), "straddles"
        )
        said = self.state if self.state is TruthState.NOT_TAKEN else state_of(s, self.bar)
        text = (
            f"{self.klass} measured {pct_ci(s.share, s.low, s.high)} {rel} bar "
            f"{pct(self.bar)} ({said})"
        )
        if self.state is TruthState.OVERSUBSCRIBED and self.extra_share is not None:
            f, w = self.extra_share, self.extra_wait_share or 0.0
            if self.extra_cpu_share is None:
                spent, that = f"waited for a core {pct(w)}", "that wait"
            else:
                spent = f"waited for a core {pct(w)} and ran {pct(self.extra_cpu_share)} longer"
                that = f"both ({self.klass} is time asleep)"
            text += (
                f", of which its loop {spent} of its step more than {s.by}'s loop; without "
                f"{that} {pct_ci(*without_wait(s, f))} < bar {pct(self.bar)} (oversubscribed)"
            )
        return text


def without_wait(saving: Saving, wait_share: float) -> tuple[float, float, float]:
    """(share, low, high) of the saving had the variant's step not held ``wait_share`` of
    extra run-queue wait: ``1 - t(removal) / (t(variant) * (1 - wait_share))``."""
    keep = 1.0 - min(max(wait_share, 0.0), 0.999)
    share, low, high = (1.0 - (1.0 - x) / keep for x in (saving.share, saving.low, saving.high))
    return share, low, high


def oversubscribed(saving: Saving, bar: float, extra_share: float | None, min_share: float) -> bool:
    """Whether a saving that reaches ``bar`` is CPU oversubscription: the loop's extra time
    other than asleep (``extra_share`` of the variant's step: :attr:`Truth.extra_share`) is
    at least ``min_share`` of the measured gap, and the saving without it no longer reaches
    the bar (its interval's low end below it)."""
    if extra_share is None or extra_share <= 0 or saving.share <= 0:
        return False
    if extra_share < min_share * saving.share:
        return False
    return without_wait(saving, extra_share)[1] < bar


def expect(
    scen: Scenario,
    variant: str,
    saving: Saving | None,
    bar: float | None,
    why: str = "",
    *,
    wait_share: float | None = None,
    cpu_share: float | None = None,
    oversubscribed_min_share: float = 0.5,
) -> Truth:
    """The variant's truth from its measured saving (``why``: why there is none);
    ``wait_share``: its step loop's run-queue wait per step beyond the removal's, a share of
    its step; ``cpu_share``: its extra CPU time, the same way, where the class's cost is the
    loop asleep (:func:`oversubscribed` of their sum, with ``oversubscribed_min_share``)."""
    declared = scen.variant(variant).expectation.role
    base = {"klass": scen.bottleneck, "saving": saving, "bar": bar, "declared": declared,
            "extra_wait_share": wait_share, "extra_cpu_share": cpu_share}  # fmt: skip
    if saving is None or bar is None:
        why = why or f"{scen.bottleneck} has no saving bar"
        return Truth(**base, state=TruthState.NO_REMOVAL, because=f"no measured removal: {why}")
    probe = Truth(**base, state=state_of(saving, bar), because="")
    if probe.state is TruthState.FIRES and oversubscribed(
        saving, bar, probe.extra_share, oversubscribed_min_share
    ):
        probe = replace(probe, state=TruthState.OVERSUBSCRIBED)
    if declared == "bottleneck" and probe.state is TruthState.CLEAR:
        probe = replace(probe, state=TruthState.NOT_TAKEN)  # said so in its reading
    state = probe.state
    text = probe.measured() + f" against {saving.by}"
    if state is TruthState.NOT_TAKEN:
        text += ": the injection did not take on this machine"
    elif probe.declared_agrees is False:
        text += f"; declared {declared}, judged by the measurement"
    return Truth(**base, state=state, because=text)


def judge_own(truth: Truth, finding: Finding | None) -> bool | None:
    """Whether the scenario's class's finding meets the truth; None when the truth is not
    decided or the detector could not judge."""
    if not truth.state.decided or finding is None or finding.state is State.NOT_JUDGED:
        return None
    return finding.fired == (truth.state is TruthState.FIRES)


def predicted_saving(f: Finding) -> tuple[float, float, float]:
    """(saving, low, high) a finding predicts for removing its cause: from its predicted
    speedup (``1 - 1 / speedup``), the interval NaN where it has none; without a predicted
    speedup its impact (the share of the step it explains), with no interval."""
    sp = f.predicted_speedup
    if sp is None or sp <= 0:
        return f.impact, math.nan, math.nan
    lo, hi = f.predicted_speedup_ci_low, f.predicted_speedup_ci_high
    if not (lo and hi and lo > 0 and hi > 0):
        return 1.0 - 1.0 / sp, math.nan, math.nan
    return 1.0 - 1.0 / sp, 1.0 - 1.0 / lo, 1.0 - 1.0 / hi


def predicted_text(f: Finding) -> str:
    """What a finding predicts, as the predictions table has it: 'predicted 57% [49-63%]'
    (the interval only where the finding has one), 'impact 23% without a predicted speedup'
    (a fired finding that predicts none: the table shows none), 'no prediction' (clear)."""
    saving, low, high = predicted_saving(f)
    if f.predicted_speedup is not None and f.predicted_speedup > 0:
        return f"predicted {pct_ci(saving, low, high)}"
    if f.fired:
        return f"impact {pct(saving)} without a predicted speedup"
    return "no prediction"


def _low_end(pred: tuple[float, float, float]) -> float:
    """A predicted saving's low end: its point where it has no interval."""
    return pred[1] if math.isfinite(pred[1]) else pred[0]


@dataclass(frozen=True)
class OffTarget:
    """A fired class other than the scenario's own."""

    klass: str
    state: OffTargetState
    predicted: tuple[float, float, float]
    """Its predicted saving (point, low, high; NaN ends: no interval)."""
    text: str = ""
    """How the verdict words it (:func:`predicted_text`)."""
    gap: Saving | None = None
    """The measured gap it was held to (:func:`off_target_gap`)."""

    def describe(self) -> str:
        """'host_sync predicted 30% [28-33%] > the measured gap 5% [3-8%] (false_positive)'."""
        gap = self.gap
        text = f"{self.klass} {self.text or 'predicted ' + pct_ci(*self.predicted)}"
        if gap is None:
            return f"{text}, no measured gap ({self.state})"
        rel = ">" if self.state is OffTargetState.FALSE_POSITIVE else "within"
        gap_text = pct_ci(gap.share, gap.low, gap.high)
        return f"{text} {rel} the measured gap {gap_text} ({self.state})"


def off_target_gap(truth: Truth, ideal: Saving | None) -> Saving | None:
    """The measured gap a fired class other than the scenario's own is held to: the removal's
    saving, or the variant's saving to its scenario's ideal where that one reaches higher (the
    removal can leave other causes in place; None: no removal measured, left unchecked)."""
    if truth.saving is None or ideal is None or ideal.high <= truth.saving.high:
        return truth.saving
    return ideal


def off_targets(
    truth: Truth, findings: Mapping[str, Finding], ideal: Saving | None = None
) -> tuple[OffTarget, ...]:
    """Every fired class other than the scenario's own, held to the measured gap
    (:func:`off_target_gap`: the removal's saving, or ``ideal``, the variant's saving to its
    scenario's ideal, where that reaches higher): beyond it (its low end above the gap's high
    end) a false positive, within it a second cause."""
    out = []
    gap = off_target_gap(truth, ideal)
    for k, f in findings.items():
        if k == truth.klass or not f.fired:
            continue
        pred = predicted_saving(f)
        if gap is None:
            state = OffTargetState.UNCHECKED
        elif _low_end(pred) > gap.high:
            state = OffTargetState.FALSE_POSITIVE
        else:
            state = OffTargetState.SECOND_CAUSE
        out.append(OffTarget(klass=k, state=state, predicted=pred, text=predicted_text(f), gap=gap))
    return tuple(out)
