"""Compiler caches filled in the background (harness.warm_compile): the warm-up process is
stopped whenever a worker measures, a variant's first worker waits for its warm-up, and the
whole run keeps that order."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from harness.execution.warmer import CompileWarmer
from tests.conftest import only_run_dir, smoke_args


def _state(pid: int) -> str:
    """The process's state letter from /proc (T: stopped)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _stopped(pid: int) -> bool:
    """Whether the process is stopped, once the signal has been delivered (it is async)."""
    deadline = time.monotonic() + 30
    while _state(pid) != "T" and time.monotonic() < deadline:
        time.sleep(0.01)
    return _state(pid) == "T"


def _sleepers(tmp_path: Path):
    """A ``start`` for CompileWarmer whose warm-ups each sleep 1 s, and the processes it made."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(scenario: str, variant: str) -> tuple[subprocess.Popen[bytes], Path]:
        cmd = [sys.executable, "-c", "import time; time.sleep(1.0)"]
        procs.append(subprocess.Popen(cmd, start_new_session=True))
        return procs[-1], tmp_path

    return procs, start


def test_a_warm_up_runs_only_while_nothing_measures(tmp_path):
    procs, start = _sleepers(tmp_path)

    said: list[str] = []
    warmer = CompileWarmer([("k", "a"), ("k", "b")], start, said.append)
    assert warmer.pending("k", "a") and warmer.pending("k", "b")
    warmer.tick(measuring=True)
    assert not procs  # none starts while a worker measures
    warmer.tick(measuring=False)
    assert len(procs) == 1 and "warming the compiler cache for k/a" in said[-1]
    warmer.tick(measuring=True)
    assert _stopped(procs[0].pid)  # stopped with its group
    time.sleep(1.5)
    assert procs[0].poll() is None  # a 1 s sleep that did not run out while stopped
    deadline = time.monotonic() + 60
    while warmer.pending("k", "a") and time.monotonic() < deadline:
        warmer.tick(measuring=False)
        time.sleep(0.05)
    assert not warmer.pending("k", "a") and warmer.pending("k", "b")
    first = warmer.summary()[0]
    assert first["status"] == "ok" and first["returncode"] == 0
    assert first["paused_s"] >= 1.5 and len(first["pauses"]) == 1
    warmer.close()  # b is queued or running: stopped, nothing left behind
    assert all(p.poll() is not None for p in procs)


def test_a_failed_warm_up_lets_its_variant_compile_itself(tmp_path):
    def start(scenario: str, variant: str) -> tuple[subprocess.Popen[bytes], Path]:
        cmd = [sys.executable, "-c", "raise SystemExit(3)"]
        return subprocess.Popen(cmd, start_new_session=True), tmp_path

    said: list[str] = []
    warmer = CompileWarmer([("k", "a")], start, said.append)
    deadline = time.monotonic() + 60
    while warmer.pending("k", "a") and time.monotonic() < deadline:
        warmer.tick(measuring=False)
        time.sleep(0.05)
    assert warmer.summary()[0]["status"] == "failed"
    assert "exit code 3" in said[-1] and "compiles instead" in said[-1]


def test_the_run_warms_a_compiled_variant_in_the_background(cli, tmp_path, cache_dir):
    """kernel_flood [baseline, torch_compile] on the CPU with harness.warm_compile=true: the
    warm-up of torch_compile ran beside baseline's worker but was stopped during its warm-up
    and window, and torch_compile's first worker started after the warm-up had ended."""
    results = tmp_path / "r"
    args = smoke_args(
        "kernel_flood",
        results,
        "scenario.kernel_flood.variants=[baseline,torch_compile]",
        "harness.warm_compile=true",
        f"harness.cache_dir={tmp_path / 'cache'}",  # a cold compiler cache of its own
    )
    proc = cli(args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = only_run_dir(results)
    wall = json.loads((run / "wall_time.json").read_text())
    (warm,) = wall["warm_compile"]
    assert (warm["variant"], warm["status"]) == ("torch_compile", "ok"), warm
    log = (run / "warm" / "kernel_flood__torch_compile" / "stdout.log").read_text()
    assert "[warm-up of the compiler cache] set up in" in log
    timings = pd.read_csv(run / "timings.csv").set_index("variant")
    assert timings.loc["torch_compile", "launched_at"] >= warm["ended_at"]
    for variant in ("baseline", "torch_compile"):
        result = json.loads((run / "kernel_flood" / variant / "timing-1" / "result.json")
                            .read_text())  # fmt: skip
        lo, hi = result["timing"]["warmup_started_at"], result["timing"]["window_ended_at"]
        beside = warm["started_at"] < hi and warm["ended_at"] > lo
        if beside:  # then it was stopped the whole time
            assert any(a <= lo and hi <= b for a, b in warm["pauses"]), (lo, hi, warm)


def test_two_warm_ups_run_at_once_and_pause_together(tmp_path):
    """harness.warm_parallel=2: both start while nothing measures, both are stopped while a
    worker measures, and each books its own pause."""
    procs, start = _sleepers(tmp_path)

    said: list[str] = []
    warmer = CompileWarmer([("k", "a"), ("k", "b"), ("k", "c")], start, said.append, parallel=2)
    warmer.tick(measuring=False)
    assert len(procs) == 2  # a and b at once; c waits for one of them
    warmer.tick(measuring=True)
    assert all(_stopped(p.pid) for p in procs)
    time.sleep(1.5)
    assert all(p.poll() is None for p in procs)  # neither ran out while stopped
    deadline = time.monotonic() + 60
    while warmer.pending("k", "c") and time.monotonic() < deadline:
        warmer.tick(measuring=False)
        time.sleep(0.05)
    summary = {t["variant"]: t for t in warmer.summary()}
    assert [summary[v]["status"] for v in "abc"] == ["ok", "ok", "ok"]
    assert summary["a"]["paused_s"] >= 1.5 and summary["b"]["paused_s"] >= 1.5
    assert summary["c"]["pauses"] == []
    assert summary["c"]["started_at"] >= min(summary["a"]["ended_at"], summary["b"]["ended_at"])
    warmer.close()
