"""tests/harness_cli.py's command server (tests/conftest.py: ``run_cli``): each command it forks
runs as a new process of its own would, in its environment, with its streams and exit code."""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import _FORKS, FAULTY_ENV, run_cli


def test_a_forked_command_takes_its_own_environment_streams_and_exit_code() -> None:
    if _FORKS.socket_path() is None:
        pytest.skip("the command server is off (BOTTLENECK_TEST_FORK=0) or did not start")
    plain = run_cli(["list"])
    faulty = run_cli(["list"], env=FAULTY_ENV)
    assert plain.returncode == faulty.returncode == 0, plain.stderr + faulty.stderr
    names = lambda out: {ln.split()[0] for ln in out.splitlines() if ln and ln[0] != " "}  # noqa: E731
    assert "faulty" in names(faulty.stdout) and "faulty" not in names(plain.stdout)
    again = run_cli(["list"])  # the environment of one command is not the next one's
    assert again.stdout == plain.stdout
    bad = run_cli(["nope"])
    assert bad.returncode == 2 and bad.stdout == "", bad
    assert bad.stderr.count("\n") == 1 and "nope" in bad.stderr, bad.stderr


def test_a_forked_command_past_its_timeout_is_stopped() -> None:
    if _FORKS.socket_path() is None:
        pytest.skip("the command server is off (BOTTLENECK_TEST_FORK=0) or did not start")
    with pytest.raises(subprocess.TimeoutExpired):
        run_cli(["run", "+scenario=faulty", "--cfg", "job"], env=FAULTY_ENV, timeout=0.001)
    assert run_cli(["list"]).returncode == 0  # the server serves on
