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
    # the 14 profiled processes of that run: 151 s after their windows, 307 s of timing work
    assert rows["profile: processes"] == "| profile: processes | 14 | 14 |"
    assert rows["profile: teardown_s"] == "| profile: teardown_s | 151 | 151 |"
    assert rows["timing: wall_s"] == "| timing: wall_s | 307 | 307 |"
    assert rows["profile: hold_s"] == "| profile: hold_s | – | – |"  # not recorded then


def test_a_folder_without_timings_is_refused(tmp_path, capsys):
    assert _main()([str(tmp_path)]) == 2
    assert "no timings.csv" in capsys.readouterr().err
