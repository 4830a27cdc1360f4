"""Faults 7 and 8 of the fault matrix (docs/reliability.md): Ctrl-C during a run keeps what
finished and marks the run interrupted, whether the signal reaches the harness alone or its
whole process group, and resuming the interrupted run finishes only the rest. Through the real
CLI on the CPU with the deliberately broken scenario in tests/plugins/faulty/; a file of its
own so that pytest-xdist runs it beside test_reliability.py rather than after it."""

from __future__ import annotations

import json
import os
import signal

import pandas as pd
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
from tests.test_stop_leftovers import leaving_env, what_is_left

pytestmark = pytest.mark.slow


# -- 7/8. Ctrl-C, and resume of the interrupted run --------------------------------------------
@pytest.fixture(scope="module", params=["parent", "group"])
def interrupted_run(request, tmp_path_factory):
    """SIGINT to the harness process alone, or to its whole group as a terminal's Ctrl-C does,
    while the second variant's worker waits inside its window (for a hold file that never
    appears); a snapshot of the run folder right after."""
    results = tmp_path_factory.mktemp(f"interrupt-{request.param}")
    never = results.parent / f"never-released-{request.param}"
    leaving = leaving_env()  # 'slow' leaves a pymp-* folder and a daemon: the run cleans up
    proc = _popen(
        # back to back: ideal finishes before slow's window (a sliced round's processes end
        # together; its interrupt is tests/test_sliced_interrupt.py's)
        _args(results, "scenario.faulty.variants=[ideal,slow]", "harness.timing.slices=false"),
        env={"FAULTY_SLOW_S": "0", "FAULTY_HOLD_FILE": str(never), **leaving},
    )
    try:
        _wait_for("*/faulty/ideal/timing-1/status.json", results, proc)
        log = _wait_for("*/faulty/slow/timing-1/stdout.log", results, proc)
        wait_for_text(log, WINDOW_MARKER, proc)  # the slow worker is inside its window
        if request.param == "parent":
            os.kill(proc.pid, signal.SIGINT)
        else:
            os.killpg(os.getpgid(proc.pid), signal.SIGINT)
        _, err = proc.communicate(timeout=HANG_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    left = what_is_left(leaving)
    run_dir = only_run_dir(results)
    ideal = run_dir / "faulty/ideal/timing-1/result.json"
    return {
        "left": left,
        "rc": proc.returncode,
        "stderr": err,
        "run_dir": run_dir,
        "state": json.loads((run_dir / "state.json").read_text())["state"],
        "tmp": sorted(str(p) for p in results.rglob("*.tmp")),
        "lock": (results / ".lock").exists(),
        "ideal": json.loads(ideal.read_text()),
        "ideal_mtime": ideal.stat().st_mtime_ns,
        "statuses": _statuses(run_dir),
    }


def test_ctrl_c_keeps_finished_and_marks_interrupted(interrupted_run):
    snap = interrupted_run
    assert snap["rc"] == 130, snap["stderr"][-2000:]
    assert snap["state"] == "interrupted"
    assert f"harness.resume={snap['run_dir']}" in snap["stderr"]
    # between the interrupt and the tables the run says what it does, not silence
    after = snap["stderr"].split("interrupted: ", 1)[1]
    assert "\nwriting the tables (runs.csv and the rest)\n" in after
    assert snap["ideal"]["variant"] == "ideal" and len(snap["ideal"]["step_ms"]) == 3
    assert snap["statuses"] == {"faulty/ideal/timing-1": "ok"}  # slow: no half-written status
    assert snap["tmp"] == []
    assert not snap["lock"]
    assert snap["left"] == ([], []), "processes or temporary files outlived the run"


def test_a_conflicting_override_on_resume_is_refused(interrupted_run):
    """A resume finishes the run as it was started: an override that sets a key of the run to
    another value is refused in one line, before anything runs; one that sets it to the run's
    own value is no conflict (tried with --cfg job, which runs nothing)."""
    run_dir = interrupted_run["run_dir"]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert "scenario.faulty.variants=[ideal,slow]" in manifest["overrides"]
    proc = run_cli(
        ["run", f"harness.resume={run_dir}", "harness.repeats=3"], env=PLUGIN, timeout=HANG_S
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: harness.resume={run_dir}: harness.repeats=3 conflicts with the run's "
        "harness.repeats=1; a resume finishes the run as it was started and may only add to it "
        "(drop the override, or start a new run)"
    ]
    assert _statuses(run_dir) == interrupted_run["statuses"]
    same = run_cli(
        ["run", f"harness.resume={run_dir}", "harness.repeats=1", "--cfg", "job"], env=PLUGIN
    )
    assert same.returncode == 0, same.stderr[-2000:]
    assert "- ideal" in same.stdout and "- slow" in same.stdout


def test_resume_of_interrupted_run_finishes_only_the_rest(interrupted_run):
    """Exactly what the interrupt message says: ``harness.resume=DIR`` alone resumes the run
    with its own scenarios and overrides (its manifest's)."""
    run_dir = interrupted_run["run_dir"]
    proc = run_cli(
        ["run", f"harness.resume={run_dir}"],
        env={**PLUGIN, "FAULTY_SLOW_S": "0.05"},
        timeout=HANG_S,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "resuming: 1 of 2 worker runs finished before" in proc.stderr
    ideal = run_dir / "faulty/ideal/timing-1/result.json"
    assert ideal.stat().st_mtime_ns == interrupted_run["ideal_mtime"], "ideal was run again"
    assert json.loads((run_dir / "state.json").read_text())["state"] == "complete"
    assert _statuses(run_dir) == {"faulty/ideal/timing-1": "ok", "faulty/slow/timing-1": "ok"}
    assert (pd.read_csv(run_dir / "runs.csv")["status"] == "ok").all()
