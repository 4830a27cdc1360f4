"""The GPU-machine capture scripts where this CPU box can check them: both shell scripts parse,
and scripts/device/fixture_loop.py's CPU path runs both modes and prints its RESULT line (the
numbers are the GPU machine's to give)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEVICE = ROOT / "scripts" / "device"


@pytest.mark.parametrize(
    "script",
    [
        "capture-corpus.sh",
        "capture-corpus-rest.sh",
        "capture-fixtures.sh",
        "smoke-all.sh",
        "dev-new-classes.sh",
    ],
)
def test_shell_scripts_parse(script: str) -> None:
    proc = subprocess.run(["bash", "-n", str(DEVICE / script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def _result(args: list[str]) -> dict:
    proc = subprocess.run(
        [sys.executable, str(DEVICE / "fixture_loop.py"), *args, "--device", "cpu"],
        capture_output=True,
        text=True,
        timeout=1800,  # ~5-10 s each; a loaded machine slows it, never fails it
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert len(lines) == 1, proc.stdout[-2000:]
    return json.loads(lines[0][len("RESULT ") :])


def test_fixture_loop_train_leaves_through_os_exit() -> None:
    r = _result(["train", "--seconds", "0.2", "--exit", "os_exit"])
    assert r["mode"] == "train" and r["exit"] == "os_exit" and r["steps"] >= 1


def test_fixture_loop_overhead_times_both_calls() -> None:
    r = _result(["overhead", "--launches", "200", "--items", "20", "--rounds", "2"])
    assert r["us_per_launch"] > 0 and r["us_per_item"] > 0
    assert (r["launches"], r["items"], r["device"]) == (200, 20, "cpu")


def test_new_classes_table_reads_the_corpus_measurements() -> None:
    """dev-new-classes.sh's last table: one row per corpus switch of corpus-measured.csv (here
    the committed measured.csv), and a missing run folder said, not an error."""
    measured = ROOT / "corpus" / "wild" / "measured.csv"
    proc = subprocess.run(
        [sys.executable, str(DEVICE / "new_classes_table.py"), "--run", str(ROOT / "no-such-run"),
         "--corpus", str(measured)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = measured.read_text().splitlines()[1:]
    assert "(no " in proc.stdout and "runs.csv" in proc.stdout
    first = rows[0].split(",")
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith(first[0] + " "))
    assert first[1] in line.split()
    assert sum(
        ln.startswith(tuple(r.split(",")[0] + " " for r in rows)) for ln in proc.stdout.splitlines()
    ) == len(rows)
