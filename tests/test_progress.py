"""What a run prints (issue 26): one bar on a terminal, whole lines in a redirected log, one
'wall time' line, what a resume reuses, a hint while a set-up stage compiles, and one clean
skip reason per variant."""

from __future__ import annotations

import fcntl
import io
import json
import os
import pty
import select
import struct
import subprocess
import termios

import pandas as pd
import pytest

from harness.core import runfolder as rf
from harness.core.progress import SLOW_STAGE_S, Progress
from tests.conftest import (
    FAULTY_ENV,
    HARNESS,
    REPO,
    faulty_args,
    only_run_dir,
    run_cli,
    smoke_args,
)

CURSOR_CODES = ("\r", "\x1b[")


@pytest.fixture(scope="module")
def redirected(tmp_path_factory):
    """faulty [baseline, ideal], 2 rounds, its output captured (not a terminal), progress on
    (the default); then a resume of the finished run."""
    results = tmp_path_factory.mktemp("results")
    args = faulty_args(results, "scenario.faulty.variants=[baseline,ideal]", "harness.repeats=2")
    args = [a for a in args if a != "harness.progress=false"]
    first = run_cli(args, env=FAULTY_ENV, timeout=600)
    run_dir = only_run_dir(results)
    again = run_cli([*args, f"harness.resume={run_dir}"], env=FAULTY_ENV, timeout=600)
    return first, again, run_dir


def test_a_redirected_log_is_whole_lines_without_cursor_codes(redirected):
    first, _, _ = redirected
    assert first.returncode == 0, first.stderr[-2000:]
    for code in CURSOR_CODES:
        assert code not in first.stderr, repr(code)
    lines = first.stderr.splitlines()
    done = [ln for ln in lines if ln.startswith("[")]
    assert [ln.split("]")[0] for ln in done] == ["[1/4", "[2/4", "[3/4", "[4/4"]
    assert done[0].startswith("[1/4] faulty/baseline [timing-1] ok in ")
    # round 2 runs its variants in reverse order (plan.round_order): ideal, then baseline
    assert done[2].startswith("[3/4] faulty/ideal [timing-2] ok in ")
    assert done[-1].startswith("[4/4] faulty/baseline [timing-2] ok in ")
    assert all(len(ln) < 400 for ln in lines)


def test_wall_time_is_said_once(redirected):
    first, _, _ = redirected
    said = [ln for ln in first.stderr.splitlines() if ln.startswith("wall time ")]
    assert len(said) == 1, said


def test_a_resume_says_how_many_finished_runs_it_reuses(redirected):
    _, again, run_dir = redirected
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resuming: 4 of 4 worker runs finished before and are reused; running the other 0" in (
        again.stderr
    )
    assert not [ln for ln in again.stderr.splitlines() if ln.startswith("[")]  # nothing ran
    assert json.loads((run_dir / "state.json").read_text())["state"] == "complete"


def test_a_slow_set_up_stage_is_said_once_with_what_it_usually_is():
    out = io.StringIO()
    progress = Progress(True, out)
    progress.start(3, 0)
    progress.running("k/torch_compile [timing-1]", "setup", "compile", SLOW_STAGE_S - 1)
    assert out.getvalue() == ""
    progress.running("k/torch_compile [timing-1]", "setup", "compile", SLOW_STAGE_S + 1)
    progress.running("k/torch_compile [timing-1]", "setup", "compile", SLOW_STAGE_S + 9)
    said = out.getvalue().splitlines()
    assert len(said) == 1
    assert f"set-up stage 'compile' still running after {SLOW_STAGE_S + 1:.0f} s" in said[0]
    assert "torch.compile" in said[0]


def test_the_worker_says_which_set_up_stage_it_is_in(tmp_path):
    """ctx.stage() publishes its name in .progress.json while it runs, as the bar shows it."""
    import torch

    from harness.execution.worker import WorkerSpec, _publish_stages
    from scenarios import RunContext

    spec = WorkerSpec(
        scenario="x", variant="y", phase="timing-1", size="smoke", device="cpu", config={},
        seed=0, cache_dir=str(tmp_path), out_dir=str(tmp_path), report_progress=True,
    )  # fmt: skip
    ctx = RunContext(device=torch.device("cpu"), size_name="smoke", seed=0, cache_dir=tmp_path)
    _publish_stages(spec, ctx)
    with ctx.stage("compile"):
        inside = rf.read_progress(tmp_path)
    after = rf.read_progress(tmp_path)
    assert inside is not None and (inside["state"], inside["stage"]) == ("setup", "compile")
    assert after is not None and after["stage"] is None
    assert ctx.extras["setup_stages_s"]["compile"] >= 0  # still timed as before


def test_a_terminal_gets_one_bar_and_whole_message_lines(tmp_path):
    """On a terminal the bar is drawn, and messages still come as whole lines above it."""
    args = faulty_args(tmp_path / "r", "scenario.faulty.variants=[ideal]")
    args = [a for a in args if a != "harness.progress=false"]
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # a window
    proc = subprocess.Popen(
        [*HARNESS, *args],
        cwd=REPO,
        env=dict(os.environ, **FAULTY_ENV),
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=follower,
    )
    os.close(follower)
    chunks = []
    while True:
        ready, _, _ = select.select([leader], [], [], 600)
        if not ready:
            proc.kill()
            break
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the other side closed: the run is over
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert proc.wait(timeout=60) == 0
    text = b"".join(chunks).decode(errors="replace")
    assert "1/1" in text and "\r" in text  # the bar, redrawn in place
    lines = text.replace("\r\n", "\n").split("\n")
    assert sum(ln.startswith("wall time ") for ln in lines) == 1
    assert any(ln.startswith("run folder: ") for ln in lines)  # a message, not in the bar


def test_a_skipped_variant_has_one_clean_reason(cli, tmp_path):
    """kernel_flood's cuda_graphs needs a GPU: every round of it is skipped on the CPU. The
    run says so once, and runs.csv's error is the reason alone: no 'skipped' twice, no
    round in it."""
    results = tmp_path / "r"
    args = smoke_args("kernel_flood", results, "scenario.kernel_flood.variants=[cuda_graphs]")
    proc = cli([*args, "harness.repeats=2"])
    runs = pd.read_csv(only_run_dir(results) / "runs.csv").set_index("variant")
    if runs.loc["cuda_graphs", "status"] != "skipped":
        pytest.skip("this machine has a GPU: cuda_graphs runs here")
    assert proc.returncode == 0, proc.stderr[-2000:]
    reason = runs.loc["cuda_graphs", "error"]
    assert reason == "this machine has no GPU: CUDA graphs capture GPU work only"
    said = [ln for ln in proc.stderr.splitlines() if ln.startswith("skipped ")]
    assert said == [f"skipped kernel_flood/cuda_graphs: {reason}"]


def test_skipped_runs_get_their_progress_numbers_too(cli, tmp_path):
    """Every worker run gets a number in the line log, skipped ones included: on the CPU
    kernel_flood's cuda_graphs is skipped in each round, between the baseline's runs, and the
    numbers are still 1..N without a gap (they were counted silently: 2 and 4 never showed)."""
    results = tmp_path / "r"
    args = smoke_args(
        "kernel_flood", results, "scenario.kernel_flood.variants=[baseline,cuda_graphs]"
    )
    args = [a for a in args if a != "harness.progress=false"]
    proc = cli([*args, "harness.repeats=2"])
    runs = pd.read_csv(only_run_dir(results) / "runs.csv")
    if "skipped" not in set(runs["status"]):
        pytest.skip("this machine has a GPU: cuda_graphs runs here")
    assert proc.returncode == 0, proc.stderr[-2000:]
    done = [ln for ln in proc.stderr.splitlines() if ln.startswith("[")]
    assert [ln.split("]")[0] for ln in done] == ["[1/4", "[2/4", "[3/4", "[4/4"]
    # each number is the unit's own place in the run, and each unit is said once; the second
    # round runs its variants in reverse (harness/execution/plan.py)
    assert [ln.split("] ", 1)[1].split(" ")[:2] for ln in done] == [
        ["kernel_flood/baseline", "[timing-1]"],
        ["kernel_flood/cuda_graphs", "[timing-1]"],
        ["kernel_flood/cuda_graphs", "[timing-2]"],
        ["kernel_flood/baseline", "[timing-2]"],
    ]
    assert not [ln for ln in proc.stderr.splitlines() if ln.startswith("skipped ")]
    skipped = [ln for ln in done if "cuda_graphs" in ln]
    assert [ln.split("] ", 1)[1] for ln in skipped] == [
        f"kernel_flood/cuda_graphs [timing-{k}] skipped (this machine has no GPU: CUDA graphs "
        "capture GPU work only)"
        for k in (1, 2)
    ]


def test_lines_come_in_the_order_of_their_numbers():
    """A unit that ends before a lower-numbered one (a skipped unit, launched while the one
    before it tears down) waits for it: the log reads 1, 2, 3, each once. A unit ended again
    (a profile repeated as its own nsys process) is said when it ends; what still waits when
    the run stops is said then. A resume's reused numbers are never waited for."""
    out = io.StringIO()
    progress = Progress(True, out)
    progress.start(4, {1})
    progress.finished("a/x [timing-1]", "skipped", 0.0, False, why="no GPU", number=3)
    assert out.getvalue() == ""
    progress.finished("a/y [timing-1]", "ok", 2.0, True, number=2)
    progress.finished("a/y [profile]", "failed", 1.0, True, number=2)
    progress.finished("a/z [profile]", "ok", 1.0, True, number=4)
    assert out.getvalue().splitlines() == [
        "[2/4] a/y [timing-1] ok in 2.0 s",
        "[3/4] a/x [timing-1] skipped (no GPU)",
        "[2/4] a/y [profile] failed in 1.0 s",
        "[4/4] a/z [profile] ok in 1.0 s",
    ]
    stopped = io.StringIO()
    progress = Progress(True, stopped)
    progress.start(3, 0)
    progress.finished("b [timing-1]", "ok", 1.0, True, number=2)
    progress.close()
    assert stopped.getvalue().splitlines() == ["[2/3] b [timing-1] ok in 1.0 s"]


def test_the_line_log_is_never_silent_long():
    """A worker state or stage past QUIET_S (5 s) is said, then again every AGAIN_S; a step
    between workers (servers starting, exports) is said once."""
    from harness.core.progress import AGAIN_S, QUIET_S

    out = io.StringIO()
    progress = Progress(True, out)
    progress.start(1, 0)
    for t in (1.0, QUIET_S + 0.1, QUIET_S + 1, QUIET_S + AGAIN_S + 0.2):
        progress.running("k/ideal [timing-1]", "import", None, t)
    progress.activity("starting 1 traced fork servers (nsys)")
    progress.activity("starting 1 traced fork servers (nsys)")
    assert out.getvalue().splitlines() == [
        "k/ideal [timing-1]: 'import' still running after 5 s",
        "k/ideal [timing-1]: 'import' still running after 25 s",
        "starting 1 traced fork servers (nsys)",
    ]


def test_messages_fit_a_terminal_and_stay_whole_in_a_log():
    """On a terminal a long message wraps to 100 columns, its continuation indented, no word
    lost; redirected to a file it stays one line, for grep."""
    import io

    from harness.core.progress import Progress
    from harness.execution.settings import NO_GPU_NOTE

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    for enabled in (True, False):  # harness.progress=false keeps the messages, wrapped too
        term, log = Terminal(), io.StringIO()
        Progress(enabled, term).say(NO_GPU_NOTE)
        Progress(enabled, log).say(NO_GPU_NOTE)
        lines = term.getvalue().splitlines()
        assert len(lines) > 1 and all(len(ln) <= 100 for ln in lines), lines
        assert all(ln.startswith("  ") for ln in lines[1:])
        assert " ".join(ln.strip() for ln in lines) == NO_GPU_NOTE
        assert log.getvalue() == NO_GPU_NOTE + "\n"
