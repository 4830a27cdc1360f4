"""Reports written in the background (nsys.background_finalize): when the harness lets go of a
profiled command, and how a command that fails or hangs afterwards is recorded."""

from __future__ import annotations

import sys
import time

from harness.execution.runner import Outcome, finish, run_process, worker_has_ended

# Stands in for nsys: a parent that outlives its child, a "harness.execution.worker" process that writes
# result.json (when asked to) and lingers a little, as a worker's interpreter exit does.
WORKER = """
import sys, time, pathlib
time.sleep(0.5)
if sys.argv[1]:
    pathlib.Path(sys.argv[1], "result.json").write_text("{}")
time.sleep(0.5)
"""
PARENT = """
import subprocess, sys, time
subprocess.run([sys.executable, "-c", {worker!r}, {out!r}, "harness.execution.worker"])
time.sleep({after})
sys.exit({code})
"""


def _nsys_like(out, after_s: float, code: int = 0, result: bool = True) -> list[str]:
    script = PARENT.format(worker=WORKER, out=str(out) if result else "", after=after_s, code=code)
    return [sys.executable, "-c", script]


def test_the_harness_lets_go_once_the_worker_is_gone_and_its_result_written(tmp_path):
    t0 = time.perf_counter()
    outcome = run_process(
        _nsys_like(tmp_path, after_s=3.0),
        tmp_path,
        60,
        "x",
        detach_when=worker_has_ended(tmp_path),
    )
    held = time.perf_counter() - t0
    assert outcome.status == "finalizing" and outcome.finishing is not None
    # not when result.json appears (0.5 s) but once the worker is gone (1 s), before the
    # parent's 3 s more
    assert 1.0 <= held < 3.0, held
    assert outcome.finishing.poll() is None
    done = finish(outcome, tmp_path, 60, "x")
    assert done.status == "ok" and done.returncode == 0 and done.finishing is None
    assert 1.0 < done.finalize_s < 10
    assert "finishing" not in done.record() and done.record()["finalize_s"] == done.finalize_s


def test_no_result_means_no_detach(tmp_path):
    outcome = run_process(
        _nsys_like(tmp_path, after_s=0.5, result=False),
        tmp_path,
        60,
        "x",
        detach_when=worker_has_ended(tmp_path),
    )
    assert outcome.finishing is None and outcome.returncode == 0
    assert outcome.status == "no_result"  # waited for in line, judged as before


def test_a_failure_after_the_detach_is_evidence_failed(tmp_path):
    outcome = run_process(
        _nsys_like(tmp_path, after_s=1.0, code=3),
        tmp_path,
        60,
        "x",
        detach_when=worker_has_ended(tmp_path),
    )
    assert outcome.status == "finalizing"
    done = finish(outcome, tmp_path, 60, "x")
    assert done.status == "evidence_failed" and done.returncode == 3
    assert "exited with code 3 while writing its report" in done.error


def test_a_hang_after_the_detach_is_killed(tmp_path):
    outcome = run_process(
        _nsys_like(tmp_path, after_s=60), tmp_path, 120, "x", detach_when=worker_has_ended(tmp_path)
    )
    proc = outcome.finishing
    done = finish(outcome, tmp_path, 0.5, "x")
    assert done.status == "evidence_failed" and "still writing its report" in done.error
    assert proc.poll() is not None  # killed, not left behind


def test_an_outcome_without_a_finishing_command_is_returned_as_is(tmp_path):
    outcome = Outcome("ok", "", 0, 1.0)
    assert finish(outcome, tmp_path, 1, "x") is outcome
