"""harness.core.runfolder: the one owner of the run folder's layout, states and reading/writing."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pandas as pd
import pytest

from harness.core import runfolder as rf

REPO = Path(__file__).resolve().parent.parent


def test_unit_paths_and_phase_names(tmp_path):
    unit = rf.Unit("scen", "var", rf.timing_phase(2))
    assert unit.dir(tmp_path) == tmp_path / "scen" / "var" / "timing-2"
    assert unit.label == "scen/var [timing-2]"
    assert not unit.is_profile and rf.is_timing(unit.phase)
    assert rf.phases(2, profiled=True) == ["timing-1", "timing-2", "profile"]
    assert rf.phases(1, profiled=False) == ["timing-1"]
    with pytest.raises(ValueError):
        rf.timing_phase(0)
    prof = rf.Unit("scen", "var", rf.PROFILE)
    assert rf.report_base(tmp_path, prof) == tmp_path / "scen/var/profile/scen__var"
    assert rf.report_base(tmp_path, prof, node_rank=2).name == "scen__var-node2"
    assert rf.node_dir(tmp_path, 0) == tmp_path and rf.node_dir(tmp_path, 3).name == "node3"
    assert rf.lock_name(0) == ".lock" and rf.lock_name(1) == ".lock.node1"


def test_tables_have_fixed_names(tmp_path):
    assert rf.table_path(tmp_path, "runs") == tmp_path / "runs.csv"
    assert rf.table_path(tmp_path, "runs", ".parquet").name == "runs.parquet"
    with pytest.raises(ValueError, match="unknown table"):
        rf.table_path(tmp_path, "nonsense")
    assert rf.state_path(tmp_path).name == "state.json"
    assert rf.manifest_path(tmp_path).name == "manifest.json"
    assert rf.wall_time_path(tmp_path).name == "wall_time.json"


def test_status_values_and_their_meaning():
    assert rf.Status("evidence_failed") is rf.Status.EVIDENCE_FAILED
    assert {s for s in rf.Status if s.finished} == {rf.Status.OK, rf.Status.SKIPPED}
    assert not rf.Status.FINALIZING.is_failure and rf.Status.TIMEOUT.is_failure
    assert rf.RunState("interrupted") is rf.RunState.INTERRUPTED
    assert rf.Status.OK == "ok"  # str enum: compares and serialises as its value


def test_every_status_the_harness_writes_is_in_the_enum():
    """Statuses are written through the enum, never as bare strings."""
    text = "".join(p.read_text() for p in (REPO / "harness").rglob("*.py"))
    members = set(re.findall(r"\bStatus\.([A-Z_]+)\b", text))
    assert members, "the pattern no longer finds the statuses"
    assert members <= set(rf.Status.__members__), members - set(rf.Status.__members__)
    assert not re.findall(r'Outcome\(\s*"[a-z_]+"', text)
    assert not re.findall(r'status="[a-z_]+"', text)


def test_read_json_missing_is_none_corrupt_is_named(tmp_path):
    assert rf.read_json(tmp_path / "absent.json") is None
    bad = tmp_path / "bad.json"
    bad.write_text('{"status": ')
    with pytest.raises(rf.CorruptFileError, match=r"bad\.json"):
        rf.read_json(bad)
    assert isinstance(rf.CorruptFileError("x", "why"), ValueError)
    with pytest.raises(rf.CorruptFileError, match=r"absent\.json: no such file"):
        rf.read_json(tmp_path / "absent.json", required=True)
    (tmp_path / "list.json").write_text("[1]")
    assert rf.read_json(tmp_path / "list.json") == [1]


def test_discovery_and_status(tmp_path):
    ok = rf.Unit("a", "base", "timing-1")
    rf.write_json(ok.dir(tmp_path) / rf.STATUS, {"status": "ok"})
    rf.write_json(ok.dir(tmp_path) / rf.RESULT, {"step_ms": [1.0]})
    broken = rf.Unit("a", "fix", "profile")
    broken.dir(tmp_path).mkdir(parents=True)
    (broken.dir(tmp_path) / rf.STATUS).write_text("{")
    started = rf.Unit("b", "base", "timing-1")
    rf.write_json(started.dir(tmp_path) / rf.SPEC, {})
    (tmp_path / "a" / "base" / "notes").mkdir()  # not a phase folder
    assert rf.discover_units(tmp_path) == [ok, broken, started]
    assert dict(rf.iter_statuses(tmp_path)) == {ok: rf.Status.OK, broken: None, started: None}
    assert rf.result_files(tmp_path) == [ok.dir(tmp_path) / rf.RESULT]
    assert [p.name for p in rf.phase_dirs(tmp_path, "a", "base")] == ["timing-1", "notes"]
    assert rf.phase_dirs(tmp_path, "zz", "none") == []
    assert not rf.has_exports(tmp_path)
    (broken.dir(tmp_path) / "a__fix.sqlite").write_bytes(b"")
    assert rf.has_exports(tmp_path)
    assert rf.profile_file(tmp_path, "a", "fix", ".sqlite").name == "a__fix.sqlite"
    assert rf.profile_file(tmp_path, "a", "base", ".sqlite") is None


def test_atomic_writers_leave_no_temp_files(tmp_path):
    rf.write_text(tmp_path / "t.txt", "hi")
    rf.write_bytes(tmp_path / "b.bin", b"\x00\x01", shared=True)
    rf.write_frame(tmp_path / "f.csv", pd.DataFrame({"x": [1]}))
    rf.write_json(tmp_path / "j.json", {"a": 1})
    assert (tmp_path / "b.bin").read_bytes() == b"\x00\x01"
    mask = os.umask(0)
    os.umask(mask)
    for name in ("t.txt", "b.bin", "f.csv", "j.json"):  # the CSVs too, as report.html: 0644
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o666 & ~mask, name
    assert rf.read_json(tmp_path / "j.json") == {"a": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.bin", "f.csv", "j.json", "t.txt"]


def test_failed_write_names_the_file_and_leaves_nothing(tmp_path):
    target = tmp_path / "ro"
    target.mkdir()
    target.chmod(0o500)
    try:
        if os.access(target, os.W_OK):
            pytest.skip("running as root: a read-only folder is writable")
        with pytest.raises(rf.ResultWriteError, match=r"x\.bin"):
            rf.write_bytes(target / "x.bin", b"1")
    finally:
        target.chmod(0o700)
    assert list(target.iterdir()) == []


def test_atomic_writes_follow_the_umask(tmp_path):
    """A stricter umask gives stricter files (0600 under 077), a looser one looser files."""
    from harness.core import atomic

    old = os.umask(0o077)
    try:
        assert atomic.umask() == 0o077
        rf.write_frame(tmp_path / "private.csv", pd.DataFrame({"x": [1]}))
        os.umask(0o002)
        rf.write_text(tmp_path / "group.txt", "hi")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "private.csv").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "group.txt").stat().st_mode) == 0o664
