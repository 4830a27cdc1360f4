"""Exports run after the run's last worker; a resumed run exports what was never exported."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from tests.conftest import FAULTY_ENV, only_run_dir

pytestmark = pytest.mark.skipif(shutil.which("nsys") is None, reason="nsys not installed")


def _args(results, *extra):
    return [
        "run",
        "+scenario=faulty",
        "scenario.faulty.variants=[baseline,ideal]",
        "size=smoke",
        "harness.repeats=1",
        "harness.progress=false",
        f"harness.results_dir={results}",
        "harness.report=false",  # these tests read no report (tests/test_report.py does)
        "harness.fork_preload=[]",  # faulty builds no optimizer (tests/conftest.py: NO_DYNAMO)
        *extra,
    ]


def test_profiles_are_exported_and_a_resume_exports_the_missing_one(cli, tmp_path):
    results = tmp_path / "r"
    proc = cli(_args(results), env=FAULTY_ENV)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "exporting 2 nsys reports to SQLite" in proc.stderr
    run = only_run_dir(results)
    base = run / "faulty" / "baseline" / "profile" / "faulty__baseline"
    status = json.loads((base.parent / "status.json").read_text())
    assert status["status"] == "ok" and status["export_s"] > 0
    timings = pd.read_csv(run / "timings.csv").set_index(["variant", "phase"])
    assert timings.loc[("baseline", "profile"), "export_s"] > 0
    assert pd.isna(timings.loc[("baseline", "timing-1"), "export_s"])
    # nsys wrote each report in the background, after its worker had ended (a second or more
    # of QdstrmImporter on this box) while the next variant was profiled
    finalize = timings.xs("profile", level="phase")["finalize_s"]
    assert finalize.notna().any() and (finalize.dropna() > 0).all(), finalize
    assert pd.isna(timings.loc[("baseline", "timing-1"), "finalize_s"])

    # as if the run had stopped between the profile and its export
    base.with_suffix(".sqlite").unlink()
    before = base.with_suffix(".nsys-rep").stat().st_mtime_ns
    proc = cli(_args(results, f"harness.resume={run}"), env=FAULTY_ENV)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "exporting 1 nsys reports to SQLite" in proc.stderr
    assert base.with_suffix(".sqlite").is_file()
    assert base.with_suffix(".nsys-rep").stat().st_mtime_ns == before  # not profiled again


def test_waiting_for_nsys_in_line_records_no_background_time(cli, tmp_path):
    """One nsys per profiled worker (a traced fork server writes its reports only once its
    session ends), waited for in line."""
    results = tmp_path / "r"
    args = _args(results, "nsys.background_finalize=false", "nsys.profile_server=false")
    proc = cli(args, env=FAULTY_ENV)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = only_run_dir(results)
    timings = pd.read_csv(run / "timings.csv")
    profiles = timings[timings["phase"] == "profile"]
    assert len(profiles) == 2 and (profiles["status"] == "ok").all()
    assert profiles["finalize_s"].isna().all() and (profiles["export_s"] > 0).all()
    assert len(list(run.glob("faulty/*/profile/*.sqlite"))) == 2
    assert not (run / "report.html").exists() and not (run / "report.md").exists()
