"""Distributed workers (harness/execution/ranks.py, harness/execution/worker.py): timing units' ranks forked from the
fork server rather than started by torchrun; a failing, hung or interrupted unit leaves no rank
behind; torchrun workers (profiled ones) hold at their gates, so their start-ups run beside the
previous worker's tear-down and never beside a warm-up or window. End to end through the CLI on
the CPU, 2 gloo ranks of the deliberately broken scenario in tests/plugins/faulty_dist/; the
rank group's own rules with plain processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from harness.core import nsys as nsys_mod
from harness.core import runfolder as rf
from harness.execution.execute import kill_group
from harness.execution.ranks import RankGroup, rank_env
from harness.execution.worker import RDZV_FILE_ENV, WINDOW_MARKER
from tests.conftest import HARNESS, REPO, only_run_dir, run_cli, smoke_args
from tests.test_faults import pid_gone
from tests.test_reliability import HANG_S, _wait_for, wait_for_text
from tests.test_stop_leftovers import leaving_env, what_is_left

DIST_ENV = {"BOTTLENECK_SCENARIO_MODULES": "tests.plugins.faulty_dist"}
#: harness.timeout_s of the runs whose units must not time out: far above what a forked unit
#: takes, so a rank left running (rank_crash's rank 0 sleeps an hour) shows as 'timeout'.
LONG_TIMEOUT_S = 600


def _ranks(pid_dir: Path, variant: str) -> list[dict]:
    """The records each rank of ``variant``'s units wrote once set up."""
    return [json.loads(p.read_text()) for p in sorted(pid_dir.glob(f"{variant}.*.json"))]


# -- the rank group's rules, with plain processes -------------------------------------------


def _proc(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code], start_new_session=True)


def test_a_failing_rank_stops_the_others_and_gives_the_unit_its_code(tmp_path):
    ranks = [_proc("import time; time.sleep(600)"), _proc("import sys; sys.exit(3)")]
    group = RankGroup(ranks, ["x"], tmp_path)
    try:
        assert group.wait(timeout=120) == 3
    finally:
        kill_group(group)
    assert group.failed_rank == 1
    assert ranks[0].returncode == -signal.SIGTERM  # stopped, not left to sleep
    assert "rank 1 of 2 ended first, with exit code 3" in group.note


def test_ranks_that_all_finish_end_the_unit_well_and_a_kill_stops_every_rank(tmp_path):
    done = RankGroup([_proc("pass"), _proc("pass")], ["x"], tmp_path)
    assert done.wait(timeout=120) == 0 and done.failed_rank is None and done.note == ""
    running = RankGroup([_proc("import time; time.sleep(600)") for _ in range(3)], ["x"], tmp_path)
    kill_group(running, grace_s=10)
    assert all(p.returncode == -signal.SIGTERM for p in running.members)


def test_rank_env_is_torchruns_for_one_node(tmp_path):
    base = {"NCCL_NVLS_ENABLE": "0", "MASTER_PORT": "1234", "CUDA_VISIBLE_DEVICES": "0,1"}
    env = rank_env(base, 1, 2, "ddp/x [timing-1]", tmp_path / rf.RDZV)
    assert env["NCCL_NVLS_ENABLE"] == "0" and env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"]) == (
        "1",
        "1",
        "2",
        "2",
    )
    assert env["MASTER_ADDR"] == "127.0.0.1" and "MASTER_PORT" not in env  # rank 0's pick
    assert env["TORCHELASTIC_USE_AGENT_STORE"] == "True"  # every rank a client, as torchrun's
    assert env[RDZV_FILE_ENV] == str(tmp_path / rf.RDZV)


# -- one run: forked timing ranks, a failing rank, profiled torchrun workers held -----------


@pytest.fixture(scope="module")
def ranks_run(tmp_path_factory):
    """(process, run folder, pid folder, profiled) of faulty_dist [baseline, rank_crash, ideal],
    two timing rounds (forked ranks) and, where nsys is installed, a profile each (nsys
    profile ... torchrun)."""
    results = tmp_path_factory.mktemp("ranks")
    pid_dir = tmp_path_factory.mktemp("rank-pids")
    profiled = nsys_mod.find() is not None
    args = smoke_args(
        "faulty_dist",
        results,
        "scenario.faulty_dist.variants=[baseline,rank_crash,ideal]",
        "harness.repeats=2",
        f"nsys.enabled={str(profiled).lower()}",
        f"harness.timeout_s={LONG_TIMEOUT_S}",
    )
    leaving = leaving_env()
    leaving.pop("FAULTY_LEAVE")
    env = {**DIST_ENV, "FAULTY_PID_DIR": str(pid_dir), **leaving}
    proc = run_cli(args, env=env, timeout=1800)
    LEFT[results] = what_is_left(leaving)
    return proc, only_run_dir(results), pid_dir, profiled


#: What each ranks_run left behind (processes, temporary files), by its results folder.
LEFT: dict[Path, tuple[list[str], list[str]]] = {}


def test_a_run_with_torchrun_leaves_no_process_and_no_temporary_folder(ranks_run):
    """torch.distributed.run makes a ``torchelastic_*`` folder per launch and leaves it even
    when it ends well (7 per full run on the CPU): the run's own temporary folder holds them,
    and goes when the run ends (tests/test_stop_leftovers.py)."""
    _, run_dir, _, profiled = ranks_run
    if not profiled:
        pytest.skip("torchrun launches only the profiles here: needs nsys")
    assert LEFT[run_dir.parent] == ([], [])


def test_timing_ranks_are_forked_and_import_nothing(ranks_run):
    proc, run_dir, _, profiled = ranks_run
    assert proc.returncode == 1, proc.stderr[-3000:]  # rank_crash fails, the rest is ok
    timings = pd.read_csv(run_dir / "timings.csv")
    ok = timings[timings["status"] == "ok"]
    timing = ok[ok["phase"].str.startswith(rf.TIMING_PREFIX)]
    assert len(timing) == 4 and (timing["ranks"] == 2).all()
    parents = set()
    for row in timing.itertuples():
        ranks = json.loads((run_dir / row.scenario / row.variant / row.phase / rf.RESULT)
                           .read_text())["timing"]["ranks"]  # fmt: skip
        assert [r["rank"] for r in ranks] == [0, 1]
        parents |= {r["ppid"] for r in ranks}
    assert len(parents) == 1  # every rank of every timing unit: a child of one fork server
    assert json.loads((run_dir / "wall_time.json").read_text())["settings"]["fork_ranks"]
    if profiled:  # the torchrun ranks of the profiles are fresh interpreters, each unit's own
        prof = ok[ok["phase"] == rf.PROFILE]
        assert len(prof) == 2 and (prof["ranks"] == 2).all()
        assert timing["ranks_import_max_s"].max() < 0.1 * prof["ranks_import_max_s"].min()
    else:
        assert timing["ranks_import_max_s"].max() < 0.5


def test_rank_records_name_the_fork_server_and_torchrun(ranks_run):
    _, _, pid_dir, profiled = ranks_run
    records = _ranks(pid_dir, "baseline") + _ranks(pid_dir, "ideal")
    forked = [r for r in records if "harness.execution.forkserver" in r["parent"]]
    assert len(forked) == 8  # 2 variants x 2 rounds x 2 ranks
    under_torchrun = [r for r in records if "torch.distributed.run" in r["parent"]]
    assert len(under_torchrun) == (4 if profiled else 0)
    assert len(forked) + len(under_torchrun) == len(records)


def test_a_failing_rank_stops_the_other_one(ranks_run):
    """rank_crash: rank 1 raises in its first step while rank 0 sleeps an hour without a
    collective; the unit fails (not 'timeout') and no rank is left."""
    _, run_dir, pid_dir, profiled = ranks_run
    phases = [rf.timing_phase(1), rf.timing_phase(2)] + ([rf.PROFILE] if profiled else [])
    for phase in phases:
        status = json.loads((run_dir / "faulty_dist/rank_crash" / phase / rf.STATUS).read_text())
        assert status["status"] == "failed", status
        stderr = (run_dir / "faulty_dist/rank_crash" / phase / rf.STDERR).read_text()
        assert "deliberate failure of rank 1" in stderr
        if phase != rf.PROFILE:  # forked: the harness stopped rank 0 (torchrun: torchrun did)
            assert "rank 1 of 2 ended first" in status["error"]
            assert "deliberate failure of rank 1" in status["error"]
    records = _ranks(pid_dir, "rank_crash")
    assert len(records) == 2 * len(phases)
    assert [r["pid"] for r in records if not pid_gone(r["pid"])] == []


#: Seconds of slack between two clock readings.
CLOCK_SLACK_S = 0.001


def test_held_distributed_workers_start_beside_tear_downs_and_measure_alone(ranks_run):
    """Every rank waits at its unit's gate: the next unit (forked ranks, or nsys + torchrun)
    starts while the last one tears down, but no warm-up or window runs beside another unit's
    start-up, set-up, warm-up, window or tear-down (only beside a unit held at its gate)."""
    _, run_dir, _, profiled = ranks_run
    timings = pd.read_csv(run_dir / "timings.csv")
    ok = timings[timings["status"] == "ok"]
    spans = [
        (r.launched_at, r.setup_ended_at, r.warmup_started_at, r.window_ended_at, r.ended_at,
         f"{r.variant}/{r.phase}")
        for r in ok.itertuples()
    ]  # fmt: skip
    for launched, gate, start, end, ended, name in spans:
        assert launched <= gate + CLOCK_SLACK_S and start <= end <= ended, name
        for o_launched, o_gate, o_start, _, o_ended, other in spans:
            if other != name:
                for lo, hi in ((o_launched, o_gate), (o_start, o_ended)):
                    assert min(end, hi) - max(start, lo) <= CLOCK_SLACK_S, (name, other)
    rows = timings.sort_values("launched_at")
    overlapped = rows["launched_at"].to_numpy()[1:] < rows["ended_at"].to_numpy()[:-1]
    started = rows["phase"].to_numpy()[1:]
    assert overlapped[started != rf.PROFILE].any()  # forked units started beside a tear-down
    if profiled:  # and so did nsys + torchrun, held at its gate
        assert overlapped[started == rf.PROFILE].any()
    assert json.loads((run_dir / "wall_time.json").read_text())["workers_overlap_s"] > 0


# -- a hung rank, and Ctrl-C --------------------------------------------------------------------


def test_a_hung_rank_is_killed_with_its_unit_at_the_time_limit(tmp_path):
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    args = smoke_args(
        "faulty_dist",
        tmp_path / "r",
        "scenario.faulty_dist.variants=[rank_hang]",
        "harness.timeout_s=12",  # the hung rank sits it out; the ranks set up in 1-2 s
    )
    proc = run_cli(args, env={**DIST_ENV, "FAULTY_PID_DIR": str(pid_dir)}, timeout=HANG_S)
    assert proc.returncode == 1, proc.stderr[-3000:]
    run_dir = only_run_dir(tmp_path / "r")
    status = json.loads((run_dir / "faulty_dist/rank_hang/timing-1" / rf.STATUS).read_text())
    assert status["status"] == "timeout"
    records = _ranks(pid_dir, "rank_hang")
    assert sorted(r["rank"] for r in records) == [0, 1]
    assert [r["pid"] for r in records if not pid_gone(r["pid"])] == []


@pytest.mark.parametrize("forked", [True, False], ids=["forked", "torchrun"])
def test_ctrl_c_inside_a_window_stops_every_rank(tmp_path, forked):
    """SIGINT to the harness while a distributed unit is inside its window (waiting for a hold
    file that never appears): exit 130, the finished unit kept, every rank of the other gone;
    with harness.fork_ranks=false the ranks are torchrun's."""
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    results = tmp_path / "r"
    args = smoke_args(
        "faulty_dist",
        results,
        "scenario.faulty_dist.variants=[ideal,slow]",
        f"harness.fork_ranks={str(forked).lower()}",
    )
    env = dict(os.environ, **DIST_ENV, FAULTY_PID_DIR=str(pid_dir))
    env["FAULTY_HOLD_FILE"] = str(tmp_path / "never")
    proc = subprocess.Popen(
        [*HARNESS, *args],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        log = _wait_for("*/faulty_dist/slow/timing-1/stdout.log", results, proc)
        wait_for_text(log, WINDOW_MARKER, proc)
        os.kill(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=HANG_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        left = [r["pid"] for r in _ranks(pid_dir, "*") if not pid_gone(r["pid"])]
        for pid in left:  # a failed test leaves no rank behind either
            os.kill(pid, signal.SIGKILL)
    assert left == []
    assert proc.returncode == 130, err[-3000:]
    run_dir = only_run_dir(results)
    assert json.loads((run_dir / "state.json").read_text())["state"] == "interrupted"
    ideal = json.loads((run_dir / "faulty_dist/ideal/timing-1" / rf.RESULT).read_text())
    parent = "harness.execution.forkserver" if forked else "torch.distributed.run"
    assert all(parent in r["parent"] for r in _ranks(pid_dir, "ideal"))
    assert [r["rank"] for r in ideal["timing"]["ranks"]] == [0, 1]
    slow = _ranks(pid_dir, "slow")
    assert sorted(r["rank"] for r in slow) == [0, 1]
    assert [r["pid"] for r in slow if not pid_gone(r["pid"])] == []
    assert not (run_dir / "faulty_dist/slow/timing-1" / rf.STATUS).exists()
