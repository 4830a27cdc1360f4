"""The fork server: unprofiled workers forked from a process that imported torch once."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from harness.execution.forkserver import ForkServer
from harness.execution.runner import _kill_group
from tests.conftest import FAULTY_ENV, REPO, faulty_args, only_run_dir, run_cli
from tests.test_faults import pid_gone

WORKER = [sys.executable, "-m", "harness.execution.worker", "--spec"]


@pytest.fixture(scope="module")
def spawned(tmp_path_factory) -> Path:
    """The run folder of one harness run of faulty [baseline, ideal] with every worker spawned
    (harness.fork_server=false): the specs it wrote and the timings to compare with."""
    results = tmp_path_factory.mktemp("spawned")
    args = faulty_args(
        results,
        "scenario.faulty.variants=[baseline,ideal]",
        "harness.fork_server=false",
        "harness.preload_unforked=false",  # as forked from a server without preloads below
    )
    proc = run_cli(args, env=FAULTY_ENV)  # the default hang guard: imports are slow under load
    assert proc.returncode == 0, proc.stderr[-2000:]
    return only_run_dir(results)


def _spec_for(spawned: Path, tmp_path: Path, variant: str) -> Path:
    """A copy of the real worker spec the harness wrote for ``variant``, writing to
    ``tmp_path/forked``."""
    spec = json.loads((spawned / "faulty" / variant / "timing-1" / "spec.json").read_text())
    spec["out_dir"] = str(tmp_path / "forked")
    spec["gate"] = False  # no harness here to let it past its gate
    spec["turn_gate"] = None  # nor a sliced round to take turns in: one window, back to back
    Path(spec["out_dir"]).mkdir()
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    return path


@pytest.fixture(scope="module")
def server():
    """One fork server for the module (it imports torch once, as the harness's does); the
    tests also check that it goes on serving after a killed child."""
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(REPO)  # the server imports the test plugin from the checkout
        srv = ForkServer(env={**os.environ, **FAULTY_ENV})
    yield srv
    srv.close()


def test_forked_worker_writes_the_same_result_without_importing_again(spawned, tmp_path, server):
    spec = _spec_for(spawned, tmp_path, "ideal")
    out = tmp_path / "forked"
    env = {**os.environ, **FAULTY_ENV}
    proc = server.spawn([*WORKER, str(spec)], out / "stdout.log", out / "stderr.log", env)
    assert proc.wait(timeout=120) == 0, (out / "stderr.log").read_text()
    forked = json.loads((out / "result.json").read_text())
    spawned_result = json.loads((spawned / "faulty/ideal/timing-1/result.json").read_text())
    assert forked["variant"] == spawned_result["variant"] == "ideal"
    assert forked["steps"] == spawned_result["steps"] > 0
    # torch and the scenarios were imported by the server, not by the forked worker
    assert forked["timing"]["import_s"] < 0.1 * spawned_result["timing"]["import_s"]
    assert "faulty/ideal [timing-1]" in (out / "stdout.log").read_text()


def test_forked_worker_has_a_session_of_its_own_and_dies_with_its_group(spawned, tmp_path, server):
    spec = _spec_for(spawned, tmp_path, "ideal")
    data = json.loads(spec.read_text())
    data["variant"] = "hang"
    spec.write_text(json.dumps(data))
    out = tmp_path / "forked"
    pid_file = tmp_path / "children.txt"
    env = {**os.environ, **FAULTY_ENV, "FAULTY_PID_FILE": str(pid_file)}
    proc = server.spawn([*WORKER, str(spec)], out / "stdout.log", out / "stderr.log", env)
    deadline = time.monotonic() + 120
    while not pid_file.is_file() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pid_file.is_file(), (out / "stderr.log").read_text()
    assert os.getsid(proc.pid) == proc.pid and os.getpgid(proc.pid) == proc.pid
    assert os.getpgid(os.getpid()) != proc.pid
    children = [int(x) for x in pid_file.read_text().split()]
    _kill_group(proc, grace_s=2.0)
    assert proc.returncode in (-signal.SIGTERM, 128 + signal.SIGTERM, -signal.SIGKILL), (
        out / "stderr.log"
    ).read_text()[-3000:]
    deadline = time.monotonic() + 30  # a state to reach, not a delay to sit out
    while any(not pid_gone(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [pid for pid in children if not pid_gone(pid)] == []
    # the server goes on serving after a killed child
    assert server.alive


def test_harness_runs_timing_workers_forked_and_profiles_spawned(cli, tmp_path, spawned):
    results = tmp_path / "r"
    proc = cli(faulty_args(results, "scenario.faulty.variants=[baseline,ideal]"), env=FAULTY_ENV)
    assert proc.returncode == 0, proc.stderr[-2000:]
    timings = pd.read_csv(only_run_dir(results) / "timings.csv")
    assert (timings["status"] == "ok").all()
    plain = pd.read_csv(spawned / "timings.csv")
    assert timings["import_s"].max() < 0.1 * plain["import_s"].min()
