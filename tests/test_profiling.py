"""Profiled workers forked from one traced fork server per scenario (nsys.profile_server,
harness/execution/profiling.py), under the real nsys: each worker's capture range is a report of its own,
placed on its own variant, and a worker that fails retires its session so that no later report
lands on the wrong variant."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from analysis.trace import nvtx_ranges, open_trace
from harness.execution.profiling import check_owner
from tests.conftest import FAULTY_ENV, faulty_args, only_run_dir, run_cli

pytestmark = pytest.mark.skipif(shutil.which("nsys") is None, reason="nsys not installed")


@pytest.fixture(scope="module")
def served_run(tmp_path_factory) -> tuple[Path, str]:
    """faulty [baseline, crash, orphan, ideal], profiled: crash fails in its first warm-up step,
    orphan kills its traced fork server in its set-up (before ideal starts: the next worker
    starts once the last is past its window). The run folder and the harness's output."""
    results = tmp_path_factory.mktemp("served")
    args = faulty_args(results, "scenario.faulty.variants=[baseline,crash,orphan,ideal]")
    proc = run_cli([a for a in args if a != "nsys.enabled=false"], env=FAULTY_ENV)
    assert proc.returncode == 1, proc.stderr[-3000:]  # crash failed; the others did not
    return only_run_dir(results), proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def served(served_run: tuple[Path, str]) -> Path:
    return served_run[0]


def _status(run: Path, variant: str) -> dict:
    return json.loads((run / "faulty" / variant / "profile" / "status.json").read_text())


def _window_pids(sqlite: Path) -> set[int]:
    with open_trace(sqlite) as trace:
        ranges = nvtx_ranges(trace)
    return {int(p) for p in ranges.loc[ranges["text"] == "measure", "pid"]}


def test_each_forked_worker_has_its_own_report(served: Path) -> None:
    """baseline's and ideal's reports each hold one measured window: their own worker's, a
    process forked from the traced server (no imports of its own)."""
    for variant in ("baseline", "ideal"):
        status = _status(served, variant)
        assert status["status"] == "ok", status
        prof = served / "faulty" / variant / "profile"
        assert (prof / f"faulty__{variant}.nsys-rep").is_file()
        assert _window_pids(prof / f"faulty__{variant}.sqlite") == {status["pid"]}
        result = json.loads((prof / "result.json").read_text())
        assert result["timing"]["import_s"] < 0.5, result["timing"]  # forked: torch imported


def test_a_failed_worker_retires_its_session(served: Path) -> None:
    """Two lanes (``faulty``, ``faulty-2``): crash fails before its window and retires its
    lane; orphan, forked from the other one, kills its server, which retires that one too; so
    ideal gets a fresh session (``faulty-3``, only one: a retired lane is not replaced), whose
    single report is ideal's."""
    assert _status(served, "crash")["status"] == "failed"
    log = (served / "servers" / "faulty" / "server.log").read_text(errors="replace")
    assert "faulty-3.nsys-rep" in log and "faulty-4" not in log
    # every report is placed but those of the session whose server orphan killed
    left = {p.name.split(".")[0] for p in (served / "servers" / "faulty").glob("*.nsys-rep")}
    assert len(left) <= 1 and left <= {"faulty", "faulty-2"}, left


def test_a_worker_whose_server_ended_runs_again_on_its_own(served_run) -> None:
    """orphan's server died under it, so its exit code was lost: it ran again as its own
    ``nsys profile`` after the others and ended well, its report its own. crash ran again too
    and failed again (the run's only failure)."""
    run, output = served_run
    said = [line for line in output.splitlines() if "runs again as its own nsys process" in line]
    assert [line.split(":")[0] for line in said] == [
        "faulty/crash [profile]",
        "faulty/orphan [profile]",
    ]
    assert "exit code is not known" in said[1]
    status = _status(run, "orphan")
    assert status["status"] == "ok", status
    prof = run / "faulty" / "orphan" / "profile"
    # one window, of its own worker (under its own nsys, not a served one's)
    (window,) = _window_pids(prof / "faulty__orphan.sqlite")
    assert window not in {_status(run, v)["pid"] for v in ("baseline", "ideal")}
    assert _status(run, "crash")["status"] == "failed"
    assert output.count("FAILED faulty/crash [profile]") == 1
    assert "FAILED faulty/orphan" not in output


def test_a_report_on_the_wrong_variant_is_refused(served: Path) -> None:
    """The check every served export passes: its measured window must be its worker's."""
    base = served / "faulty" / "baseline" / "profile" / "faulty__baseline.sqlite"
    ideal_pid = _status(served, "ideal")["pid"]
    assert check_owner(base, _status(served, "baseline")["pid"]) == ""
    assert "belongs to process" in check_owner(base, ideal_pid)
    assert check_owner(base, None) == ""
