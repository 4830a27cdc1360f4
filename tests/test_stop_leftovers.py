"""Ctrl-C or SIGTERM at any phase leaves no process and no temporary folder behind (issue 52
item 2): not the ``nsys --start-agent`` daemon (its parent PID 1, out of reach of the worker's
process group), not the ``pymp-*`` folders of killed loader workers, not ``torchelastic_*``.

The faulty scenario's 'slow' variant (tests/plugins/faulty) leaves both kinds in its set-up (a
``pymp-*`` folder, a daemon re-parented to PID 1) and is held inside its window; the run gets a
temporary folder of the test's own (``TMPDIR``) and a mark in its environment, which every
process it starts inherits. After the stop: no live process carries the mark, the folder is
empty. The timing phase's stops are tests/test_interrupts.py's and tests/test_signals.py's
runs (the same checks, :func:`assert_nothing_left`), and tests/test_ranks.py's run that ends
(torch.distributed.run's ``torchelastic_*`` folders); here the profile phase under real nsys."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from harness.execution.leftovers import MARK_ENV, contained, marked
from harness.execution.worker import WINDOW_MARKER
from tests.conftest import only_run_dir
from tests.test_reliability import HANG_S, _args, _popen, _wait_for, wait_for_text

pytestmark = pytest.mark.slow

#: The test's own mark in the run's environment (the harness adds its own beside it).
KEY = "BOTTLENECK_TEST_LEFTOVER"


def leaving_env() -> dict[str, str]:
    """The environment of a run that leaves things behind, in a temporary folder of its own
    (a short path: the run's sockets live under it, and a socket path has 108 bytes)."""
    folder = tempfile.mkdtemp(prefix="bnst-")
    return {"TMPDIR": folder, KEY: os.urandom(6).hex(), "FAULTY_LEAVE": "1"}


def what_is_left(env: dict[str, str]) -> tuple[list[str], list[str]]:
    """(command lines of the run's live processes, by the mark; what is in its temporary
    folder), stopping and removing all of it so no test leaves it behind either."""
    left = marked(env[KEY], KEY)
    cmds = [_cmdline(pid) for pid in left]
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    files = sorted(str(p) for p in Path(env["TMPDIR"]).iterdir())
    shutil.rmtree(env["TMPDIR"], ignore_errors=True)
    return cmds, files


def assert_nothing_left(env: dict[str, str]) -> None:
    """No live process of the run (by the mark), nothing in its temporary folder."""
    cmds, files = what_is_left(env)
    assert not cmds, f"processes of the run outlived it: {cmds}"
    assert not files, f"the run left these in its temporary folder: {files}"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
    except OSError:
        return f"{pid} (gone)"


def _profiled_args(results: Path, *extra: str) -> list[str]:
    return [a for a in _args(results, *extra) if a != "nsys.enabled=false"]


@pytest.mark.nsys
@pytest.mark.parametrize(
    "how", ["SIGINT-group", "SIGTERM-parent"], ids=["ctrl-c-group", "sigterm-parent"]
)
def test_a_stop_in_the_profile_phase_leaves_nothing(tmp_path, how) -> None:
    """'slow' timed, then profiled under nsys and held in its profiled window (where the nsys
    agent, the traced fork server and the worker all run); the stop then reaches the harness
    alone (SIGTERM) or its whole group (a terminal's Ctrl-C)."""
    if shutil.which("nsys") is None:
        pytest.skip("needs nsys (scripts/install-nsys-cpu.sh)")
    env = leaving_env()
    results = tmp_path / "results"
    never = tmp_path / "never-released"
    held = {"FAULTY_SLOW_S": "0", "FAULTY_HOLD_FILE": str(never), "FAULTY_HOLD_PROFILED": "1"}
    proc = _popen(
        _profiled_args(results, "scenario.faulty.variants=[ideal,slow]"), env={**env, **held}
    )
    try:
        log = _wait_for("*/faulty/slow/profile/stdout.log", results, proc)
        wait_for_text(log, WINDOW_MARKER, proc)
        if how == "SIGINT-group":
            os.killpg(os.getpgid(proc.pid), signal.SIGINT)
        else:
            os.kill(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=HANG_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == (130 if how == "SIGINT-group" else 143), err[-2000:]
    assert "Traceback" not in err, err[-3000:]
    assert (only_run_dir(results) / "faulty/slow/timing-1/status.json").is_file()
    assert_nothing_left(env)


def test_contained_stops_what_carries_its_mark_and_removes_its_folder() -> None:
    """The mechanism alone: inside the block, TMPDIR (and this process's tempfile folder) is
    the run's folder and children carry the mark; a daemon re-parented to PID 1 and a file
    left in the folder are gone after it, and the environment is as it was."""
    before = (os.environ.get("TMPDIR"), tempfile.gettempdir())
    code = "import os, time\nif os.fork():\n    os._exit(0)\nos.setsid()\ntime.sleep(3600)\n"
    with contained() as root:
        assert os.environ["TMPDIR"] == tempfile.gettempdir() == str(root)
        mark = os.environ[MARK_ENV]
        (root / "pymp-left").mkdir()
        subprocess.run([sys.executable, "-c", code], check=True)
        assert len(marked(mark)) == 1  # the daemon, its parent gone
    assert marked(mark) == []
    assert not root.exists()
    assert (os.environ.get("TMPDIR"), tempfile.gettempdir()) == before
    assert MARK_ENV not in os.environ
