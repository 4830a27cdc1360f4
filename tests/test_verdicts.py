"""Ground truth per variant: expectations (clean / bottleneck / partial, rules decided from the
run's measurements), verdicts and the confusion matrix, on hand-made findings and on the
committed H100 exports."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

import scenarios
from analysis.findings import CLASSES, Finding, State
from harness.judge import diagnosis_table as D
from harness.judge import scoring as S
from harness.judge import truth as T
from harness.judge import verdicts as V
from scenarios import Expectation, Rule, Variant
from tests._fixtures import sqlite_fixture

FOUND = scenarios.discover()
SCEN = FOUND["sync_loading"]
GPU_BASE = sqlite_fixture("gpu_nsys2025_sync_loading")
GPU_FIX = sqlite_fixture("gpu_nsys2025_sync_loading_async_dataloader")
#: An export on which nothing fires (the H100 kernel_flood cuda_graphs variant), standing in for
#: a fix that no longer stalls: the committed async_dataloader export still does (removing its
#: input pipeline would take the workers' toll on the main thread with it, ``test_detectors``).
NOT_STALLED = sqlite_fixture(
    "h100_kernel_flood__cuda_graphs", Path(__file__).parent / "data" / "h100"
)


def _findings(fired: set[str], not_judged: frozenset[str] = frozenset()) -> dict[str, Finding]:
    out = {}
    for k in CLASSES:
        state = State.FIRED if k in fired else State.NOT_JUDGED if k in not_judged else State.CLEAR
        out[k] = Finding(k, state, 0.6 if k in fired else 0.0, {f"{k}_x_share": 0.6}, [], "r")
    return out


def _diag(rows) -> pd.DataFrame:
    """rows: (variant, kind, Expected, fired classes[, not-judged classes])."""
    out = []
    for variant, kind, expected, fired, *nj in rows:
        r = SimpleNamespace(scenario="sync_loading", variant=variant, kind=kind)
        findings = _findings(fired, frozenset(nj[0]) if nj else frozenset())
        out.append(D.diagnosis_row(r, SCEN, expected, findings, ""))
    return D.diagnosis_frame(out)


BOTTLENECK = T.Expected("data_stall", "bottleneck", "")
CLEAN = T.Expected("none", "clean", "")
PARTIAL = T.Expected("data_stall", "partial", "slow workers")


def _runs(ci_low: float = 2.0) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "scenario": ["sync_loading"] * 3,
            "variant": ["baseline", "async_dataloader", "ideal"],
            "kind": ["baseline", "fix", "ideal"],
            "speedup_ci_low": [0.9, ci_low, 5.0],
        }
    )


def _verdict(rows, ci_low: float = 2.0) -> tuple[str, str]:
    v = V.verdicts(_diag(rows), _runs(ci_low), FOUND).iloc[0]
    return v["verdict"], v["reason"]


def test_confirmed_refuted_inconclusive():
    ok = [("baseline", "baseline", BOTTLENECK, {"data_stall"}), ("ideal", "ideal", CLEAN, set())]
    assert _verdict(ok)[0] == "confirmed"
    leak = [*ok, ("async_dataloader", "fix", CLEAN, {"data_stall"})]
    verdict, reason = _verdict(leak)
    assert verdict == "refuted" and "async_dataloader: expected none (clean)" in reason
    silent = [("baseline", "baseline", BOTTLENECK, set()), ("ideal", "ideal", CLEAN, set())]
    assert _verdict(silent)[0] == "refuted"
    assert _verdict(ok, ci_low=1.05)[0] == "inconclusive"
    nocuda = [("baseline", "baseline", BOTTLENECK, set(), {"data_stall"}), ok[1]]
    verdict, reason = _verdict(nocuda)
    assert verdict == "inconclusive" and "baseline: data_stall not judged" in reason
    assert V.verdicts(_diag(ok), _runs(), FOUND, min_ci_low=2.5).iloc[0]["verdict"] == (
        "inconclusive"
    )


def test_partial_fix_matches_when_its_class_still_fires():
    rows = [
        ("baseline", "baseline", BOTTLENECK, {"data_stall"}),
        ("async_dataloader", "fix", PARTIAL, {"data_stall"}),
        ("ideal", "ideal", CLEAN, set()),
    ]
    d = _diag(rows).set_index("variant")
    assert d.loc["async_dataloader", "match"] and d.loc["async_dataloader", "observed"] == (
        "data_stall"
    )
    verdict, reason = _verdict(rows)
    assert verdict == "confirmed" and "async_dataloader partial" in reason
    cleared = [rows[0], ("async_dataloader", "fix", PARTIAL, set()), rows[2]]
    assert _verdict(cleared)[0] == "refuted"  # expected to stay stalled, but nothing fired


def test_clean_needs_nothing_fired_and_its_class_judged():
    assert T.judge(CLEAN, _findings(set()), "data_stall") is True
    assert T.judge(CLEAN, _findings({"host_sync"}), "data_stall") is False
    assert T.judge(CLEAN, _findings(set(), frozenset({"data_stall"})), "data_stall") is None
    assert T.judge(CLEAN, _findings(set(), frozenset({"host_sync"})), "data_stall") is True
    undecided = T.Expected("data_stall", T.UNDECIDED, "no metric")
    assert T.judge(undecided, _findings({"data_stall"}), "data_stall") is None


def test_off_target_findings_are_recorded():
    rows = [
        ("baseline", "baseline", BOTTLENECK, {"data_stall", "pageable_copy"}),
        ("async_dataloader", "fix", PARTIAL, {"data_stall", "host_sync"}),
        ("ideal", "ideal", CLEAN, set()),
    ]
    v = V.verdicts(_diag(rows), _runs(), FOUND)
    assert v["off_target"].item() == "baseline:pageable_copy; async_dataloader:host_sync"


def test_confusion_counts_against_the_expectation():
    rows = [
        ("baseline", "baseline", BOTTLENECK, {"data_stall"}),
        ("async_dataloader", "fix", PARTIAL, {"data_stall"}),
        ("dali", "fix", CLEAN, {"data_stall"}),
        ("ideal", "ideal", CLEAN, set()),
    ]
    matrix, scores = S.confusion(_diag(rows))
    assert matrix.loc["data_stall", "data_stall"] == 2  # the partial fix is a positive
    assert matrix.loc["none", "data_stall"] == 1
    assert matrix.loc["none", "none"] == 1
    s = scores.set_index("class")
    assert s.loc["data_stall", "support"] == 2
    assert math.isclose(s.loc["data_stall", "precision"], 2 / 3)
    assert s.loc["data_stall", "recall"] == 1.0
    assert math.isnan(s.loc["exposed_comm", "precision"])


def test_rules_are_evaluated_on_the_runs_measurements():
    rule = Rule(metric="loader_only_samples_per_s", op="<", than="ideal.rate", than_scale=0.7,
                because="workers too slow")  # fmt: skip
    meas = {
        ("s", "fix"): {"loader_only_samples_per_s": 3000.0},
        ("s", "ideal"): {"rate": 12000.0},
    }
    holds, text = T.evaluate_rule(rule, "s", "fix", meas)
    assert holds is True and "3000 < 0.7 x ideal.rate (8400): workers too slow" in text
    meas[("s", "fix")]["loader_only_samples_per_s"] = 9000.0
    assert T.evaluate_rule(rule, "s", "fix", meas)[0] is False
    del meas[("s", "ideal")]
    holds, text = T.evaluate_rule(rule, "s", "fix", meas)
    assert holds is None and "undecided: no ideal.rate" in text
    self_rule = Rule(metric="n", op=">", than="self.ms", than_scale=100, because="many")
    assert T.evaluate_rule(self_rule, "s", "v", {("s", "v"): {"n": 911, "ms": 2.13}})[0] is True
    assert T.evaluate_rule(self_rule, "s", "v", {("s", "v"): {"n": 150, "ms": 2.13}})[0] is False


def test_expectations_are_validated():
    with pytest.raises(ValueError, match="baseline is expected to be 'bottleneck'"):
        Variant(name="b", kind="baseline", summary="x", expect=Expectation(role="clean"))
    with pytest.raises(ValueError, match="only a 'partial' expectation takes a rule"):
        Expectation(role="clean", rule=Rule(metric="a", op="<", than=1.0, because="b"))
    with pytest.raises(ValueError, match="op must be"):
        Rule(metric="a", op="<=", than=1.0, because="b")  # type: ignore[arg-type]
    assert SCEN.variant("async_dataloader").expectation.rule is not None
    assert FOUND["kernel_flood"].variant("torch_compile").expectation.role == "partial"
    assert SCEN.variant("dali").expectation.role == "clean"


# --- on the committed H100 exports -------------------------------------------------------------


def _run_folder(tmp: Path, fix_export: Path, loader_only: float) -> tuple[Path, pd.DataFrame]:
    """A run folder with the H100 baseline and ``fix_export`` as async_dataloader (whose timing
    result reports ``loader_only``), and an unprofiled ideal training 12,000 img/s."""
    for variant, src in (("baseline", GPU_BASE), ("async_dataloader", fix_export)):
        prof = tmp / "sync_loading" / variant / "profile"
        prof.mkdir(parents=True)
        shutil.copyfile(src, prof / f"sync_loading__{variant}.sqlite")
    timing = tmp / "sync_loading" / "async_dataloader" / "timing-1"
    timing.mkdir()
    (timing / "status.json").write_text(json.dumps({"status": "ok"}))
    result = {"metrics": {"loader_only_samples_per_s": loader_only}}
    (timing / "result.json").write_text(json.dumps(result))
    runs = pd.DataFrame(
        {
            "scenario": "sync_loading",
            "variant": ["baseline", "async_dataloader", "ideal"],
            "kind": ["baseline", "fix", "ideal"],
            "profiled": [True, True, False],
            "throughput_samples_per_s": [250.0, 3000.0, 12000.0],
            "speedup_ci_low": [0.95, 9.0, 50.0],
        }
    )
    return tmp, runs


@pytest.mark.parametrize(
    ("fix_export", "loader_only", "role", "stalls"),
    [
        # workers too slow (3,000 < 0.7 x 12,000): expected to stay stalled; the baseline's
        # export (stalled) meets that, the fix's (not stalled) contradicts it
        (GPU_BASE, 3000.0, "partial", True),
        (GPU_FIX, 3000.0, "partial", True),
        (NOT_STALLED, 3000.0, "partial", False),
        # workers fast enough: expected clean; a stalled export contradicts it
        (NOT_STALLED, 20000.0, "clean", False),
        (GPU_FIX, 20000.0, "clean", True),
        (GPU_BASE, 20000.0, "clean", True),
    ],
)
def test_partial_fix_on_the_committed_exports(tmp_path, fix_export, loader_only, role, stalls):
    run_dir, runs = _run_folder(tmp_path, fix_export, loader_only)
    table = V.diagnose_run(run_dir, FOUND, runs, crosscheck=False)
    assert list(table.columns) == list(D.DIAGNOSIS_COLUMNS)
    diag = table.set_index("variant")
    fix = diag.loc["async_dataloader"]
    assert fix["expected_role"] == role
    assert fix["expected"] == ("data_stall" if role == "partial" else "none")
    assert "loader_only_samples_per_s" in fix["expected_because"]
    assert (fix["data_stall_state"] == "fired") is stalls
    # partial: met when the class fires; clean: met when nothing fires (any class)
    match = stalls if role == "partial" else fix["observed"] == ""
    assert bool(fix["match"]) is match
    assert diag.loc["baseline", "match"] and diag.loc["baseline", "data_stall_state"] == "fired"
    v = V.verdicts(table, runs, FOUND).iloc[0]
    assert v["verdict"] == ("confirmed" if match else "refuted"), v["reason"]
    matrix, _ = S.confusion(table)
    fired = fix["primary"] == "data_stall"
    if role == "partial":  # a positive for its class: found when it fires, a miss when not
        assert matrix.loc["data_stall", "data_stall"] == 1 + fired
        assert matrix.loc["data_stall"].sum() == 2
    else:
        assert matrix.loc["none", "data_stall"] == fired
        assert matrix.loc["data_stall"].sum() == 1
    long = pd.read_csv(run_dir / "findings.csv")
    assert list(long.columns) == list(D.FINDINGS_COLUMNS)
    assert (run_dir / "findings.parquet").is_file()
    mine = long[(long["variant"] == "async_dataloader") & (long["class"] == "data_stall")]
    assert set(mine["state"]) == {"fired" if stalls else "clear"}
    assert set(long["class"]) == set(CLASSES)


def test_a_skipped_baseline_says_why_not_unreadable() -> None:
    """On the H100 reference run's tables the 2-GPU scenarios were skipped: their verdict says
    so, with the runner's reason, instead of calling a never-made export unreadable."""
    ref = Path(__file__).resolve().parent.parent / "results" / "reference" / "h100"
    diag, runs = pd.read_csv(ref / "diagnosis.csv"), pd.read_csv(ref / "runs.csv")
    out = V.verdicts(diag, runs, scenarios.discover())
    got = out.set_index("scenario")
    for name in ("ddp_bucketing", "pipeline_imbalance"):
        assert got.loc[name, "verdict"] == "inconclusive"
        assert got.loc[name, "reason"] == (
            "skipped: needs 2 GPUs on this node (one per process), this machine has 1"
        )
    assert (got.drop(index=["ddp_bucketing", "pipeline_imbalance"])["verdict"] == "confirmed").all()
