"""Sliced rounds, piece by piece: the plan of a round's turns, the turn order, the turn gate's
protocol, stopping and continuing process groups (and the watchdog that continues them when the
harness dies), where threads are pinned, and what slicing costs read back from result files.
The whole round through the CLI is tests/test_e2e_smoke.py's and tests/test_more_rounds.py's."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from harness.execution import pinning, slicecost
from harness.execution.gate import GateClosed, GateListener, connect
from harness.execution.slicing import Freezer, plan_turns, turn_order


def test_turn_order_is_a_palindrome():
    assert turn_order(["a", "b"]) == ["a", "b", "b", "a"]
    assert turn_order(["a", "b", "c"]) == ["a", "b", "c", "c", "b", "a"]


def test_a_plan_gives_each_variant_its_window_in_slices_of_about_a_tenth_of_a_second():
    # forced_sync on the H200: 48, 37 and 37 ms steps, 100-step windows
    plan = plan_turns(
        {"base": 0.048, "fix": 0.037, "ideal": 0.037},
        {"base": 100, "fix": 100, "ideal": 100},
        {},
        0.1,
    )
    for v in ("base", "fix", "ideal"):
        assert sum(plan.slices[v]) == 100 and len(plan.slices[v]) == 2 * plan.cycles
        assert max(plan.slices[v]) - min(plan.slices[v]) <= 1  # as equal as they can be
        assert 0.05 <= plan.slice_s(v) <= 0.2
    assert plan.record("base")["slice_steps"] == plan.steps("base")


def test_a_step_longer_than_a_slice_is_a_slice_of_one_step():
    # sync_loading on the H200: a 1.14 s baseline step (9 in its window) beside fast fixes
    plan = plan_turns(
        {"baseline": 1.137, "async": 0.071, "dali": 0.022, "ideal": 0.019},
        {"baseline": 9, "async": 32, "dali": 32, "ideal": 32},
        {},
        0.1,
    )
    assert plan.cycles == 4  # at most what the baseline's 9 steps allow
    assert plan.slices["baseline"] == [2, 1, 1, 1, 1, 1, 1, 1]  # its 9 steps, exactly
    assert sum(plan.slices["dali"]) == 32
    assert plan.slice_s("baseline") > 10 * 0.1  # said: too long to slice


def test_slices_are_whole_periods():
    plan = plan_turns({"ckpt": 0.01, "plain": 0.01}, {"ckpt": 120, "plain": 120},
                      {"ckpt": 10}, 0.1)  # fmt: skip
    assert all(n % 10 == 0 and n >= 10 for n in plan.slices["ckpt"])
    assert sum(plan.slices["ckpt"]) == 120 and sum(plan.slices["plain"]) == 120


def test_an_odd_window_is_measured_exactly():
    plan = plan_turns({"a": 0.01, "b": 0.01}, {"a": 3, "b": 5}, {}, 0.1)
    assert plan.cycles == 1 and plan.slices == {"a": [2, 1], "b": [3, 2]}


def test_the_gate_carries_commands_and_answers_and_says_when_a_side_closed(tmp_path):
    gate = GateListener()
    try:
        assert len(gate.path) < 108  # a Unix socket's path limit, whatever the run folder
        got: dict[str, object] = {}

        def worker() -> None:
            chan = connect(gate.path, str(tmp_path / "unit"))
            msg = chan.recv(10.0)
            assert msg is not None
            chan.send({"ok": True, "echo": msg["steps"]})
            got["second"] = chan.recv(10.0)
            chan.close()

        t = threading.Thread(target=worker)
        t.start()
        hello = []
        deadline = time.monotonic() + 10
        while not hello and time.monotonic() < deadline:
            hello = gate.accept()
            time.sleep(0.01)
        (out_dir, pid, chan), *_ = hello
        assert out_dir == str(tmp_path / "unit") and pid == os.getpid()
        chan.send({"op": "slice", "steps": 7})
        assert chan.recv(10.0) == {"ok": True, "echo": 7}
        chan.send({"op": "end"})
        t.join(10)
        assert got["second"] == {"op": "end"}
        with pytest.raises(GateClosed):
            chan.recv(10.0)  # the worker closed its end
    finally:
        gate.close()
    assert not Path(gate.path).exists()


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _wait_state(pid: int, want: str, timeout_s: float = 20.0) -> str:
    deadline = time.monotonic() + timeout_s
    while (got := _state(pid)) != want and time.monotonic() < deadline:
        time.sleep(0.02)
    return got


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_a_stopped_group_is_continued_by_the_watchdog_when_the_harness_lets_go():
    """A worker's group stopped (SIGSTOP) for the others' turns is continued by resume, and,
    should the harness die without resuming, by the watchdog once its input ends."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             start_new_session=True)  # fmt: skip
    freezer = Freezer()
    try:
        freezer.pause(child.pid)
        assert _wait_state(child.pid, "T") == "T"
        freezer.resume(child.pid)
        assert _wait_state(child.pid, "S") == "S"
        freezer.pause(child.pid)
        assert _wait_state(child.pid, "T") == "T"
        dog = freezer._dog
        assert dog is not None and dog.stdin is not None
        dog.stdin.close()  # what the harness dying does: the watchdog's input ends
        dog.wait(timeout=20)
        assert _wait_state(child.pid, "S") == "S"
    finally:
        child.kill()
        child.wait()
        freezer.close()


def test_the_cpu_plan_keeps_one_core_for_the_loops():
    plan = pinning.cpu_plan("on", {0, 1, 2, 3})
    assert plan is not None and plan.loop == 3 and plan.helpers == (0, 1, 2)
    assert pinning.cpu_plan("auto", {0, 1}) is None  # too few CPUs to be worth it
    assert pinning.cpu_plan("auto", set(range(16))).loop == 15
    assert pinning.cpu_plan("off", set(range(16))) is None
    assert pinning.cpu_plan("on", {5}) is None
    with pytest.raises(ValueError, match="on, off or auto"):
        pinning.cpu_plan("sometimes")


PIN_CHILD = r"""
import json, os, sys, threading, time
from harness.execution.pinning import CpuPlan, pin_worker
stop = threading.Event()
t = threading.Thread(target=stop.wait); t.start()
kid = os.fork()
if kid == 0:
    time.sleep(30); os._exit(0)
plan = CpuPlan(loop=int(sys.argv[1]), helpers=(int(sys.argv[2]),))
counts = pin_worker(plan)
time.sleep(0.2)
out = {"loop": sorted(os.sched_getaffinity(0)), "thread": sorted(os.sched_getaffinity(t.native_id)),
       "child": sorted(os.sched_getaffinity(kid)), **counts}
os.kill(kid, 9); stop.set(); t.join()
print(json.dumps(out))
"""


@pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs two CPUs and Linux affinity",
)
def test_pinning_puts_the_loop_on_its_core_and_the_rest_on_the_helpers():
    import json

    loop, helper = sorted(os.sched_getaffinity(0))[-1], sorted(os.sched_getaffinity(0))[0]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run([sys.executable, "-c", PIN_CHILD, str(loop), str(helper)], env=env,
                         capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    got = json.loads(out.stdout)
    assert got["loop"] == [loop]
    assert got["thread"] == [helper] and got["helper_threads"] >= 1
    assert got["child"] == [helper] and got["child_threads"] >= 1


def test_what_slicing_costs_is_read_from_the_slices():
    # two slices of 3 steps: first steps 5 and 7 ms over others of 4 ms
    assert slicecost.first_step_excess_ms([5, 4, 4, 7, 4, 4], [3, 3]) == pytest.approx(2.0)
    assert slicecost.first_step_excess_ms([5, 4], [1, 1]) is None
    results = {
        "a": {"slices": {"start_s": [0.0, 0.30], "end_s": [0.1, 0.40], "steps": [3, 3]},
              "step_ms": [5, 4, 4, 7, 4, 4]},
        "b": {"slices": {"start_s": [0.101, 0.20], "end_s": [0.2, 0.299], "steps": [2, 2]},
              "step_ms": [1, 1, 1, 1]},
    }  # fmt: skip
    gaps = slicecost.round_gaps(results)
    # a: its second slice follows b's second (0.299 -> 0.30); b: its first follows a's (0.1 ->
    # 0.101); b's second follows its own first: no hand-over
    assert gaps["a"] == [pytest.approx(0.001)] and gaps["b"] == [pytest.approx(0.001)]
    cols = slicecost.timing_columns(results["a"], gaps["a"])
    assert cols["slices"] == 2 and cols["turn_gap_ms"] == pytest.approx(1.0)
    assert slicecost.timing_columns({"step_ms": [1.0]}) == dict.fromkeys(slicecost.TIMING_COLUMNS)


def test_a_runs_slices_are_checked_for_overlaps(tmp_path):
    from harness.core import runfolder as rf

    def unit(variant: str, starts: list[float], ends: list[float]) -> None:
        folder = tmp_path / "s" / variant / "timing-1"
        folder.mkdir(parents=True)
        rf.write_json(folder / rf.RESULT, {
            "scenario": "s", "variant": variant, "phase": "timing-1", "step_ms": [2.0, 1.0] * 2,
            "slices": {"steps": [2, 2], "start_s": starts, "end_s": ends},
        })  # fmt: skip

    unit("a", [0.0, 0.3], [0.1, 0.4])
    unit("b", [0.102, 0.2], [0.2, 0.3])
    got = slicecost.check_run(tmp_path)
    assert got["rounds"] == 1 and got["slices"] == 4 and got["overlaps"] == []
    assert (
        got["turn_gap_ms_median"] == pytest.approx(1.0)
        and got["first_step_excess_ms_median"] == 1.0
    )
    unit("c", [0.05, 0.5], [0.15, 0.6])  # its first slice runs beside a's first
    assert slicecost.check_run(tmp_path)["overlaps"]
