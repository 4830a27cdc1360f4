"""``python -m harness diagnose`` on the committed real exports: JSON shape, ranking, exit codes."""

from __future__ import annotations

import json

import pytest

from tests.conftest import DATA

GPU_BASE = DATA / "gpu_nsys2025_sync_loading.sqlite"
GPU_FIX = DATA / "gpu_nsys2025_sync_loading_async_dataloader.sqlite"
CLASSES = {"data_stall", "pageable_copy", "launch_bound", "host_sync", "exposed_comm"}


def _json(cli, *paths):
    proc = cli(["diagnose", "--format", "json", *map(str, paths)])
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_json_shape_and_primary_on_the_baseline(cli):
    out = _json(cli, GPU_BASE)
    assert set(out) == {"report", "primary", "findings"}
    assert out["report"] == str(GPU_BASE)
    assert out["primary"] == "data_stall"
    assert {f["class"] for f in out["findings"]} == CLASSES
    for f in out["findings"]:
        assert list(f)[:5] == ["class", "fired", "impact", "metrics", "evidence"]
        assert 0.0 <= f["impact"] <= 1.0
        assert isinstance(f["metrics"], dict)
    impacts = [f["impact"] for f in out["findings"] if f["fired"]]
    assert impacts == sorted(impacts, reverse=True)
    top = out["findings"][0]
    assert top["class"] == "data_stall" and top["fired"]
    assert top["evidence"] and {"start_ns", "end_ns"} <= set(top["evidence"][0])


def test_fix_has_no_finding_and_several_reports_give_a_list(cli):
    out = _json(cli, GPU_BASE, GPU_FIX)
    assert [r["primary"] for r in out] == ["data_stall", "none"]
    assert not any(f["fired"] for f in out[1]["findings"])


def test_text_format_names_primary(cli):
    proc = cli(["diagnose", str(GPU_BASE)])
    assert proc.returncode == 0
    assert "primary: data_stall" in proc.stdout
    assert "FIRED data_stall" in proc.stdout


@pytest.mark.parametrize("kind", ["truncated", "missing", "text"])
def test_unreadable_file_exits_2_with_a_clear_message(cli, tmp_path, kind):
    bad = tmp_path / f"{kind}.sqlite"
    if kind == "truncated":
        bad.write_bytes(GPU_BASE.read_bytes()[:5000])
    elif kind == "text":
        bad.write_text("not a database\n")
    proc = cli(["diagnose", "--format", "json", str(bad)])
    assert proc.returncode == 2
    assert f"cannot diagnose {bad}" in proc.stderr
    assert proc.stdout == ""
