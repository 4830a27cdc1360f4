"""Ctrl-C in the middle of a sliced round (harness.timing.slices): every process of the round
was alive, most of them stopped (SIGSTOP) waiting for their turn; the harness must still exit
130 with the run marked interrupted, leave no worker behind (a stopped process ignores SIGTERM
until it is continued), and a resume must time the round again whole. Through the real CLI
with the faulty scenario: ``slow`` waits inside its first slice for a file that never appears."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from harness.execution.worker import WINDOW_MARKER
from tests.conftest import only_run_dir, run_cli
from tests.test_reliability import (
    HANG_S,
    PLUGIN,
    _args,
    _popen,
    _statuses,
    _wait_for,
    wait_for_text,
)

pytestmark = pytest.mark.slow


def _gone(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


def test_ctrl_c_in_a_sliced_round_stops_every_process_and_resume_redoes_the_round(tmp_path):
    results = tmp_path / "r"
    never = tmp_path / "never-released"
    proc = _popen(
        _args(results, "scenario.faulty.variants=[ideal,slow]"),
        env={"FAULTY_SLOW_S": "0", "FAULTY_HOLD_FILE": str(never)},
    )
    try:
        log = _wait_for("*/faulty/slow/timing-1/stdout.log", results, proc)
        wait_for_text(log, WINDOW_MARKER, proc)  # slow is inside its first slice
        run_dir = only_run_dir(results)
        pids = [json.loads((run_dir / f"faulty/{v}/timing-1/.progress.json").read_text())["pid"]
                for v in ("ideal", "slow")]  # fmt: skip
        os.kill(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=HANG_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err[-2000:]
    assert json.loads((run_dir / "state.json").read_text())["state"] == "interrupted"
    deadline = time.monotonic() + 60
    while not all(map(_gone, pids)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(map(_gone, pids)), pids  # neither the running nor the stopped one is left
    assert _statuses(run_dir) == {}  # a round's processes end together: none finished
    done = run_cli(["run", f"harness.resume={run_dir}"], env={**PLUGIN, "FAULTY_SLOW_S": "0.05"},
                   timeout=HANG_S)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert _statuses(run_dir) == {"faulty/ideal/timing-1": "ok", "faulty/slow/timing-1": "ok"}
    slices = json.loads((run_dir / "faulty/slow/timing-1/result.json").read_text())["slices"]
    assert sum(slices["steps"]) >= 2
