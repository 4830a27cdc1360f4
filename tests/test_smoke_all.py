"""Every shipped scenario's smoke size runs all its variants end to end through the harness CLI
(sync_loading, which also checks nsys evidence, has its own test in test_e2e_smoke.py)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import scenarios
from tests.conftest import only_run_dir, smoke_args

pytestmark = pytest.mark.slow

FOUND = scenarios.discover()
OTHERS = [n for n in sorted(FOUND) if n != "sync_loading"]


@pytest.mark.parametrize("name", OTHERS)
def test_smoke_runs_every_variant(name, cli, tmp_path, cache_dir):
    proc = cli(smoke_args(name, tmp_path, f"harness.cache_dir={cache_dir}"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = only_run_dir(tmp_path)
    runs = pd.read_csv(run_dir / "runs.csv").set_index("variant")
    scen = FOUND[name]
    assert list(runs.index) == scen.variant_names
    for v in scen.variants:
        expected = "skipped" if v.needs_gpu else "ok"
        assert runs.loc[v.name, "status"] == expected, runs.loc[v.name, "error"]
        if expected == "ok":
            result = json.loads((run_dir / name / v.name / "timing-1" / "result.json").read_text())
            assert len(result["step_ms"]) == result["steps"] > 0
            assert all(ms > 0 for ms in result["step_ms"])
        else:
            assert v.needs_gpu in runs.loc[v.name, "error"]
    assert runs.loc[scen.baseline.name, "speedup"] == pytest.approx(1.0)
