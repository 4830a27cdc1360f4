"""The second witness (harness/judge/witness.py) on the first H200 run's real tables: the row's
kernels (re-read from that run's raw ncu pages) set against that run's measured truth, per
variant, and the verdict's rule: a contradiction makes a confirmed scenario inconclusive,
never a refuted one anything else; the witness can be brought in and out of a judged run's
tables without changing any other cell."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from harness.judge import witness as W
from harness.judge.diagnosis_table import DIAGNOSIS_COLUMNS
from tests import _ncu_dev1


@pytest.fixture
def judged(tmp_path: Path) -> Path:
    """The first run's diagnosis.csv and verdicts.csv, with the row's tables as today's code
    reads that run's ncu pages."""
    dev1 = _ncu_dev1.extract(tmp_path)
    kernels, limits = _ncu_dev1.recollect(dev1)
    kernels.to_csv(dev1 / "kernels.csv", index=False)
    limits.to_csv(dev1 / "kernel_limits.csv", index=False)
    return dev1


def _text(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, dtype=str, keep_default_na=False)


EXPECTED = {
    ("fp32_matmul", "baseline"): "confirms",  # fires: GEMMs on the FMA pipe, tensor pipe idle
    ("fp32_matmul", "tf32"): "confirms",  # fires (51% from bf16's rate): tf32 tensor math
    ("fp32_matmul", "bf16_autocast"): "confirms",  # clear: 16-bit tensor math
    ("fp32_matmul", "ideal"): "confirms",
    ("unfused_chain", "baseline"): "confirms",  # fires: the chain, memory-bound at 82-86% DRAM
    ("unfused_chain", "torch_compile"): "contradicts",  # fires 25%, yet its chain is gone
    ("unfused_chain", "fused_ops"): "confirms",
    ("unfused_chain", "ideal"): "confirms",
    ("nchw_conv", "baseline"): "confirms",  # fires: nchwToNhwc / nhwcToNchw, 75% of the time
    ("nchw_conv", "channels_last"): "confirms",  # clear: no conversion left
    ("empty_cache", "expandable_segments"): "absent",  # over the first run's budget
    ("sync_checkpoint", "async_snapshot"): "absent",
    ("sync_checkpoint", "async_save"): "absent",
}


def test_the_witness_of_every_variant_of_the_first_run(judged: Path) -> None:
    assert W.rewitness(judged)
    diag = pd.read_csv(judged / "diagnosis.csv")
    got = {(r.scenario, r.variant): r.witness for r in diag.itertuples()}
    for key, state in EXPECTED.items():
        assert got[key] == state, (key, diag.set_index(["scenario", "variant"]).loc[key])
    # the host-side classes have no kernel-level signature: a row, but nothing to judge
    rest = {k: v for k, v in got.items() if k not in EXPECTED}
    assert set(rest.values()) == {"unjudged"} and len(rest) == 6
    why = diag.set_index(["scenario", "variant"])["witness_reason"]
    assert "100% on the FMA pipe (tensor pipe idle)" in why["fp32_matmul", "baseline"]
    assert "100% tf32 on the tensor pipe" in why["fp32_matmul", "tf32"]
    assert "64% of 10.5 ms/step" in why["unfused_chain", "baseline"]
    assert "over_budget" in why["empty_cache", "expandable_segments"]
    assert "no kernel-level signature for allocator_churn" in why["empty_cache", "baseline"]


def test_the_verdicts_reason_says_it_and_no_verdict_gets_better(judged: Path) -> None:
    before = _text(judged / "verdicts.csv").set_index("scenario")
    W.rewitness(judged)
    after = _text(judged / "verdicts.csv").set_index("scenario")
    assert (after["verdict"] == before["verdict"]).all()  # none was confirmed
    assert (after["verdict_by_truth"] == before["verdict"]).all()
    assert after.loc["unfused_chain", "witness"] == "contradicts"
    assert after.loc["fp32_matmul", "witness"] == "confirms"
    assert after.loc["empty_cache", "witness"] == "unjudged"
    for scen in ("fp32_matmul", "unfused_chain", "nchw_conv"):
        assert after.loc[scen, "reason"] == (
            before.loc[scen, "reason"] + "; " + after.loc[scen, "witness_reason"]
        )
        assert after.loc[scen, "witness_reason"].startswith("kernels row (Nsight Compute): ")
    assert "torch_compile contradicts" in after.loc["unfused_chain", "reason"]
    # nothing to say (no variant confirms or contradicts): the reason stays
    assert after.loc["empty_cache", "reason"] == before.loc["empty_cache", "reason"]


def test_a_contradiction_makes_a_confirmed_scenario_inconclusive(judged: Path) -> None:
    verdicts = _text(judged / "verdicts.csv")
    verdicts["verdict"] = "confirmed"  # as if every variant had met its truth
    verdicts["reason"] = "every variant as measured"
    verdicts.loc[verdicts["scenario"] == "empty_cache", "verdict"] = "refuted"
    verdicts.to_csv(judged / "verdicts.csv", index=False)
    W.rewitness(judged)
    after = _text(judged / "verdicts.csv").set_index("scenario")
    clause = after.loc["unfused_chain", "witness_reason"]
    assert after.loc["unfused_chain", "verdict"] == "inconclusive"
    assert after.loc["unfused_chain", "reason"] == f"{clause}; every variant as measured"
    assert after.loc["fp32_matmul", "verdict"] == "confirmed"  # confirmed, and the row agrees
    assert after.loc["empty_cache", "verdict"] == "refuted"  # never turned into anything else
    assert set(after["verdict_by_truth"]) == {"confirmed", "refuted"}
    # brought up to date again (a new row), the truth's own verdict comes back first
    W.rewitness(judged)
    again = _text(judged / "verdicts.csv").set_index("scenario")
    assert again.equals(after)


def test_the_witness_comes_and_goes_without_touching_other_cells(judged: Path) -> None:
    diag0, verdicts0 = _text(judged / "diagnosis.csv"), _text(judged / "verdicts.csv")
    W.rewitness(judged)
    diag1 = _text(judged / "diagnosis.csv")
    assert diag1.drop(columns=["witness", "witness_reason"]).equals(diag0)
    # without the row: every witness absent with the reason, every verdict and reason as before
    for name in ("kernels.csv", "kernel_limits.csv", "kernels_run.json"):
        (judged / name).unlink()
    W.rewitness(judged)
    diag2, verdicts2 = _text(judged / "diagnosis.csv"), _text(judged / "verdicts.csv")
    assert set(diag2["witness"]) == {"absent"}
    assert set(diag2["witness_reason"]) == {
        "no kernels.csv: the kernels row has not run on this folder"
    }
    assert verdicts2[verdicts0.columns].equals(verdicts0)
    assert set(verdicts2["witness"]) == {"absent"} and set(verdicts2["witness_reason"]) == {""}
    # a step that skipped says why
    (judged / "kernels_run.json").write_text(
        '{"state": "skipped", "reason": "kernels.enabled=false"}'
    )
    W.rewitness(judged)
    assert set(_text(judged / "diagnosis.csv")["witness_reason"]) == {
        "the kernels row did not run: kernels.enabled=false"
    }


def test_the_judge_writes_the_witness_where_the_table_puts_it() -> None:
    i = DIAGNOSIS_COLUMNS.index("match")
    assert DIAGNOSIS_COLUMNS[i + 1 : i + 3] == ("witness", "witness_reason")
    assert W.NOT_READ.state is W.WitnessState.ABSENT


def test_every_witnessed_class_has_a_rule_and_a_missing_folder_is_no_error(tmp_path) -> None:
    from harness.kernels.tables import WITNESSED

    assert set(W.RULES) == set(WITNESSED)
    assert not W.rewitness(tmp_path)  # not judged yet: nothing to bring the witness into
    shutil.rmtree(tmp_path)
    tables = W.read_tables(tmp_path)
    assert tables.kernels.empty and "has not run" in tables.missing
