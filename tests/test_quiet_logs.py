"""Noise a newcomer should not meet in a run's logs and tables: sync_loading's warning about a
read-only NumPy array, and ``None`` beside ``NaN`` in the table a run prints when it stops."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd

from tests.conftest import DATA, REPO

#: Decode a real JPEG as the baseline's loader does and normalise it, with warnings as errors.
_DECODE = """
import warnings, numpy as np
from pathlib import Path
from PIL import Image
from scenarios.sync_loading.data import decode_resize, normalize_cpu
Image.new("RGB", (64, 48), (200, 120, 40)).save(Path({path!r}), quality=90)
hwc = decode_resize(Path({path!r}), 32)
assert not hwc.flags.writeable  # PIL hands out a read-only array: the case that warned
warnings.simplefilter("error")
x = normalize_cpu(hwc)
assert x.shape == (3, 32, 32) and x.dtype.is_floating_point
print("ok", float(x.mean()))
"""


def test_sync_loading_normalises_a_read_only_image_without_a_warning(tmp_path: Path) -> None:
    """torch warns once per process, so the check runs in a fresh interpreter."""
    code = _DECODE.format(path=str(tmp_path / "a.jpg"))
    proc = subprocess.run(
        [sys.executable, "-W", "error::UserWarning", "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("ok") and "not writable" not in proc.stderr


def test_the_printed_table_of_a_stopped_run_has_no_none(capsys) -> None:
    """A run stopped before its profiled phase has no probe effect: an empty column of None,
    printed as a dash like every other missing number."""
    from analysis.plots.numbers import DASH
    from harness.execution.runner import print_summary  # what harness run prints

    table = pd.read_csv(DATA / "h100_sync_loading" / "runs.csv")
    table["probe_effect"] = None
    print_summary(table, Path("run"))
    out = capsys.readouterr().out
    assert "None" not in out
    assert "probe" in out and DASH in out and "NaN" not in out
