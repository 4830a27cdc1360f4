"""Every shipped scenario's smoke size runs all its variants end to end through the harness CLI
(the scenarios of :data:`OWN_E2E` are checked, by :func:`check_every_variant` too, on the runs
of their own end-to-end modules, which also check their nsys evidence).

The scenarios run in one ``harness run`` (``+scenario=[a,b,...]``), as a user running several
would: one harness start and one fork server instead of one per scenario; each scenario's rows
are then checked on their own."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

import scenarios
from tests.conftest import assert_fits, only_run_dir, run_cli, smoke_args

pytestmark = pytest.mark.slow

FOUND = scenarios.discover()
#: Scenarios whose own end-to-end module (profiled, several rounds, run wherever nsys is) makes
#: the checks of :func:`check_every_variant` on its own run: run here as well they were the
#: same timed units twice (pipeline_imbalance's 2-rank units were a third of this run's CPU).
OWN_E2E = {
    "sync_loading": "tests/test_e2e_smoke.py",
    "pipeline_imbalance": "tests/test_pipeline_e2e.py",
    "gil_contention": "tests/test_gil_e2e.py",
}
#: Without nsys those modules skip, so their scenarios run here (sync_loading's module does not).
OTHERS = [
    n
    for n in sorted(FOUND)
    if n not in OWN_E2E or (n != "sync_loading" and shutil.which("nsys") is None)
]


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
    check_every_variant(run_dir, name)


def check_every_variant(run_dir: Path, name: str) -> None:
    """Every variant of scenario ``name`` in ``run_dir`` ran (or skipped for want of a GPU,
    saying so), each ran round measured every step it counts, and the baseline's speedup is
    1."""
    every = pd.read_csv(run_dir / "runs.csv")
    runs = every[every["scenario"] == name].set_index("variant")
    scen = FOUND[name]
    assert list(runs.index) == scen.variant_names
    for v in scen.variants:
        expected = "skipped" if v.needs_gpu else "ok"
        assert runs.loc[v.name, "status"] == expected, runs.loc[v.name, "error"]
        if expected == "ok":
            rounds = sorted((run_dir / name / v.name).glob("timing-*/result.json"))
            assert rounds, v.name
            for path in rounds:
                result = json.loads(path.read_text())
                assert len(result["step_ms"]) == result["steps"] > 0
                assert all(ms > 0 for ms in result["step_ms"])
        else:
            assert v.needs_gpu in runs.loc[v.name, "error"]
    assert runs.loc[scen.baseline.name, "speedup"] == pytest.approx(1.0)


def test_an_unprofiled_run_says_why_nothing_was_judged_within_100_columns(smoke_run):
    """nsys.enabled=false: no verdicts and no all-zero confusion matrix, but one line saying
    why; every line the run printed fits 100 columns."""
    proc, _ = smoke_run
    why = "verdicts, confusion: nothing judged (no variant has an nsys export: nsys.enabled=false)"
    assert why in proc.stdout.splitlines()
    assert "rows: expected" not in proc.stdout
    assert_fits(proc.stdout)


#: Seconds of slack between two clock readings (smoke windows last a few milliseconds).
CLOCK_SLACK_S = 0.001


def _union(spans: list[tuple[float, float]]) -> float:
    total, reach = 0.0, float("-inf")
    for lo, hi in sorted(spans):
        if hi > reach:
            total += hi - max(lo, reach)
            reach = hi
    return total


def test_batches_set_up_together_and_measure_alone(smoke_run):
    """harness.setup_batch: workers of a scenario started together set up side by side, but no
    warm-up or window ran beside another worker's set-up, warm-up, window or tear-down: beside
    it another worker was at most waiting at its gate (set up, held). A sliced round's
    processes (harness.timing.slices) are that batch: they set up together, and beside their
    measured spans only the round's own processes were alive, none of their slices overlapping
    (harness.execution.slicecost.check_run)."""
    from harness.execution.slicecost import check_run

    _, run_dir = smoke_run
    timings = pd.read_csv(run_dir / "timings.csv")
    timings = timings[timings["status"] == "ok"]
    spans = []
    for row in timings.itertuples():
        folder = run_dir / row.scenario / row.variant / row.phase
        result = json.loads((folder / "result.json").read_text())
        timing, group = result["timing"], (row.scenario, row.phase) if "slices" in result else None
        spans.append(
            (row.launched_at, timing["setup_ended_at"], timing["warmup_started_at"],
             timing["window_ended_at"], row.ended_at, f"{row.scenario}/{row.variant}/{row.phase}",
             group)
        )  # fmt: skip
    together = 0
    for launched, gate, start, end, ended, name, group in spans:
        assert launched <= gate + CLOCK_SLACK_S and start <= end <= ended, name
        for o_launched, o_gate, o_start, _, o_ended, other, o_group in spans:
            if other == name:
                continue
            if group is not None and o_group == group:  # its round: set up beside it
                together += min(gate, o_gate) - max(launched, o_launched) > 0
                continue
            busy = [(o_launched, o_gate), (o_start, o_ended)]  # all but its wait at the gate
            for lo, hi in busy:
                assert min(end, hi) - max(start, lo) <= CLOCK_SLACK_S, (name, other, lo, hi)
            together += min(end, o_start) - max(start, o_gate) > 0
    assert together > 0  # batches did run
    assert check_run(run_dir)["overlaps"] == []
    wall = json.loads((run_dir / "wall_time.json").read_text())
    assert wall["settings"]["setup_batch"] == 4  # the default, recorded
    measured = _union([(start, end) for _, _, start, end, _, _, _ in spans])
    assert wall["measuring_s"] == pytest.approx(measured, abs=1e-6)
    first = min(start for _, _, start, _, _, _, _ in spans)
    last = max(end for _, _, _, end, _, _, _ in spans)
    assert wall["between_measurements_s"] == pytest.approx(last - first - measured, abs=1e-6)
