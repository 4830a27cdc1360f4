"""``harness.resume=DIR`` alone: the run's own command line from its manifest
(harness.core.resume), on manifests written here. The resume of a real interrupted run is in
test_interrupts.py."""

from __future__ import annotations

import json

import pytest

from harness.core.config import UsageError
from harness.core.resume import resume_argv

FOUND = ["gil_contention", "kernel_flood", "sync_loading"]


def _run_dir(tmp_path, overrides=None, **config):
    manifest = {
        "size": "smoke",
        "scenarios": {"kernel_flood": {}},
        "config": {"size": "auto", "harness": {"repeats": 2, "progress": True}, **config},
    }
    if overrides is not None:
        manifest["overrides"] = overrides
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    return tmp_path


def test_the_runs_own_overrides_and_scenarios_come_back(tmp_path):
    run = _run_dir(tmp_path, ["+scenario=kernel_flood", "harness.repeats=2"])
    assert resume_argv([f"harness.resume={run}"], FOUND) == [
        "harness.repeats=2",
        "+scenario=[kernel_flood]",
        f"harness.resume={run}",
    ]


def test_given_overrides_may_only_add(tmp_path):
    run = _run_dir(tmp_path, ["+scenario=kernel_flood", "harness.repeats=2"])
    more = resume_argv(
        [
            f"harness.resume={run}",
            "+scenario=[sync_loading]",
            "size=smoke",
            "harness.progress=false",
        ],
        FOUND,
    )  # size=smoke is what size=auto resolved to when the run started
    assert "+scenario=[kernel_flood,sync_loading]" in more and "size=smoke" in more
    with pytest.raises(
        UsageError, match=r"harness.repeats=3 conflicts with the run's harness.repeats=2"
    ):
        resume_argv([f"harness.resume={run}", "harness.repeats=3"], FOUND)


def test_an_older_run_folder_resumes_with_its_recorded_scenarios(tmp_path):
    run = _run_dir(tmp_path)  # no "overrides": made before they were recorded
    assert resume_argv([f"harness.resume={run}"], FOUND) == [
        "+scenario=[kernel_flood]",
        f"harness.resume={run}",
    ]
    with pytest.raises(UsageError):
        resume_argv([f"harness.resume={run}", "harness.repeats=5"], FOUND)


def test_no_resume_leaves_the_command_line_no_run_folder_is_refused(tmp_path):
    """Without harness.resume nothing changes; a resume of a folder that is no run, or whose
    manifest is corrupt, is refused in one line before anything else is said."""
    argv = ["+scenario=all", "harness.repeats=3"]
    assert resume_argv(argv, FOUND) == argv
    with pytest.raises(UsageError, match="nothing: not a run folder"):
        resume_argv([f"harness.resume={tmp_path / 'nothing'}"], FOUND)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "manifest.json").write_text("{")
    with pytest.raises(UsageError, match=r"manifest\.json: not valid JSON"):
        resume_argv([f"harness.resume={tmp_path / 'bad'}"], FOUND)
