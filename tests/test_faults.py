"""Crashes and timeouts are recorded without losing the other variants; resume skips finished
work. Uses the deliberately broken scenario in tests/plugins/faulty/."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import FAULTY_ENV, faulty_args, only_run_dir

pytestmark = pytest.mark.slow

PLUGIN = FAULTY_ENV
_args = faulty_args
#: harness.timeout_s of the faulty run: 'hang' is killed once it has passed.
TIMEOUT_S = 15


def pid_gone(pid: int) -> bool:
    """True when ``pid`` no longer runs (a zombie waiting for a reaper counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


@pytest.fixture(scope="module")
def faulty_run(tmp_path_factory):
    from tests.conftest import run_cli

    results = tmp_path_factory.mktemp("faulty")
    pid_file = tmp_path_factory.mktemp("pids") / "hang.pids"
    proc = run_cli(
        # The timeout only has to outlast the other variants' forked workers (under a second
        # each); 'hang' sits it out in full.
        _args(
            results,
            f"harness.timeout_s={TIMEOUT_S}",
            "scenario.faulty.variants=[baseline,crash,hang,ideal]",
        ),
        env={**PLUGIN, "FAULTY_PID_FILE": str(pid_file)},
    )
    return proc, only_run_dir(results), pid_file


def test_failures_make_a_nonzero_exit(faulty_run):
    proc, _, _ = faulty_run
    assert proc.returncode == 1, proc.stderr[-2000:]


def test_crash_is_recorded_with_stderr_tail(faulty_run):
    proc, run_dir, _ = faulty_run
    status = json.loads((run_dir / "faulty/crash/timing-1/status.json").read_text())
    assert status["status"] == "failed"
    assert status["returncode"] == 1
    assert "deliberate failure in the faulty scenario's crash variant" in status["error"]
    assert "faulty/crash [timing-1] exited with code 1" in proc.stderr


def test_hang_is_killed_at_timeout(faulty_run):
    _, run_dir, _ = faulty_run
    status = json.loads((run_dir / "faulty/hang/timing-1/status.json").read_text())
    assert status["status"] == "timeout"
    assert f"harness.timeout_s={TIMEOUT_S}" in status["error"]
    assert TIMEOUT_S - 1 <= status["wall_s"] < TIMEOUT_S + 40


def test_hang_kills_the_whole_process_group(faulty_run):
    _, _, pid_file = faulty_run
    pids = [int(x) for x in pid_file.read_text().split()]
    assert len(pids) == 2, "the hang variant did not start its children"
    alive = [pid for pid in pids if not pid_gone(pid)]
    assert not alive, f"children of the hung worker survived the timeout: {alive}"


def test_other_variants_kept(faulty_run):
    _, run_dir, _ = faulty_run
    runs = pd.read_csv(run_dir / "runs.csv").set_index("variant")
    assert runs.loc["baseline", "status"] == "ok"
    assert runs.loc["ideal", "status"] == "ok"
    assert runs.loc["crash", "status"] == "failed"
    assert runs.loc["hang", "status"] == "failed"
    assert runs.loc["ideal", "speedup"] > 1.0  # baseline sleeps 20 ms a step, ideal does not
    assert json.loads((run_dir / "state.json").read_text())["state"] == "failed"


def test_resume_runs_only_what_is_missing(faulty_run, cli):
    _, run_dir, _ = faulty_run
    before = {
        v: (run_dir / f"faulty/{v}/timing-1/result.json").stat().st_mtime_ns
        for v in ("baseline", "ideal")
    }
    proc = cli(
        [
            *_args(run_dir.parent, f"harness.resume={run_dir}", f"harness.timeout_s={TIMEOUT_S}"),
            "scenario.faulty.variants=[baseline,crash,ideal]",
        ],
        env=PLUGIN,
    )
    assert proc.returncode == 1  # crash still fails
    after = {
        v: (run_dir / f"faulty/{v}/timing-1/result.json").stat().st_mtime_ns
        for v in ("baseline", "ideal")
    }
    assert after == before, "finished variants were run again"
    crash = json.loads((run_dir / "faulty/crash/timing-1/status.json").read_text())
    assert crash["status"] == "failed"
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert len(manifest["resumed_utc"]) == 1
