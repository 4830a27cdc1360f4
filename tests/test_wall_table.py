"""scripts/device/wall_table.py on the committed H100 reference run: the table the reference
README's before/after comparison is made from."""

from __future__ import annotations

import importlib.util

from tests.conftest import REPO


def _main():
    path = REPO / "scripts" / "device" / "wall_table.py"
    spec = importlib.util.spec_from_file_location("wall_table", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def test_the_reference_run_reads_as_a_table(capsys):
    ref = REPO / "results" / "reference" / "h100"
    assert _main()([str(ref), str(ref), "--names", "before,after"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "| | before | after |"
    rows = {ln.split(" | ")[0].lstrip("| "): ln for ln in lines[2:]}
    # the run of 2026-11-27 (c6fae69), one call: 18 profiled processes forked from two traced
    # servers per scenario (none ran again), 64 s waiting in cudaProfilerStop, 26 s held at the
    # gate while the previous one waited there, 251 s of timing work
    assert rows["all_calls_s"] == "| all_calls_s | 470 | 470 |"
    assert rows["profile: processes"] == "| profile: processes | 18 | 18 |"
    assert rows["profile: capture_stop_s"] == "| profile: capture_stop_s | 64 | 64 |"
    assert rows["profile: teardown_s"] == "| profile: teardown_s | 20 | 20 |"
    assert rows["timing: wall_s"] == "| timing: wall_s | 251 | 251 |"
    assert rows["profile: hold_s"] == "| profile: hold_s | 26 | 26 |"


def test_a_folder_without_timings_is_refused(tmp_path, capsys):
    assert _main()([str(tmp_path)]) == 2
    assert "no timings.csv" in capsys.readouterr().err
