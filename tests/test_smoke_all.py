"""Every shipped scenario's smoke size runs all its variants end to end through the harness CLI
(sync_loading, which also checks nsys evidence, has its own test in test_e2e_smoke.py).

The scenarios run in one ``harness run`` (``+scenario=[a,b,...]``), as a user running several
would: one harness start and one fork server instead of one per scenario; each scenario's rows
are then checked on their own."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import scenarios
from tests.conftest import only_run_dir, run_cli, smoke_args

pytestmark = pytest.mark.slow

FOUND = scenarios.discover()
OTHERS = [n for n in sorted(FOUND) if n != "sync_loading"]


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory, cache_dir):
    """(process, run folder) of one smoke-size run of every scenario in OTHERS."""
    results = tmp_path_factory.mktemp("smoke-all")
    proc = run_cli(smoke_args(f"[{','.join(OTHERS)}]", results, f"harness.cache_dir={cache_dir}"))
    return proc, only_run_dir(results)


@pytest.mark.parametrize("name", OTHERS)
def test_smoke_runs_every_variant(name, smoke_run):
    proc, run_dir = smoke_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    every = pd.read_csv(run_dir / "runs.csv")
    assert sorted(set(every["scenario"])) == OTHERS
    runs = every[every["scenario"] == name].set_index("variant")
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
