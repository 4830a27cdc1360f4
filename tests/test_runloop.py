"""The run loop (harness.execution.runloop): the next worker starts while the current one tears down,
but no warm-up or window ever runs beside another worker, and a scenario's exports come
before the next scenario measures. Driven with small stand-in workers that speak the progress
protocol (no torch), so the timings the assertions rest on are seconds of sleep, not load."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from harness.core import runfolder as rf
from harness.core.runfolder import Status, Unit
from harness.execution.execute import Outcome, kill_group
from harness.execution.plan import added_round_at
from harness.execution.runloop import Live, RunLoop

# A worker as the harness's speaks: set-up, held until .go, warm-up, window, then a tear-down
# of TEARDOWN seconds after its result is written.
WORKER = r"""
import json, os, sys, time
out, teardown = sys.argv[1], float(sys.argv[2])
def say(state):
    tmp = os.path.join(out, ".progress.tmp")
    with open(tmp, "w") as fh:
        json.dump({"state": state, "stage": None, "at": time.time()}, fh)
    os.replace(tmp, os.path.join(out, ".progress.json"))
times = {"setup_from": time.time()}
say("setup")
time.sleep(float(sys.argv[3]) if len(sys.argv) > 3 else 0.1)
times["setup_to"] = time.time()
say("held")
while not os.path.exists(os.path.join(out, ".go")):
    time.sleep(0.005)
times["measure_from"] = time.time()
say("warmup"); time.sleep(0.2)
say("window"); time.sleep(0.3)
times["measure_to"] = time.time()
say("stopping")
with open(os.path.join(out, "times.json"), "w") as fh:
    json.dump(times, fh)
open(os.path.join(out, "result.json"), "w").write("{}")
time.sleep(teardown)
"""


class FakeHost:
    """Launches stand-in workers; records what the loop did and when."""

    def __init__(
        self,
        tmp: Path,
        teardown_s: dict[str, float],
        stop_after: str = "",
        quiet: bool = False,
        setup_s: dict[str, float] | None = None,
        alone: tuple[str, ...] = (),
    ) -> None:
        self.tmp = tmp
        self.quiet = quiet
        self.setup_s = setup_s or {}
        self.alone = alone
        self.writing_until = 0.0
        """A report is being written until then (epoch seconds): timing workers must wait."""
        self.teardown_s = teardown_s
        self.stop_after = stop_after
        self.ended_at: dict[str, float] = {}
        self.launched_at: dict[str, float] = {}
        self.exports: dict[str, float] = {}
        self.procs: list[subprocess.Popen[bytes]] = []

    def out(self, unit: Unit) -> Path:
        return self.tmp / unit.scenario / unit.variant

    def launch(self, unit: Unit) -> Live | Outcome:
        if unit.variant == "skipped":
            return Outcome(Status.SKIPPED, "not here")
        out = self.out(unit)
        out.mkdir(parents=True)
        cmd = [
            sys.executable, "-c", WORKER, str(out), str(self.teardown_s.get(unit.variant, 0)),
            str(self.setup_s.get(unit.variant, 0.1)),
        ]  # fmt: skip
        proc = subprocess.Popen(cmd, start_new_session=True)
        self.procs.append(proc)
        self.launched_at[unit.variant] = time.time()
        return Live(unit, proc, out, 60.0, quiet_stop=self.quiet)

    def may_overlap(self, current: Live, unit: Unit) -> bool:
        return True

    def ended(self, unit: Unit, outcome: Outcome, live: Live | None) -> list[Unit]:
        assert outcome.status in (Status.OK, Status.SKIPPED), outcome.error
        self.ended_at[unit.variant] = time.time()
        return []

    def scenario_done(self, scenario: str) -> None:
        self.exports[scenario] = time.time()
        time.sleep(0.3)  # exports take a while; nothing may measure meanwhile

    def ready(self, unit: Unit) -> bool:
        return True

    def may_measure(self, unit: Unit) -> bool:
        return unit.is_profile or time.time() >= self.writing_until

    def sets_up_together(self, unit: Unit) -> bool:
        return unit.scenario not in self.alone

    def tick(self, live: list[Live], measuring: bool) -> None:
        if self.stop_after and any(x.unit.variant == self.stop_after for x in live):
            if any(x.state == rf.WorkerState.HELD for x in live):
                raise KeyboardInterrupt  # a stop signal while a worker waits at its gate

    def round_ended(self, scenario: str, phase: str, queue: list[Unit]) -> tuple[int, list[Unit]]:
        return 0, []

    def times(self, variant: str, scenario: str = "s") -> dict[str, float]:
        return json.loads((self.tmp / scenario / variant / "times.json").read_text())


def test_the_next_worker_sets_up_beside_a_tear_down_and_measures_alone(tmp_path):
    host = FakeHost(tmp_path, {"a": 2.0, "b": 0.0})
    RunLoop(host, [Unit("s", "a", "profile"), Unit("s", "b", "profile")], overlap=True).run()
    a, b = host.times("a"), host.times("b")
    # b was started during a's 2 s tear-down ...
    assert host.launched_at["b"] < host.ended_at["a"]
    assert host.launched_at["b"] >= a["measure_to"]  # ... never during a's window
    # ... and measured only once a had exited
    assert b["measure_from"] >= host.ended_at["a"]


def test_a_worker_measures_beside_one_that_only_waits_past_its_window(tmp_path):
    """harness.overlap_capture_stop: a profiled worker waiting in cudaProfilerStop after its
    window (here: its 2 s tear-down) does not hold the next one's warm-up back, but the two
    windows still never meet, and the third worker waits for its turn."""
    host = FakeHost(tmp_path, {"a": 2.0, "b": 2.0, "c": 0.0}, quiet=True)
    units = [Unit("s", v, "profile") for v in "abc"]
    RunLoop(host, units, overlap=True).run()
    a, b, c = host.times("a"), host.times("b"), host.times("c")
    assert a["measure_to"] <= b["measure_from"] < host.ended_at["a"]
    assert b["measure_to"] <= c["measure_from"]
    assert host.launched_at["c"] >= host.ended_at["a"]  # never three workers at once


def test_without_overlap_each_worker_starts_after_the_last_one_ended(tmp_path):
    host = FakeHost(tmp_path, {"a": 1.0, "b": 0.0})
    RunLoop(host, [Unit("s", "a", "profile"), Unit("s", "b", "profile")], overlap=False).run()
    assert host.launched_at["b"] >= host.ended_at["a"]


@pytest.mark.parametrize("quiet", [False, True], ids=["exits", "quiet_past_window"])
def test_a_scenario_is_exported_before_the_next_one_measures(tmp_path, quiet):
    """Also where the scenario's last worker only waits past its window: a worker of the next
    scenario never measures beside it, since its exit starts the scenario's exports."""
    host = FakeHost(tmp_path, {"a": 1.0}, quiet=quiet)
    units = [
        Unit("s", "a", "profile"),
        Unit("t", "skipped", "timing-1"),
        Unit("t", "b", "timing-1"),
    ]
    RunLoop(host, units, overlap=True).run()
    assert host.launched_at["b"] < host.ended_at["a"]  # b set up beside a's tear-down
    assert host.exports["s"] >= host.ended_at["a"]  # s exported after its last worker
    assert host.times("b", "t")["measure_from"] >= host.exports["s"] + 0.3  # after the export
    assert set(host.exports) == {"s", "t"}


def test_a_stop_signal_kills_every_live_worker(tmp_path):
    host = FakeHost(tmp_path, {"a": 30.0}, stop_after="b")
    with pytest.raises(KeyboardInterrupt):
        RunLoop(host, [Unit("s", "a", "profile"), Unit("s", "b", "profile")], True).run()
    assert len(host.procs) == 2
    assert all(p.poll() is not None for p in host.procs)  # both stopped, none left behind


class Limited(FakeHost):
    """Stand-in workers with a time limit of their own; how each unit ended, by variant."""

    def __init__(self, *args: Any, limit_s: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limit_s = limit_s
        self.outcomes: dict[str, Status] = {}

    def launch(self, unit: Unit) -> Live | Outcome:
        item = super().launch(unit)
        assert isinstance(item, Live)
        item.timeout_s = self.limit_s
        return item

    def ended(self, unit: Unit, outcome: Outcome, live: Live | None) -> list[Unit]:
        self.outcomes[unit.variant] = Status(outcome.status)
        return []


def test_a_worker_past_its_time_limit_is_killed_and_recorded(tmp_path):
    host = Limited(tmp_path, {"a": 60.0}, limit_s=1.0)
    t0 = time.perf_counter()
    RunLoop(host, [Unit("s", "a", "timing-1")], overlap=True).run()
    assert host.outcomes["a"] == Status.TIMEOUT
    assert time.perf_counter() - t0 < 30  # the 60 s tear-down did not run out
    assert host.procs[0].poll() is not None


def test_a_paused_process_group_is_still_stopped_at_once(tmp_path):
    """kill_group on a process stopped with SIGSTOP (a compiler-cache warm-up paused during a
    measurement): SIGTERM acts once the process is continued, so it ends by SIGTERM within the
    grace time instead of waiting it out for SIGKILL."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            start_new_session=True)  # fmt: skip
    time.sleep(0.3)
    proc.send_signal(signal.SIGSTOP)
    t0 = time.perf_counter()
    kill_group(proc, grace_s=30.0)
    assert time.perf_counter() - t0 < 25
    assert proc.returncode == -signal.SIGTERM


def _spans(host: FakeHost, units: list[Unit]) -> dict[str, dict[str, float]]:
    return {u.variant: host.times(u.variant, u.scenario) for u in units}


def _no_set_up_or_window_beside_a_window(spans: dict[str, dict[str, float]]) -> None:
    """No worker sets up, warms up or measures while another one warms up or measures."""
    for name, own in spans.items():
        for other, t in spans.items():
            if other == name:
                continue
            for a, b in (("setup_from", "setup_to"), ("measure_from", "measure_to")):
                overlap = min(own["measure_to"], t[b]) - max(own["measure_from"], t[a])
                assert overlap <= 0, (name, other, a, overlap)


def test_a_batch_sets_up_side_by_side_and_measures_in_turn(tmp_path):
    """harness.setup_batch=3: three workers of a scenario start together, their 1 s set-ups
    run at once, then each measures alone; the fourth starts only once the third is past its
    window (never during a window), so the four take about two set-ups, not four."""
    host = FakeHost(tmp_path, {}, setup_s={v: 1.0 for v in "abcd"})
    units = [Unit("s", v, "timing-1") for v in "abcd"]
    RunLoop(host, units, overlap=True, batch=3).run()
    spans = _spans(host, units)
    first_window = min(t["measure_from"] for t in spans.values())
    assert all(host.launched_at[v] < first_window for v in "abc")  # launched together
    assert all(spans[v]["setup_to"] <= first_window for v in "abc")  # all set up first
    assert host.launched_at["d"] >= spans["c"]["measure_to"]
    assert [v for v, _ in sorted(spans.items(), key=lambda i: i[1]["measure_from"])] == list(
        "abcd"
    )  # in order
    _no_set_up_or_window_beside_a_window(spans)
    # 3 windows of 0.5 s after one 1 s set-up: b's window starts within ~2.5 s of a's launch
    assert spans["c"]["measure_from"] - host.launched_at["a"] < 3.0


@pytest.mark.parametrize("alone", [True, False], ids=["setup_alone", "other_scenario"])
def test_a_batch_holds_one_scenario_that_sets_up_together(tmp_path, alone):
    """A scenario whose set-up measures (Scenario.setup_alone) starts one worker at a time;
    a batch never takes in the next scenario's workers."""
    host = FakeHost(tmp_path, {}, alone=("s",) if alone else ())
    units = [Unit("s", "a", "timing-1"), Unit("s" if alone else "t", "b", "timing-1")]
    RunLoop(host, units, overlap=True, batch=4).run()
    spans = _spans(host, units)
    assert host.launched_at["b"] >= spans["a"]["measure_to"]
    _no_set_up_or_window_beside_a_window(spans)


def test_a_timing_worker_sets_up_while_a_report_is_written_and_measures_after(tmp_path):
    """While nsys writes a report a timing worker may start and set up, but it warms up only
    once the report is written (Host.may_measure)."""
    host = FakeHost(tmp_path, {})
    host.writing_until = time.time() + 1.5
    units = [Unit("s", "a", "timing-1")]
    RunLoop(host, units, overlap=True, batch=2).run()
    assert host.launched_at["a"] < host.writing_until - 1.0
    assert host.times("a")["measure_from"] >= host.writing_until


def test_a_worker_held_behind_a_slow_batch_mate_is_not_timed_out(tmp_path):
    """harness.timeout_s counts a worker's own work, not its wait at the gate: b, set up in
    0.1 s, waits while a sets up for 2.5 s; with a 2 s limit it still runs, and a, slow in its
    set-up, is the one past the limit."""

    host = Limited(tmp_path, {}, limit_s=2.0, setup_s={"a": 2.5, "b": 0.1, "c": 1.0})
    units = [Unit("s", v, "timing-1") for v in "abc"]
    RunLoop(host, units, overlap=True, batch=3).run()
    assert host.outcomes == {"a": Status.TIMEOUT, "b": Status.OK, "c": Status.OK}


def test_only_a_single_process_capture_stop_is_shared() -> None:
    """A window may run beside a profiled worker's cudaProfilerStop only where that worker is a
    single process: a distributed report keeps nsys busy for 35-38 s, and windows beside it ran
    1.6-2.2x slower (2 x H200, 2026-11-28)."""
    from harness.execution.runner import shares_capture_stop

    one = {"profiled": True, "one_node": True, "overlap_capture_stop": True}
    assert shares_capture_stop(world=1, **one)
    assert not shares_capture_stop(world=2, **one)
    assert not shares_capture_stop(world=1, **(one | {"profiled": False}))
    assert not shares_capture_stop(world=1, **(one | {"overlap_capture_stop": False}))


class FakeTurns:
    """Sliced rounds for the loop: the units of ``sliced`` phases are a group; their turns
    open every member's gate at once (the stand-in workers speak the file gate)."""

    def __init__(self, host: FakeHost, sliced: str) -> None:
        self.host, self.sliced = host, sliced
        self.rounds: list[list[str]] = []

    def group_of(self, unit: Unit) -> tuple[str, str] | None:
        return (unit.scenario, unit.phase) if unit.phase == self.sliced else None

    def attach(self, live: list[Live]) -> None:
        for item in live:
            if item.group is not None and item.channel is None:
                item.channel = object()

    def run_group(self, members: list[Live]) -> None:
        self.rounds.append(sorted(x.unit.variant for x in members))
        for x in members:
            (x.out_dir / rf.GO).touch()

    def round_done(self, group, queue):
        return []


def test_a_round_waits_for_all_its_processes_and_no_other_unit_joins_its_set_up(tmp_path):
    """The units of a sliced round are all launched and held before its turns start, and a
    unit of another phase (the scenario's profile) is not launched beside the round's
    set-ups: it would hold at its gate beside the round, and the round would wait for it."""
    host = FakeHost(tmp_path, {"a": 0.1, "b": 0.1, "p": 0.1})
    turns = FakeTurns(host, "timing-1")
    units = [Unit("s", "a", "timing-1"), Unit("s", "b", "timing-1"), Unit("s", "p", "profile")]
    RunLoop(host, units, overlap=True, batch=4, turns=turns).run()
    assert turns.rounds == [["a", "b"]]
    times = {v: json.loads((tmp_path / "s" / v / "times.json").read_text()) for v in "abp"}
    assert times["p"]["setup_from"] >= min(times[v]["measure_from"] for v in "ab")


class AddsRounds(FakeHost):
    """Adds one round of ``s`` after its first; records each ended round and the launch order."""

    def __init__(self, tmp: Path, spread: bool) -> None:
        super().__init__(tmp, {})
        self.spread = spread
        self.rounds_ended: list[tuple[str, str]] = []
        self.order: list[Unit] = []

    def out(self, unit: Unit) -> Path:
        return self.tmp / unit.scenario / unit.variant / unit.phase

    def launch(self, unit: Unit) -> Live | Outcome:
        self.order.append(unit)
        return super().launch(unit)

    def round_ended(self, scenario: str, phase: str, queue: list[Unit]) -> tuple[int, list[Unit]]:
        self.rounds_ended.append((scenario, phase))
        at = added_round_at(queue, self.spread)  # as the scheduler places them
        if (scenario, phase) == ("s", "timing-1"):
            return at, [Unit("s", "a", "timing-2"), Unit("s", "b", "timing-2")]
        return at, []


@pytest.mark.parametrize("spread", [False, True], ids=["next", "spread"])
def test_an_added_round_goes_next_or_after_the_queued_rounds(tmp_path, spread):
    """Rounds back to back ask for more too, once per round (after its last unit); spread
    (harness.timing.spread_rounds), the added round waits for the other scenario's round."""
    host = AddsRounds(tmp_path, spread)
    units = [Unit("s", "a", "timing-1"), Unit("s", "b", "timing-1"), Unit("t", "c", "timing-1"),
             Unit("s", "a", "profile")]  # fmt: skip
    # no overlap: the next unit is launched only after the round's last one has ended (with
    # overlap it may start beside that one's tear-down, before the round asks for more)
    RunLoop(host, units, overlap=False).run()
    added = [Unit("s", "a", "timing-2"), Unit("s", "b", "timing-2")]
    if spread:
        assert host.order == [*units[:3], *added, units[3]]
    else:
        assert host.order == [*units[:2], *added, *units[2:]]
    assert sorted(host.rounds_ended) == [("s", "timing-1"), ("s", "timing-2"), ("t", "timing-1")]
    assert added_round_at(units, True) == 3 and added_round_at(units, False) == 0


def _replayed(lanes: int, beside: int) -> dict[str, dict[str, float]]:
    """Three profiled workers (set-up 1 s, warm-up and window 1 s, stop 3 s, leaving 1 s)
    through the run loop on a fake clock with ``lanes`` traced sessions, one launched at a
    time: each one's launch, gate and exit."""
    from scripts.replay_lanes import Work, replay

    work = [Work(Unit("s", v, "profile"), 1.0, 1.0, 3.0, 1.0) for v in "abc"]
    host = replay(work, lanes, beside, batch=1)
    assert not host.unsafe  # never forked from a session whose worker was inside its capture
    for w in work:  # no launch inside another worker's warm-up and window
        for o in work:
            assert not o.times["go"] < w.times["launch"] < o.times["go"] + o.measure
    return {w.unit.variant: w.times for w in work}


@pytest.mark.parametrize(
    ("lanes", "beside", "c_at"),
    [(3, 2, 4.0), (3, 1, 6.0), (2, 2, 6.0)],
    ids=["beside-two-stoppers", "beside-one", "lanes-bound"],
)
def test_a_launch_joins_quiet_stoppers_up_to_beside_and_the_lanes(lanes, beside, c_at):
    """harness.profile_beside: c sets up while a and b both wait in cudaProfilerStop (from
    4 s) where the rule and a third session allow it; otherwise once a has exited (6 s)."""
    t = _replayed(lanes, beside)
    assert t["b"]["launch"] == pytest.approx(2.0, abs=0.1)  # at a's window end
    assert t["c"]["launch"] == pytest.approx(c_at, abs=0.1)
    assert t["c"]["go"] >= t["b"]["go"] + 1.0  # measured after b's window, never beside it


def test_profile_beside_is_checked_and_set_from_the_command_line():
    from harness.core.config import HarnessConfig, compose

    assert HarnessConfig().profile_beside == 2
    assert (
        compose(["+scenario=forced_sync", "harness.profile_beside=3"])[1].harness.profile_beside
        == 3
    )
    with pytest.raises(ValueError, match=r"harness\.profile_beside must be >= 1"):
        HarnessConfig(profile_beside=0)
