"""The run's tools step and its report section, on hand-built run folders: the measured truth as
harness/judge writes it (one ``truth_state`` per variant), the detectors' and nsys rules' calls
read back from the run's own tables, and the "Tools against the ground truth" section (n/a
shown as n/a, never as 0)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from bottlenecks import CLASSES
from harness.core import runfolder as rf
from harness.core.tools_config import ToolsConfig
from harness.judge.score import Labelled


def _run_folder(tmp_path: Path) -> Path:
    """Two forced_sync variants: the baseline measured ``fires`` with data_stall fired beside
    it as a second cause; ideal measured ``clear`` (expected ``none``) with launch_bound a
    false positive."""
    run = tmp_path / "run"
    run.mkdir()
    pd.DataFrame({"scenario": ["forced_sync"] * 2, "variant": ["baseline", "ideal"],
                  "bottleneck": ["host_sync"] * 2, "step_ms_mean": [4.0, 2.0]}
                 ).to_csv(rf.table_path(run, "runs"), index=False)  # fmt: skip
    diag = {"scenario": ["forced_sync"] * 2, "variant": ["baseline", "ideal"],
            "expected": ["host_sync", "none"], "truth_state": ["fires", "clear"]}  # fmt: skip
    for k in CLASSES:
        diag[f"{k}_state"] = ["clear", "clear"]
        diag[f"{k}_impact"] = [0.0, 0.0]
        diag[f"{k}_off_target"] = ["", ""]
        diag[f"{k}_reason"] = ["", ""]
    diag["host_sync_state"] = ["fired", "clear"]
    diag["host_sync_impact"] = [0.4, 0.0]
    diag["data_stall_state"] = ["fired", "clear"]
    diag["data_stall_off_target"] = ["second_cause", ""]
    diag["launch_bound_state"] = ["clear", "fired"]
    diag["launch_bound_off_target"] = ["", "false_positive"]
    diag["gil_contention_state"] = ["not_judged", "not_judged"]
    diag["gil_contention_reason"] = ["no OS runtime trace"] * 2
    pd.DataFrame(diag).to_csv(rf.table_path(run, "diagnosis"), index=False)
    for v in ("baseline", "ideal"):
        folder = rf.profile_dir(run, "forced_sync", v)
        folder.mkdir(parents=True)
        (folder / f"forced_sync__{v}.sqlite").write_bytes(b"")
    return run


def test_truth_reads_the_measured_per_variant_truth(tmp_path: Path):
    from harness.tools.truth import truth_table

    run = _run_folder(tmp_path)
    items = [Labelled(f"forced_sync/{v}", "host_sync", run) for v in ("baseline", "ideal")]
    t = truth_table(run, items).set_index(["report", "class"])["truth_state"]
    assert len(t) == 2 * len(CLASSES)
    assert t[("forced_sync/baseline", "host_sync")] == "fires"
    assert t[("forced_sync/baseline", "data_stall")] == "either"  # a measured second cause
    assert t[("forced_sync/baseline", "launch_bound")] == "clear"
    # ideal: expected 'none', its scenario's class (runs.csv's bottleneck) is the clear one
    assert t[("forced_sync/ideal", "host_sync")] == "clear"
    assert t[("forced_sync/ideal", "launch_bound")] == "clear"  # a false positive stays one


def test_the_run_step_reuses_the_diagnosis_and_writes_its_tables(tmp_path: Path):
    from harness.tools.step import recorded_findings, run_tools

    run = _run_folder(tmp_path)
    found = recorded_findings(run)
    base = found["forced_sync/baseline"]
    assert base["host_sync"].flag == "flagged" and "impact 0.40" in base["host_sync"].evidence
    assert base["gil_contention"].flag == "n/a"
    assert base["gil_contention"].evidence == "no OS runtime trace"
    said: list[str] = []
    scores = run_tools(run, ToolsConfig(run=["ours", "hta", "nope"]), None, said.append)
    assert scores is not None and any("nope" in s for s in said)
    calls = pd.read_csv(rf.table_path(run, "tools_calls"), keep_default_na=False)
    hta = calls[calls["tool"] == "hta"]
    assert (hta["flag"] == "n/a").all()  # no Kineto trace (or no HTA): n/a with why, never 0
    s = scores.set_index(["tool", "class"])
    # ours: host_sync flagged on the baseline (fires), clear on ideal (clear): 1 tp
    assert (s.loc[("ours", "host_sync"), ["tp", "fp", "fn"]] == [1, 0, 0]).all()
    # launch_bound flagged on ideal, where it is clear: a false positive
    assert (s.loc[("ours", "launch_bound"), ["tp", "fp", "fn"]] == [0, 1, 0]).all()
    # data_stall on the baseline is a second cause: not scored there
    assert s.loc[("ours", "data_stall"), "judged_reports"] == 1
    assert math.isnan(s.loc[("hta", "host_sync"), "f1"])
    grid = pd.read_csv(rf.table_path(run, "tools_f1")).set_index("class")
    assert grid.loc["host_sync", "ours"] == pytest.approx(1.0)
    assert math.isnan(grid.loc["host_sync", "hta"])


def test_the_report_section_shows_na_as_na(tmp_path: Path):
    from harness.report.doc import Doc, Image, Table
    from harness.report.load import RunFolder
    from harness.report.tools import f1_grid, tools_section
    from harness.tools.step import run_tools

    run = _run_folder(tmp_path)
    run_tools(run, ToolsConfig(run=["ours", "hta"]), None, lambda _m: None)
    doc = Doc("t")
    tools_section(doc, RunFolder.load(run))
    images = [b for b in doc.blocks if isinstance(b, Image)]
    assert [i.name for i in images] == ["tools_f1"] and images[0].png[:4] == b"\x89PNG"
    tables = [b for b in doc.blocks if isinstance(b, Table)]
    scores = {r[0]: r[1:] for r in tables[0].rows}
    assert tables[0].header == ["class", "ours", "hta"]
    assert scores["host_sync"] == ["1.00/1.00/1.00", "n/a"]
    assert scores["launch_bound"][0] == "0.00/n/a/0.00"
    per_variant = {r[0]: r for r in tables[1].rows}
    base = per_variant["forced_sync/baseline"]
    assert base[1] == "host_sync fires"  # as the detector table writes the truth
    assert base[2].text == "data_stall, host_sync" and "impact 0.40" in base[2].tip
    assert base[3].text == "n/a"
    grid = f1_grid(pd.read_csv(rf.table_path(run, "tools_scores")))
    assert grid["hta"].isna().all()  # drawn as grey n/a cells, not as 0


def test_the_section_says_why_when_the_step_did_not_run(tmp_path: Path):
    from harness.report.doc import Doc, Note
    from harness.report.load import RunFolder
    from harness.report.tools import tools_section

    doc = Doc("t")
    tools_section(doc, RunFolder.load(_run_folder(tmp_path)))
    notes = [b for b in doc.blocks if isinstance(b, Note)]
    assert len(notes) == 1 and "tools step did not run" in notes[0].text
