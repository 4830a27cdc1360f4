"""The PyTorch Profiler's run of every variant (``kineto.enabled=true``) end to end on the CPU:
one smoke run of forced_sync without nsys, whose Kineto traces are checked as Kineto JSON (the
measured steps inside, distributedInfo), whose probe effect and wall cost reach the tables,
and which ``harness score RUN --tool hta`` and the run's own tools step read.

CPU cost (2-core box, 2026-11-29, three variants then): the run took 7-9 s of wall in all, of which the three
Kineto processes 4.6 s of worker wall (1.5 s of it writing the traces, ``kineto_write_s``),
against 1.4 s for the three timing processes.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest

from bottlenecks import CLASSES
from harness.core import runfolder as rf
from scenarios.forced_sync import SCENARIO
from tests.conftest import only_run_dir, run_cli, smoke_args

VARIANTS = tuple(SCENARIO.variant_names)
#: kineto.max_steps for the run: fewer than the timing units measure, so the cap shows.
MAX_STEPS = 3


@pytest.fixture(scope="module")
def kineto_run(tmp_path_factory) -> tuple[object, Path]:
    results = tmp_path_factory.mktemp("results")
    proc = run_cli(
        smoke_args("forced_sync", results, "kineto.enabled=true", f"kineto.max_steps={MAX_STEPS}")
    )
    return proc, only_run_dir(results)


def _trace(run_dir: Path, variant: str) -> dict:
    paths = rf.kineto_traces(run_dir, "forced_sync", variant)
    assert [p.name for p in paths] == [f"forced_sync__{variant}-rank0{rf.KINETO_SUFFIX}"]
    with gzip.open(paths[0], "rt") as fh:
        return json.load(fh)


def test_every_variant_has_a_kineto_trace_of_its_window(kineto_run):
    proc, run_dir = kineto_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    for v in VARIANTS:
        trace = _trace(run_dir, v)
        assert trace["distributedInfo"]["rank"] == 0
        events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
        iters = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
        steps = [e for e in events if e.get("name") == "step"]
        measure = [e for e in events if e.get("name") == "measure"]
        result = rf.read_result(rf.kineto_dir(run_dir, "forced_sync", v))
        assert result is not None and result["phase"] == rf.KINETO
        # the lead step is the profiler's warm-up: left out, so one range per measured step
        assert len(iters) == len(steps) == result["steps"] == len(result["step_ms"])
        timed = rf.read_result(rf.unit_dir(run_dir, "forced_sync", v, "timing-1"))
        assert result["steps"] == MAX_STEPS < timed["steps"]  # kineto.max_steps caps the window
        assert len(measure) == 1
        lo, hi = measure[0]["ts"], measure[0]["ts"] + measure[0]["dur"]
        assert all(lo <= s["ts"] and s["ts"] + s["dur"] <= hi for s in steps)


def test_probe_effect_and_wall_cost_reach_the_tables(kineto_run):
    _, run_dir = kineto_run
    runs = pd.read_csv(rf.table_path(run_dir, "runs")).set_index("variant")
    for v in VARIANTS:
        timed = rf.read_result(run_dir / "forced_sync" / v / rf.timing_phase(1))
        kin = rf.read_result(rf.kineto_dir(run_dir, "forced_sync", v))
        mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
        row = runs.loc[v]
        assert row["kineto_traces"] == 1
        assert row["kineto_step_ms_mean"] == pytest.approx(mean(kin["step_ms"]))
        want = mean(kin["step_ms"]) / mean(timed["step_ms"])
        assert row["kineto_probe_effect"] == pytest.approx(want, rel=1e-6)
        assert row["kineto_probe_effect_ci_low"] <= want <= row["kineto_probe_effect_ci_high"]
        assert pd.isna(row["probe_effect"])  # no nsys profile in this run
    timings = pd.read_csv(rf.table_path(run_dir, "timings"))
    kin = timings[timings["phase"] == rf.KINETO]
    assert sorted(kin["variant"]) == sorted(VARIANTS)
    assert (kin["kineto_write_s"] > 0).all() and (kin["kineto_start_s"] > 0).all()
    assert timings.loc[timings["phase"] != rf.KINETO, "kineto_write_s"].isna().all()
    wall = json.loads(rf.wall_time_path(run_dir).read_text())
    by_kind = wall["worker_parts_by_phase_s"]
    assert by_kind["kineto"]["processes"] == by_kind["timing"]["processes"] == len(VARIANTS)
    assert by_kind["kineto"]["kineto_write_s"] == pytest.approx(kin["kineto_write_s"].sum())
    manifest = json.loads(rf.manifest_path(run_dir).read_text())
    assert manifest["config"]["kineto"]["enabled"] is True
    assert manifest["config"]["tools"]["run"]


def test_the_runs_tools_step_and_report(kineto_run):
    """Without nsys only the Kineto readers have input: every other tool is n/a with why."""
    _, run_dir = kineto_run
    calls = pd.read_csv(rf.table_path(run_dir, "tools_calls"), keep_default_na=False)
    assert set(calls["report"]) == {f"forced_sync/{v}" for v in VARIANTS}
    ours = calls[calls["tool"] == "ours"]
    assert (ours["flag"] == "n/a").all() and (ours["evidence"] == "no nsys export").all()
    assert rf.table_path(run_dir, "tools_scores").is_file()
    assert rf.table_path(run_dir, "tools_f1").is_file()
    report = (run_dir / "report.md").read_text()
    assert "## Tools against the ground truth" in report
    assert (run_dir / "report" / "tools_f1.png").is_file()


def test_harness_score_reads_the_traces_with_hta(kineto_run, tmp_path):
    pytest.importorskip("hta.trace_analysis")
    from harness.tools.hta import NO_GPU, hta_numbers

    _, run_dir = kineto_run
    n = hta_numbers(rf.kineto_traces(run_dir, "forced_sync", "baseline"))
    assert n.rank_ids == [0] and n.profiler_steps > 0 and n.gpu_kernels == 0
    out = tmp_path / "score"
    proc = run_cli(["score", str(run_dir), "--tool", "hta", "--out", str(out)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "no nsys export (a Kineto-only run)" in proc.stdout
    calls = pd.read_csv(out / "tools_calls.csv", keep_default_na=False)
    hta = calls[calls["tool"] == "hta"]
    assert len(hta) == len(VARIANTS) * len(CLASSES)
    # read, found no GPU kernels (a CPU trace): n/a for that reason, not for a missing trace
    assert (hta["flag"] == "n/a").all() and (hta["evidence"] == NO_GPU).all()


def test_kineto_units_follow_the_profiles_and_measure_the_profiled_window():
    from harness.core.config import compose
    from harness.execution.plan import plan_units

    names = ["forced_sync", "gil_contention"]
    suite = compose(["+scenario=[forced_sync,gil_contention]", "kineto.enabled=true"])[1]
    variants = {n: ["a", "b"] for n in names}
    units = plan_units(suite, names, variants, profiled=True, kineto=suite.kineto.enabled)
    phases = [u.phase for u in units]
    last_profile = max(i for i, p in enumerate(phases) if p == rf.PROFILE)
    first_kineto = phases.index(rf.KINETO)
    assert first_kineto == last_profile + 1  # nsys and the PyTorch Profiler never share one
    assert [(u.scenario, u.variant) for u in units[first_kineto:]] == [
        (n, v) for n in names for v in variants[n]
    ]
    assert plan_units(suite, names, variants, profiled=True)[-1].phase == rf.PROFILE
    h = suite.harness
    assert h.window_budget_s(rf.KINETO) == h.window_budget_s(rf.PROFILE) != h.max_window_s
    with pytest.raises(ValueError, match=r"kineto\.lead_steps"):
        compose(["+scenario=forced_sync", "kineto.lead_steps=-1"])
