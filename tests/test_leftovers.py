"""No nsys process the tests start may outlive them: tests/conftest.py's pytest_sessionfinish
looks for them (by the session's mark in their environment) after the whole suite, names them,
stops them and fails the session. Here: that look finds such a process and no other."""

from __future__ import annotations

import os
import subprocess

from tests.conftest import SESSION_MARK, leftover_nsys


def test_a_leftover_nsys_of_this_session_is_found(tmp_path) -> None:
    fake = tmp_path / "nsys"  # a process whose program is called nsys, as the agent's is
    fake.symlink_to("/bin/sleep")
    mark = os.environ[SESSION_MARK]
    mine = subprocess.Popen([str(fake), "30"], env={**os.environ})
    other = subprocess.Popen([str(fake), "30"], env={**os.environ, SESSION_MARK: "another"})
    try:
        found = {pid for pid, _ in leftover_nsys(mark)}
        assert mine.pid in found and other.pid not in found
    finally:
        for proc in (mine, other):
            proc.kill()
            proc.wait()
    assert mine.pid not in {pid for pid, _ in leftover_nsys(mark)}
