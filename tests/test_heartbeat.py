"""tests/_heartbeat.py: pytest never stays silent (issue 52 item 5): a test that runs longer
than the heartbeat gets a line naming it and how long it has run, with and without xdist."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO


@pytest.mark.parametrize("workers", ["0", "1"])
def test_a_long_test_gets_progress_lines(tmp_path: Path, workers: str) -> None:
    (tmp_path / "conftest.py").write_text(
        "from tests._heartbeat import register\n\n\n"
        "def pytest_configure(config):\n    register(config)\n"
    )
    (tmp_path / "test_long.py").write_text(
        "import time\n\n\ndef test_waits():\n    time.sleep(3.5)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO), BOTTLENECK_TEST_HEARTBEAT_S="1")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", workers,
         str(tmp_path / "test_long.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    beats = [ln for ln in proc.stdout.splitlines() if ln.startswith("[still running] ")]
    assert any("test_long.py::test_waits (" in ln for ln in beats), proc.stdout
    starting = [ln for ln in beats if "test_waits" not in ln]  # xdist: its workers start first
    assert all("starting the workers" in ln for ln in starting), starting
