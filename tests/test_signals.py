"""SIGTERM and SIGHUP stop a run as Ctrl-C does (README, Reliability): the running worker's
group is stopped, the tables are rebuilt, state ``interrupted``, the lock removed, exit
128 + signal, and the fork server leaves without a traceback. Also the signal helpers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from harness.core import signals
from harness.execution.worker import WINDOW_MARKER
from tests.conftest import FAULTY_ENV, REPO, faulty_args, only_run_dir
from tests.test_reliability import HANG_S, _wait_for, wait_for_text
from tests.test_stop_leftovers import leaving_env, what_is_left


def _stop_during_window(results, sig: signal.Signals, *, ignore_inherited: bool = False):
    """Run faulty [ideal, slow] and send ``sig`` to the harness once slow is in its window
    (where it waits for a hold file that never appears, so the signal always finds it there)."""

    def preexec() -> None:
        # the harness keeps what it inherits (nohup's SIGHUP ignored stays ignored), so the
        # test sets it: default, whatever the test runner itself was started with (nohup, CI)
        dispo = signal.SIG_IGN if ignore_inherited else signal.SIG_DFL
        signal.signal(signal.SIGINT, dispo)  # as a shell's background job, or nohup, would
        signal.signal(signal.SIGHUP, dispo)

    leaving = leaving_env()  # 'slow' leaves a pymp-* folder and a daemon: the run cleans up
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness",
            # back to back: ideal ends before slow's window (a sliced round's processes end
            # together: tests/test_sliced_interrupt.py)
            *faulty_args(
                results, "scenario.faulty.variants=[ideal,slow]", "harness.timing.slices=false"
            ),
        ],
        cwd=REPO,
        env=dict(
            os.environ,
            **FAULTY_ENV,
            FAULTY_SLOW_S="0",
            FAULTY_HOLD_FILE=str(results.parent / "never-released"),
            **leaving,
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=preexec,
    )
    try:
        _wait_for("*/faulty/ideal/timing-1/status.json", results, proc)
        log = _wait_for("*/faulty/slow/timing-1/stdout.log", results, proc)
        wait_for_text(log, WINDOW_MARKER, proc)
        os.kill(proc.pid, sig)
        _, err = proc.communicate(timeout=HANG_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert what_is_left(leaving) == ([], []), "processes or temporary files outlived the run"
    return proc.returncode, err, only_run_dir(results)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_stop_signal_marks_interrupted_and_exits_128_plus_signal(tmp_path, sig):
    results = tmp_path / "results"
    rc, err, run_dir = _stop_during_window(results, sig)
    assert rc == 128 + sig, err[-2000:]
    assert json.loads((run_dir / "state.json").read_text())["state"] == "interrupted"
    assert f"harness.resume={run_dir}" in err
    assert not (results / ".lock").exists()
    assert sorted(str(p) for p in results.rglob("*.tmp")) == []
    statuses = {str(p.parent.relative_to(run_dir)) for p in run_dir.glob("*/*/*/status.json")}
    assert statuses == {"faulty/ideal/timing-1"}  # slow: stopped, no status
    assert (run_dir / "runs.csv").is_file()
    assert "Traceback" not in err and "BrokenPipeError" not in err, err[-2000:]


@pytest.mark.slow
def test_ctrl_c_stops_even_when_sigint_was_ignored_on_start(tmp_path):
    """A background job of a non-interactive shell inherits SIGINT ignored; the harness still
    stops on it (the 2-of-373 failure of issue 13.4). SIGHUP ignored (nohup) stays ignored."""
    results = tmp_path / "results"
    rc, err, run_dir = _stop_during_window(results, signal.SIGINT, ignore_inherited=True)
    assert rc == 130, err[-2000:]
    assert json.loads((run_dir / "state.json").read_text())["state"] == "interrupted"


def test_handlers_raise_once_and_restore():
    before = signal.getsignal(signal.SIGTERM)
    with signals.handled() as stops:
        with pytest.raises(signals.Interrupted) as info:
            os.kill(os.getpid(), signal.SIGTERM)
        assert info.value.exit_code == 143 and isinstance(info.value, KeyboardInterrupt)
        os.kill(os.getpid(), signal.SIGTERM)  # a second one while stopping: no raise
        assert stops.received == signal.SIGTERM and stops.exit_code == 143
    assert signal.getsignal(signal.SIGTERM) is before


def test_nohup_sighup_stays_ignored():
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with signals.handled():
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
            assert signal.getsignal(signal.SIGINT) != signal.default_int_handler
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_deferred_delivers_on_leaving():
    with signals.handled(), pytest.raises(signals.Interrupted):
        with signals.deferred():
            os.kill(os.getpid(), signal.SIGINT)
            reached = True  # not cut short inside the block
    assert reached
