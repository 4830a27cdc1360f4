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

from harness.forkserver import ForkServer
from harness.runner import _kill_group
from tests.conftest import FAULTY_ENV, REPO, faulty_args, only_run_dir
from tests.test_faults import pid_gone

WORKER = [sys.executable, "-m", "harness.worker", "--spec"]


def _spec_for(cli, tmp_path: Path, variant: str) -> tuple[Path, object, Path]:
    """A real worker spec, written by the harness for the faulty scenario's ``variant``."""
    results = tmp_path / "spawned"
    args = faulty_args(
        results, f"scenario.faulty.variants=[{variant}]", "harness.fork_server=false"
    )
    proc = cli(args, env={**FAULTY_ENV, "FAULTY_SLOW_S": "0"}, timeout=300)
    run = only_run_dir(results)
    spec = json.loads((run / "faulty" / variant / "timing-1" / "spec.json").read_text())
    spec["out_dir"] = str(tmp_path / "forked")
    Path(spec["out_dir"]).mkdir()
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    return path, proc, run


@pytest.fixture
def server(monkeypatch):
    monkeypatch.chdir(REPO)  # the server imports the test plugin from the checkout
    srv = ForkServer(env={**os.environ, **FAULTY_ENV})
    yield srv
    srv.close()


def test_forked_worker_writes_the_same_result_without_importing_again(cli, tmp_path, server):
    spec, _, run = _spec_for(cli, tmp_path, "ideal")
    out = tmp_path / "forked"
    env = {**os.environ, **FAULTY_ENV}
    proc = server.spawn([*WORKER, str(spec)], out / "stdout.log", out / "stderr.log", env)
    assert proc.wait(timeout=120) == 0, (out / "stderr.log").read_text()
    forked = json.loads((out / "result.json").read_text())
    spawned = json.loads((run / "faulty" / "ideal" / "timing-1" / "result.json").read_text())
    assert forked["variant"] == spawned["variant"] == "ideal"
    assert forked["steps"] == spawned["steps"] > 0
    # torch and the scenarios were imported by the server, not by the forked worker
    assert forked["timing"]["import_s"] < 0.1 * spawned["timing"]["import_s"]
    assert "faulty/ideal [timing-1]" in (out / "stdout.log").read_text()


def test_forked_worker_has_a_session_of_its_own_and_dies_with_its_group(cli, tmp_path, server):
    spec, _, _ = _spec_for(cli, tmp_path, "ideal")
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
    time.sleep(0.5)
    assert [pid for pid in children if not pid_gone(pid)] == []
    # the server goes on serving after a killed child
    assert server.alive


def test_harness_runs_timing_workers_forked_and_profiles_spawned(cli, tmp_path):
    results = tmp_path / "r"
    proc = cli(faulty_args(results, "scenario.faulty.variants=[baseline,ideal]"), env=FAULTY_ENV)
    assert proc.returncode == 0, proc.stderr[-2000:]
    timings = pd.read_csv(only_run_dir(results) / "timings.csv")
    assert (timings["status"] == "ok").all()
    spawned = tmp_path / "s"
    proc = cli(
        faulty_args(
            spawned, "scenario.faulty.variants=[baseline,ideal]", "harness.fork_server=false"
        ),
        env=FAULTY_ENV,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    plain = pd.read_csv(only_run_dir(spawned) / "timings.csv")
    assert timings["import_s"].max() < 0.1 * plain["import_s"].min()
