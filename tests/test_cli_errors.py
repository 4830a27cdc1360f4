"""Faults 10 and 11 of the fault matrix (docs/reliability.md): an invalid value and an unknown
scenario are refused by the CLI before anything runs, naming what is wrong. A file of its own so
that pytest-xdist runs it beside test_reliability.py rather than after it."""

from __future__ import annotations

import pytest

import scenarios
from tests.conftest import run_cli
from tests.test_reliability import HANG_S, PLUGIN, _args

pytestmark = pytest.mark.slow


# -- 10/11. invalid config and unknown scenario, from the CLI ----------------------------------
@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("harness.repeats=0", "harness.repeats must be >= 1"),
        ("harness.memory_cap_gb=-1", "harness.memory_cap_gb must be > 0"),
        ("scenario.faulty.smoke.steps=0", "'steps' must be >= 1"),
        ("scenario.faulty.severity=11", "scenario.faulty.severity=11.0 is out of range"),
    ],
)
def test_cli_rejects_invalid_value_before_anything_runs(tmp_path, override, needle):
    results = tmp_path / "results"
    proc = run_cli([*_args(results), override], env=PLUGIN, timeout=HANG_S)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "error: invalid configuration:" in proc.stderr
    assert needle in proc.stderr
    assert not results.exists(), "a rejected config created the results folder"


def test_cli_unknown_scenario_lists_available(tmp_path):
    results = tmp_path / "results"
    proc = run_cli(["run", "+scenario=nope", f"harness.results_dir={results}"], timeout=HANG_S)
    assert proc.returncode == 2
    assert "unknown scenario nope" in proc.stderr
    for name in [*scenarios.shipped_names(), "all"]:
        assert name in proc.stderr
    assert not results.exists()
