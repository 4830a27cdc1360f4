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
    # the run of 2026-11-27 (7716222), one call: 18 profiled processes forked from two traced
    # servers per scenario, 64 s waiting in cudaProfilerStop (beside the next one's window),
    # timing workers started up to 4 at once (433 s of their wall, most of it held at the gate),
    # 212 s warming up or measuring and 134 s between those from the first to the last
    assert rows["all_calls_s"] == "| all_calls_s | 402 | 402 |"
    assert rows["profile: processes"] == "| profile: processes | 18 | 18 |"
    assert rows["profile: capture_stop_s"] == "| profile: capture_stop_s | 64 | 64 |"
    assert rows["profile: teardown_s"] == "| profile: teardown_s | 20 | 20 |"
    assert rows["timing: wall_s"] == "| timing: wall_s | 433 | 433 |"
    assert rows["profile: hold_s"] == "| profile: hold_s | 56 | 56 |"
    measuring, between = "measuring: warm-ups and windows (s)", "between measurements (s)"
    assert rows[measuring] == f"| {measuring} | 212 | 212 |"
    assert rows[between] == f"| {between} | 134 | 134 |"


def test_a_folder_without_timings_is_refused(tmp_path, capsys):
    assert _main()([str(tmp_path)]) == 2
    assert "no timings.csv" in capsys.readouterr().err
