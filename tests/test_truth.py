"""The measured ground truth on hand-made round data: a variant's saving from removing the cause
against its class's bar (fires / clear / either), an override of the bar moving it, a baseline
whose injection did not take, a declared role the measurement overrides, other classes held to
the measured gap (second cause vs false positive), and the verdicts built on them.

Expectations are computed here from the steps themselves: with every step of a round equal, the
paired ratio of a round is exact and its interval collapses onto it."""

from __future__ import annotations

import math

import pandas as pd
import pytest

import scenarios
from analysis.detect import load_thresholds
from analysis.findings import CLASSES, PREDICTION_FIELDS, Finding, State
from harness.core.results import VariantResults
from harness.core.stats import log_t_interval
from harness.judge import measure as M
from harness.judge import scoring as S
from harness.judge import truth as T
from harness.judge import verdicts as V
from harness.judge.diagnosis_table import Judged, diagnosis_frame, diagnosis_row
from harness.judge.evidence import Evidence
from harness.judge.measure import Saving, saving_between, saving_to_limit
from scenarios import Expectation, Variant

FOUND = scenarios.discover()
SCEN = FOUND["sync_loading"]


def _timed(name: str, rounds: dict[int, list[float]]) -> VariantResults:
    return VariantResults(scenario="sync_loading", variant=name, rounds=rounds)


IDEAL = _timed("ideal", {1: [10.0] * 8, 2: [10.0] * 8})


def test_the_saving_is_paired_within_rounds() -> None:
    """1 - t(removal) / t(variant), the geometric mean of the rounds' ratios: a host twice as
    slow in round 2 for both variants moves neither the point nor the interval."""
    fix = _timed("fix", {1: [20.0] * 8, 2: [40.0] * 8})
    slow_ideal = _timed("ideal", {1: [10.0] * 8, 2: [20.0] * 8})
    s = saving_between(fix, slow_ideal, "ideal")
    assert (s.share, s.low, s.high, s.rounds) == pytest.approx((0.5, 0.5, 0.5, 2))
    assert s.speedup == pytest.approx(2.0) and s.by == "ideal"
    assert saving_between(fix, _timed("ideal", {3: [10.0]}), "ideal") is None  # no round paired


def test_a_limit_is_held_fixed_against_the_variants_rounds() -> None:
    fix = _timed("fix", {1: [20.0] * 4, 2: [25.0] * 4})
    s = saving_to_limit(fix, {1: 5.0, 2: 5.0}, "own gpu_busy_ms_per_step")
    point = 1 - math.sqrt(5 / 20 * 5 / 25)
    assert s.share == pytest.approx(point)
    # Student-t on the rounds' log ratios, 1 degree of freedom: wider than the rounds' own
    _, lo, hi = log_t_interval([math.log(5 / 20), math.log(5 / 25)])
    assert (s.low, s.high) == pytest.approx((1 - hi, 1 - lo))
    assert s.low < 1 - 5 / 20 and s.high > 1 - 5 / 25
    assert saving_to_limit(fix, {1: 0.0}, "x") is None


@pytest.mark.parametrize(
    ("rounds", "state"),
    [
        ({1: [20.0] * 8, 2: [20.0] * 8}, T.TruthState.FIRES),  # 50%, low end >= 15%
        ({1: [10.5] * 8, 2: [10.5] * 8}, T.TruthState.CLEAR),  # 4.8%, high end < 15%
        ({1: [11.0] * 8, 2: [13.5] * 8}, T.TruthState.EITHER),  # rounds 9% and 26%: straddles
    ],
)
def test_states_around_the_bar(rounds, state) -> None:
    s = saving_between(_timed("dali", rounds), IDEAL, "ideal")
    means = [sum(v) / len(v) for v in rounds.values()]
    _, lo, hi = log_t_interval([math.log(10.0 / m) for m in means])
    assert (s.low, s.high) == pytest.approx((1 - hi, 1 - lo))
    bar = T.bar_of(load_thresholds(), "data_stall")
    assert bar == 0.15
    assert T.state_of(s, bar) is state


def test_an_override_of_the_bar_moves_the_truth() -> None:
    """The bar is the detector's own, read from the run's composed thresholds."""
    # six rounds alternating 9% and 26%: 8-27% (two would straddle every bar)
    six = {r: [11.0 if r % 2 else 13.5] * 8 for r in range(1, 7)}
    s = saving_between(
        _timed("dali", six), _timed("ideal", dict.fromkeys(six, [10.0] * 8)), "ideal"
    )
    assert 0.05 < s.low < 0.15 < s.high < 0.30
    for bar, state in ((0.05, "fires"), (0.15, "either"), (0.30, "clear")):
        cfg = load_thresholds({"data_stall": {"min_saving_share": bar}})
        assert T.bar_of(cfg, "data_stall") == bar
        truth = T.expect(SCEN, "dali", s, T.bar_of(cfg, "data_stall"))
        assert str(truth.state) == state
    # exposed_comm states its bar as the exposed share of the window
    assert T.bar_of(load_thresholds(), "exposed_comm") == 0.1


def _saving(share: float, low: float, high: float) -> Saving:
    return Saving(share=share, low=low, high=high, by="ideal", rounds=2)


def test_a_baseline_under_its_bar_did_not_take() -> None:
    truth = T.expect(SCEN, "baseline", _saving(0.05, 0.03, 0.07), 0.15)
    assert truth.state is T.TruthState.NOT_TAKEN and not truth.state.decided
    assert "the injection did not take on this machine" in truth.because
    assert truth.expected == "none" and truth.declared_agrees is None
    assert T.judge_own(truth, _finding("data_stall", True, 1.2)) is None
    straddles = T.expect(SCEN, "baseline", _saving(0.14, 0.10, 0.18), 0.15)
    assert straddles.state is T.TruthState.EITHER  # not under its bar: counted apart


def test_a_fix_declared_clean_that_measures_fires_is_judged_by_the_measurement() -> None:
    assert SCEN.variant("dali").expectation.role == "clean"
    truth = T.expect(SCEN, "dali", _saving(0.20, 0.17, 0.23), 0.15)
    assert truth.state is T.TruthState.FIRES and truth.expected == "data_stall"
    assert truth.declared_agrees is False
    assert "declared clean, judged by the measurement" in truth.because
    assert T.judge_own(truth, _finding("data_stall", True, 1.25)) is True
    assert T.judge_own(truth, _finding("data_stall", False, 1.0)) is False
    partial = T.expect(SCEN, "async_dataloader", _saving(0.02, 0.0, 0.04), 0.15)
    assert partial.state is T.TruthState.CLEAR and partial.declared_agrees is False
    assert T.judge_own(partial, _finding("data_stall", False, 1.0)) is True


def test_no_removal_is_no_truth() -> None:
    truth = T.expect(SCEN, "dali", None, 0.15, "ideal has no timed round")
    assert truth.state is T.TruthState.NO_REMOVAL
    assert truth.because == "no measured removal: ideal has no timed round"
    assert truth.expected == "none"  # dali is declared clean
    assert T.expect(SCEN, "baseline", None, 0.15).expected == "data_stall"


def _finding(klass: str, fired: bool, speedup: float | None, lo=None, hi=None) -> Finding:
    impact = 1 - 1 / speedup if fired and speedup else 0.0
    interval = dict(zip(PREDICTION_FIELDS[1:3], (lo, hi), strict=True))
    return Finding(klass, fired, impact, {}, [], "r", predicted_speedup=speedup, **interval)


def test_another_class_is_held_to_the_measured_gap() -> None:
    """A fired class other than the scenario's own: beyond the measured gap on both intervals
    a false positive, within it a second cause."""
    truth = T.expect(SCEN, "dali", _saving(0.20, 0.17, 0.23), 0.15)
    findings = {
        "data_stall": _finding("data_stall", True, 1.25),
        # 1 - 1/1.25 = 20% [1 - 1/1.2 = 16.7%, 23.1%]: reaches the gap's 23%: a second cause
        "host_sync": _finding("host_sync", True, 1.25, 1.2, 1.3),
        # 1 - 1/1.5 = 33% [1 - 1/1.4 = 28.6%, ...]: above the gap's high end: a false positive
        "launch_bound": _finding("launch_bound", True, 1.5, 1.4, 1.6),
        "pageable_copy": _finding("pageable_copy", False, 1.0),
    }
    off = {o.klass: o for o in T.off_targets(truth, findings)}
    assert set(off) == {"host_sync", "launch_bound"}
    assert off["host_sync"].state is T.OffTargetState.SECOND_CAUSE
    assert off["launch_bound"].state is T.OffTargetState.FALSE_POSITIVE
    assert off["launch_bound"].predicted == pytest.approx((1 / 3, 1 - 1 / 1.4, 1 - 1 / 1.6))
    # without a predicted speedup the impact is the predicted saving, with no interval
    bare = Finding("host_sync", True, 0.4, {}, [], "r")
    (one,) = T.off_targets(truth, {"host_sync": bare})
    assert one.predicted[0] == 0.4 and all(math.isnan(x) for x in one.predicted[1:])
    assert one.state is T.OffTargetState.FALSE_POSITIVE  # its point against the gap's high end
    assert "host_sync impact 40% without a predicted speedup > the measured gap" in (one.describe())
    (unchecked,) = T.off_targets(T.expect(SCEN, "dali", None, 0.15), {"host_sync": bare})
    assert unchecked.state is T.OffTargetState.UNCHECKED


def test_on_its_own_removal_another_class_is_held_to_the_ideal() -> None:
    """The removal variant itself has nothing of its class left (0 by construction), yet its
    scenario's ideal may still be faster: another class that fired there is held to that gap.
    The H100 run of 3f51ea2: fp32_matmul's bf16_autocast (5.44 ms a step) against ideal
    (4.53 ms), unfused_elementwise predicting 1.18x; a gap the ideal does not widen changes
    nothing, and without a removal measured the class stays unchecked."""
    scen = FOUND["fp32_matmul"]
    timed = {
        "bf16_autocast": VariantResults("fp32_matmul", "bf16_autocast", {1: [5.44] * 4, 2: [5.40] * 4}),
        "ideal": VariantResults("fp32_matmul", "ideal", {1: [4.53] * 4, 2: [4.50] * 4}),
    }  # fmt: skip
    own, why = M.measured_saving(scen, "bf16_autocast", timed)
    assert why == "" and own.share == 0.0 and own.high == 0.0
    truth = T.expect(scen, "bf16_autocast", own, 0.15)
    ideal = M.ideal_saving(scen, "bf16_autocast", timed)
    assert ideal.by == "ideal" and ideal.share == pytest.approx(1 - 4.515 / 5.42, abs=0.01)
    fired = {"unfused_elementwise": _finding("unfused_elementwise", True, 1.18, 1.18, 1.19)}
    (before,) = T.off_targets(truth, fired)
    assert before.state is T.OffTargetState.FALSE_POSITIVE
    (after,) = T.off_targets(truth, fired, ideal)
    assert after.state is T.OffTargetState.SECOND_CAUSE and after.gap is ideal
    assert "within the measured gap 17%" in after.describe()
    assert M.ideal_saving(scen, "ideal", timed) is None  # the ideal itself: nothing to add
    assert T.off_target_gap(truth, _saving(0.0, -0.01, 0.0)) is truth.saving
    assert T.off_target_gap(T.expect(scen, "bf16_autocast", None, 0.15), ideal) is None


# -- verdicts on judged variants --------------------------------------------------------------


def _findings(fired: dict[str, float], not_judged: frozenset[str] = frozenset()):
    """Every class's finding: ``fired`` maps a class to its predicted speedup."""
    out = {}
    for k in CLASSES:
        if k in not_judged:
            out[k] = Finding(k, State.NOT_JUDGED, 0.0, {}, [], "no CUDA tables")
        else:
            out[k] = _finding(k, k in fired, fired.get(k, 1.0))
    return out


def _judged(variant: str, saving: Saving | None, fired: dict[str, float], nj=frozenset()):
    kind = SCEN.variant(variant).kind
    e = Evidence(scenario="sync_loading", variant=variant, kind=kind,
                 findings=_findings(fired, nj))  # fmt: skip
    truth = T.expect(SCEN, variant, saving, 0.15, "no ideal")
    return Judged(
        evidence=e,
        truth=truth,
        own=T.judge_own(truth, e.findings["data_stall"]),
        off=T.off_targets(truth, e.findings),
    )


RUNS = pd.DataFrame(
    {
        "scenario": "sync_loading",
        "variant": ["baseline", "async_dataloader", "dali", "ideal"],
        "kind": ["baseline", "fix", "fix", "ideal"],
        "speedup_ci_low": [0.9, 9.0, 30.0, 40.0],
    }
)
ZERO = _saving(0.0, 0.0, 0.0)
BASE = _judged("baseline", _saving(0.97, 0.96, 0.98), {"data_stall": 40.0})
IDEAL_J = _judged("ideal", ZERO, {})


def _verdict(judged, **kw) -> pd.Series:
    return V.verdicts(judged, RUNS, FOUND, **kw).iloc[0]


def test_either_never_refutes_and_says_both_numbers() -> None:
    dali = _judged("dali", _saving(0.166, 0.135, 0.199), {"data_stall": 1.2})
    v = _verdict([BASE, dali, IDEAL_J])
    assert v["verdict"] == "confirmed"
    assert "dali: data_stall measured 17% [14-20%] straddles bar 15% (either)" in v["reason"]
    # a prediction without an interval is written without one (issue 52: "57% [57-57%]")
    assert "predicted 17% (fired)" in v["reason"] and "[17-17%]" not in v["reason"]
    assert (v["truth_fires"], v["truth_clear"], v["truth_either"]) == (1, 1, 1)
    assert (v["judged_right"], v["judged_wrong"]) == (2, 0)


def test_refuted_says_measured_next_to_predicted() -> None:
    dali = _judged("dali", _saving(0.20, 0.17, 0.23), {})  # fires, but nothing fired
    v = _verdict([BASE, dali, IDEAL_J])
    assert v["verdict"] == "refuted"
    assert v["reason"] == (
        "dali: data_stall measured 20% [17-23%] >= bar 15% (fires), predicted 0% "
        "(clear) (declared clean: judged by the measurement)"
    )
    leaked = _judged("dali", _saving(0.02, 0.01, 0.03), {"data_stall": 1.2})  # clear, fired
    assert _verdict([BASE, leaked, IDEAL_J])["verdict"] == "refuted"
    missed = _judged("baseline", _saving(0.97, 0.96, 0.98), {})
    assert _verdict([missed, IDEAL_J])["verdict"] == "refuted"


def test_a_false_positive_refutes_and_a_second_cause_does_not() -> None:
    fp = _judged("ideal", ZERO, {"host_sync": 1.3})
    v = _verdict([BASE, fp])
    assert v["verdict"] == "refuted" and v["false_positives"] == 1
    assert "ideal: data_stall measured 0% [0-0%] < bar 15% (clear)" in v["reason"]
    assert "host_sync predicted 23% > the measured gap 0% [0-0%]" in v["reason"]
    second = _judged("baseline", _saving(0.97, 0.96, 0.98), {"data_stall": 40.0, "host_sync": 1.3})
    v = _verdict([second, IDEAL_J])
    assert v["verdict"] == "confirmed" and v["second_causes"] == 1
    assert v["off_target"] == "baseline:host_sync"


def test_inconclusive_when_the_truth_or_the_export_cannot_say() -> None:
    not_taken = _judged("baseline", _saving(0.05, 0.03, 0.07), {})
    v = _verdict([not_taken, IDEAL_J])
    assert v["verdict"] == "inconclusive" and v["truth_not_taken"] == 1
    assert "the injection did not take on this machine" in v["reason"]
    unjudged = _judged("baseline", _saving(0.97, 0.96, 0.98), {}, frozenset({"data_stall"}))
    v = _verdict([unjudged, IDEAL_J])
    assert v["verdict"] == "inconclusive"
    assert "baseline: data_stall not judged (no CUDA tables)" in v["reason"]
    v = _verdict([BASE, _judged("dali", None, {})])
    assert v["verdict"] == "inconclusive" and "dali: no measured removal: no ideal" in v["reason"]
    assert _verdict([BASE, IDEAL_J], min_ci_low=50.0)["verdict"] == "inconclusive"
    assert _verdict([IDEAL_J])["reason"] == "the baseline has no readable export"


def test_confusion_counts_against_the_measured_truth() -> None:
    rows = [
        BASE,
        _judged("async_dataloader", _saving(0.6, 0.3, 0.8), {"data_stall": 2.5}),  # fires, found
        _judged("dali", _saving(0.02, 0.01, 0.03), {"data_stall": 1.2}),  # clear, fired
        _judged("dali", _saving(0.16, 0.13, 0.2), {"data_stall": 1.2}),  # either: apart
        IDEAL_J,
    ]
    diag = diagnosis_frame([diagnosis_row(j) for j in rows])
    assert list(diag["truth_state"]) == ["fires", "fires", "clear", "either", "clear"]
    matrix, scores = S.confusion(diag)
    assert matrix.loc["data_stall", "data_stall"] == 2
    assert matrix.loc["none", "data_stall"] == 1 and matrix.loc["none", "none"] == 1
    assert int(matrix.to_numpy().sum()) == 4  # the either row is not in the matrix
    s = scores.set_index("class")
    assert (s.loc["data_stall", "support"], s.loc["data_stall", "either"]) == (2, 1)
    assert s.loc["data_stall", "precision"] == pytest.approx(2 / 3)
    assert math.isnan(s.loc["exposed_comm", "precision"])


def test_a_second_cause_is_a_true_positive_of_its_class() -> None:
    second = _judged("baseline", _saving(0.97, 0.96, 0.98), {"data_stall": 40.0, "host_sync": 1.3})
    fp = _judged("ideal", ZERO, {"host_sync": 1.3})
    diag = diagnosis_frame([diagnosis_row(j) for j in (second, fp)])
    assert list(diag["host_sync_off_target"]) == ["second_cause", "false_positive"]
    assert S.fired_counts(diag, "host_sync") == {
        "reports": 2, "not_judged": 0, "tp": 1, "fp": 1, "fn": 0
    }  # fmt: skip


def test_expectations_are_validated() -> None:
    with pytest.raises(ValueError, match="baseline is expected to be 'bottleneck'"):
        Variant(name="b", kind="baseline", summary="x", expect=Expectation(role="clean"))
    with pytest.raises(ValueError, match="'partial' expectation needs its 'because'"):
        Expectation(role="partial")
    assert not hasattr(Expectation(role="clean"), "rule")  # no hand-copied thresholds
    assert FOUND["kernel_flood"].variant("torch_compile").expectation.role == "partial"
    assert SCEN.variant("async_dataloader").expectation.role == "partial"
    assert SCEN.variant("dali").expectation.role == "clean"
