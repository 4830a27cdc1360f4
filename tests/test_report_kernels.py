"""The report's Kernels (Nsight Compute) section on the first H200 run's real tables (its ncu
pages re-read by today's code, its diagnosis with the row's witness): a roofline picture per
scenario, a table of the variants with their limit, bound split and witness, a table of the
kernels with each one's bound and pipe; a run without the row gets a caveat with the reason."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from harness.judge.witness import rewitness
from harness.report.doc import Doc, Heading, Image, Note, Table
from harness.report.kernels import KERNEL_HEADER, VARIANT_HEADER, kernels_section
from harness.report.load import RunFolder
from harness.report.markdown import render_markdown
from tests import _ncu_dev1


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    dev1 = _ncu_dev1.extract(tmp_path_factory.mktemp("ncu"))
    kernels, limits = _ncu_dev1.recollect(dev1)
    kernels.to_csv(dev1 / "kernels.csv", index=False)
    limits.to_csv(dev1 / "kernel_limits.csv", index=False)
    rewitness(dev1)
    return dev1


def _doc(path: Path) -> Doc:
    doc = Doc("t")
    kernels_section(doc, RunFolder.load(path))
    return doc


def test_a_picture_and_two_tables_per_scenario(run: Path) -> None:
    doc = _doc(run)
    scenarios = list(dict.fromkeys([*pd.read_csv(run / "kernels.csv")["scenario"],
                                    *pd.read_csv(run / "kernel_limits.csv")["scenario"]]))  # fmt: skip
    assert scenarios[:3] == ["fp32_matmul", "unfused_chain", "nchw_conv"]
    assert [h.text for h in doc.blocks if isinstance(h, Heading)] == scenarios
    images = [b for b in doc.blocks if isinstance(b, Image)]
    assert [i.name for i in images] == [f"roofline_{s}" for s in scenarios]
    assert all(i.png[:8] == b"\x89PNG\r\n\x1a\n" for i in images)
    tables = [b for b in doc.blocks if isinstance(b, Table)]
    assert len(tables) == 2 * len(scenarios)
    assert tables[0].header == list(VARIANT_HEADER) and tables[1].header == list(KERNEL_HEADER)


def test_the_tables_say_the_bound_pipe_and_witness(run: Path) -> None:
    doc = _doc(run)
    tables = [b for b in doc.blocks if isinstance(b, Table)]
    variants, kernels = tables[0], tables[1]  # fp32_matmul
    col = {h: i for i, h in enumerate(VARIANT_HEADER)}
    by_variant = {r[0]: r for r in variants.rows}
    assert list(by_variant) == ["baseline", "tf32", "bf16_autocast", "ideal"]
    assert by_variant["baseline"][col["compute"]] == "100%"
    assert by_variant["baseline"][col["tensor pipe"]] == "0%"
    assert by_variant["baseline"][col["witness"]] == "confirms"
    assert "FMA pipe (tensor pipe idle)" in by_variant["baseline"][col["why"]]
    k = {h: i for i, h in enumerate(KERNEL_HEADER)}
    gemms = [r for r in kernels.rows if r[k["family"]] == "matmul"]
    base = [r for r in gemms if r[0] == "baseline"]
    assert base and all(r[k["pipe"]].startswith("fma ") and r[k["bound"]] == "compute"
                        for r in base)  # fmt: skip
    assert all(r[k["pipe"]].startswith("tensor ") for r in gemms if r[0] != "baseline")
    assert {r[k["type"]] for r in gemms if r[0] == "tf32"} == {"tf32"}
    text = render_markdown(doc)
    assert "unfused_chain" in text and "contradicts" in text


def test_a_run_without_the_row_gets_the_reason(tmp_path: Path) -> None:
    (tmp_path / "kernels_run.json").write_text(
        json.dumps({"state": "skipped", "reason": "no ncu (Nsight Compute) found"})
    )
    doc = _doc(tmp_path)
    notes = [b for b in doc.blocks if isinstance(b, Note)]
    assert len(notes) == 1 and notes[0].kind == "caveat"
    assert "no ncu (Nsight Compute) found" in notes[0].text
