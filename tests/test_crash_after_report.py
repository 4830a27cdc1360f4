"""A profiled worker that crashes on its way out, after its result and nsys's report were
written, keeps its evidence; a crash before the result is still a failure."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.core import runfolder as rf
from harness.core.runfolder import Status
from harness.execution.execute import Outcome, crashed_after_report


def _unit(tmp_path: Path, *, result: bool, report: bool) -> tuple[Path, Path]:
    out = tmp_path / "unit"
    out.mkdir()
    base = out / "s__v"
    if result:
        (out / rf.RESULT).write_text("{}")
    if report:
        base.with_suffix(rf.REPORT_SUFFIX).write_bytes(b"report")
    return out, base


def test_crash_after_result_and_report_is_ok_with_the_reason(tmp_path: Path) -> None:
    out, base = _unit(tmp_path, result=True, report=True)
    got = crashed_after_report(Outcome(Status.FAILED, "x", 139, 22.0), out, base, "s/v [profile]")
    assert got.status == Status.OK and got.returncode == 139
    assert "code 139" in got.error and "s__v.nsys-rep" in got.error


@pytest.mark.parametrize(
    ("status", "rc", "result", "report"),
    [
        (Status.FAILED, 139, True, False),  # no report: nothing to use
        (Status.FAILED, 139, False, True),  # no result: the measurement did not finish
        (Status.EVIDENCE_FAILED, None, True, True),  # nsys killed (timeout): no exit code
        (Status.TIMEOUT, 124, True, True),
        (Status.OOM, 1, True, True),
    ],
)
def test_anything_else_is_left_as_it_is(tmp_path, status, rc, result, report) -> None:
    out, base = _unit(tmp_path, result=result, report=report)
    before = Outcome(status, "why", rc, 1.0)
    assert crashed_after_report(before, out, base, "s/v [profile]") == before
