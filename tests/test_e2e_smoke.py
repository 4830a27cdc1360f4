"""End to end through the real CLI: sync_loading at smoke size, profiled under real nsys."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from analysis.findings import CLASSES
from analysis.trace import nvtx_ranges, open_trace, step_ranges
from tests._rounds import saving_from_files
from tests.conftest import assert_fits, only_run_dir

pytestmark = pytest.mark.slow

VARIANTS = ["baseline", "async_dataloader", "dali", "ideal"]
#: Measured steps per worker: fewer than the smoke size's 12 (each ~0.3 s of CPU, 12 workers),
#: the fewest a window cut by a budget keeps (harness.min_steps); the warm-up is the fewest that
#: still warms (2).
STEPS = 5


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory, cache_dir):
    from tests.conftest import run_cli

    results = tmp_path_factory.mktemp("results")
    proc = run_cli(
        [
            "run",
            "+scenario=sync_loading",
            "size=smoke",
            "harness.repeats=2",
            f"scenario.sync_loading.smoke.steps={STEPS}",
            "scenario.sync_loading.smoke.warmup_steps=2",
            # no window budgets: under load (a 2-core box running two test workers) the 3 s
            # profiled budget cut the window to 11 of the 12 steps these tests count on;
            # the budgets are tested in test_window.py
            "harness.max_window_s=null",
            "harness.profile_max_window_s=null",
            f"harness.results_dir={results}",
            f"harness.cache_dir={cache_dir}",
            "harness.progress=false",
            # no report: these tests read none; a profiled sync_loading run's report is
            # tests/test_report.py's (its shared sweep)
            "harness.report=false",
        ]
    )
    return proc, only_run_dir(results)


def test_exit_code_and_summary(smoke_run):
    proc, run_dir = smoke_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (
        "No NVIDIA GPU found" in proc.stderr
        or "nvidia"
        in json.loads((run_dir / "manifest.json").read_text())["gpu"]["names"][0].lower()
    )
    for v in VARIANTS:
        assert v in proc.stdout


def test_the_console_fits_100_columns(smoke_run):
    """Every line `harness run` prints, the verdicts, the confusion matrix and the cross-check
    with nsys's rules among them, fits a terminal 100 columns wide."""
    proc, _ = smoke_run
    assert "confusion (rows: expected" in proc.stdout or "confusion: nothing judged" in proc.stdout
    assert_fits(proc.stdout)


def test_run_folder_layout(smoke_run):
    _, run_dir = smoke_run
    manifest = json.loads((run_dir / "manifest.json").read_text())
    for key in ("gpu", "nsys", "torch", "python", "git_sha", "host", "config", "worker_env"):
        assert key in manifest, key
    assert manifest["config"]["scenario"]["sync_loading"]["severity"] == 500
    assert json.loads((run_dir / "state.json").read_text())["state"] == "complete"
    csv = pd.read_csv(run_dir / "runs.csv")
    parquet = pd.read_parquet(run_dir / "runs.parquet")
    assert list(csv["variant"]) == VARIANTS == list(parquet["variant"])
    assert (csv["status"] == "ok").all(), csv[["variant", "error"]]
    assert (csv["n_steps"] == 2 * STEPS).all()
    for col in ("step_ms_median", "step_ms_p10", "step_ms_p90", "throughput_samples_per_s"):
        assert (csv[col] > 0).all(), col
    assert (csv["step_ms_p10"] <= csv["step_ms_median"]).all()
    assert (csv["step_ms_median"] <= csv["step_ms_p90"]).all()
    base = csv.set_index("variant").loc["baseline"]
    assert base["speedup"] == pytest.approx(1.0)
    ideal = csv.set_index("variant").loc["ideal"]
    assert ideal["share_of_ideal"] == pytest.approx(1.0)


def test_every_variant_is_timed_against_the_baseline(smoke_run):
    """Step times and speedups exist for every variant. Which is faster on a 2-core box shared
    with other work is not asserted: speedups are claims for the GPU benchmarks, where the
    committed reference runs measure them (a CPU timing assertion fails under load)."""
    _, run_dir = smoke_run
    csv = pd.read_csv(run_dir / "runs.csv").set_index("variant")
    assert (csv.loc[VARIANTS, "step_ms_mean"] > 0).all()
    assert csv.loc["baseline", "speedup"] == 1.0
    assert (csv.loc[VARIANTS, "speedup_ci_low"] <= csv.loc[VARIANTS, "speedup"]).all()
    # paired within both rounds; every worker probed the host around its window
    assert (csv.loc[VARIANTS, "paired_rounds"] == 2).all()
    for col in ("probe_launch_us", "probe_python_ms", "step_launches", "round_spread"):
        assert (csv.loc[VARIANTS, col] > 0).all(), col


@pytest.mark.skipif(shutil.which("nsys") is None, reason="nsys not installed")
def test_profiled_with_real_exports(smoke_run):
    _, run_dir = smoke_run
    csv = pd.read_csv(run_dir / "runs.csv").set_index("variant")
    assert csv["profiled"].all()
    assert csv["probe_effect"].notna().all()
    for v in VARIANTS:
        prof = run_dir / "sync_loading" / v / "profile"
        rep = prof / f"sync_loading__{v}.nsys-rep"
        db = prof / f"sync_loading__{v}.sqlite"
        assert rep.is_file() and rep.stat().st_size > 0
        result = json.loads((prof / "result.json").read_text())
        probes = result["host_probe"]
        assert all(
            probes[w][k] > 0 for w in ("before", "after") for k in ("launch_us", "python_ms")
        )
        assert csv.loc[v, "profile_probe_launch_us"] > 0
        with open_trace(db) as trace:
            steps = step_ranges(trace)
            ranges = nvtx_ranges(trace)
        # the capture is the measured window (its scenario's traced fork server captures each
        # worker's 'measure' range, nsys.profile_server): the measured steps, no warm-up
        window = ranges[ranges["text"] == "measure"]
        assert len(window) == 1
        w0, w1 = window["start_ns"].iloc[0], window["end_ns"].iloc[0]
        inside = steps[(steps["start_ns"] >= w0) & (steps["end_ns"] <= w1)]
        assert len(inside) == result["steps"] == STEPS
        assert len(steps) == len(inside) and result["warmup_steps"] > 0
        if v == "baseline":
            loads = ranges[(ranges["text"] == "data_load")]
            assert len(loads) == result["steps"]


@pytest.mark.skipif(shutil.which("nsys") is None, reason="nsys not installed")
def test_diagnose_exports_a_real_nsys_rep(smoke_run, cli):
    """`harness diagnose` on a .nsys-rep: exported with the nsys found, then diagnosed."""
    _, run_dir = smoke_run
    rep = run_dir / "sync_loading/baseline/profile/sync_loading__baseline.nsys-rep"
    proc = cli(["diagnose", "--format", "json", str(rep)])
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["report"] == str(rep)
    assert out["primary"] == "data_stall"  # the NVTX path: data_load dominates the CPU step


def test_ground_truth_tables(smoke_run):
    """diagnosis.csv, verdicts.csv and the confusion matrix, from the run's own exports and
    timing rounds.

    The truth is measured: each variant's saving from removing the cause (ideal's steps over
    its own, paired within rounds), derived here from the result files, against data_stall's
    bar. CPU timings on 2 shared cores move, so which state each fix lands in is not asserted;
    that the judge reports the measurement, and that every judgement follows from the truth
    and the findings, is."""
    proc, run_dir = smoke_run
    diag = pd.read_csv(run_dir / "diagnosis.csv").set_index("variant")
    assert list(diag.index) == VARIANTS
    assert diag.loc["baseline", "expected_role"] == "bottleneck"
    assert diag.loc["baseline", "primary"] == "data_stall"
    assert diag.loc["ideal", "truth_state"] == "clear"  # the removal itself saves nothing
    assert diag.loc["ideal", "measured_saving"] == 0.0
    for variant in VARIANTS:
        row = diag.loc[variant]
        assert row["bar"] == 0.15 and row["measured_by"] == "ideal"
        want = saving_from_files(run_dir, "sync_loading", variant, "ideal")
        assert row["measured_saving"] == pytest.approx(want, abs=1e-9)
        low, high = row["measured_saving_ci_low"], row["measured_saving_ci_high"]
        assert low <= row["measured_saving"] <= high
        state = "fires" if low >= 0.15 else "clear" if high < 0.15 else "either"
        if state == "clear" and variant == "baseline":
            state = "not_taken"
        extra = row["extra_runqueue_wait_share"]
        assert pd.isna(row["extra_loop_cpu_share"])  # data_stall may be the loop's own CPU work
        if state == "fires" and pd.notna(extra) and extra >= 0.5 * row["measured_saving"] > 0:
            # a loaded box: the fix's loop waited for a core (its DataLoader workers compete
            # for the 2 cores); without that wait the saving's low end is below the bar
            keep = 1 - min(extra, 0.999)
            if 1 - (1 - low) / keep < 0.15:
                state = "oversubscribed"
        assert row["truth_state"] == state, row
        if state in ("fires", "clear") and row["data_stall_state"] != "not_judged":
            fp = any(diag.loc[variant, f"{k}_off_target"] == "false_positive" for k in CLASSES)
            own = (row["data_stall_state"] == "fired") == (state == "fires")
            assert bool(row["match"]) is (own and not fp), row
        else:
            assert pd.isna(row["match"])
    verdict = pd.read_csv(run_dir / "verdicts.csv").set_index("scenario").loc["sync_loading"]
    if (diag["match"] == False).any():  # noqa: E712 - a nullable column
        assert verdict["verdict"] == "refuted", verdict
    else:
        assert verdict["verdict"] in ("confirmed", "inconclusive"), verdict
    assert verdict["truth_fires"] == int((diag["truth_state"] == "fires").sum())
    matrix = pd.read_csv(run_dir / "confusion.csv").set_index("expected")
    # rows count the decided truths whose class could be judged
    counted = diag["match"].notna()
    assert int(matrix.to_numpy().sum()) == int(counted.sum())
    assert int(matrix.loc["none"].sum()) == int((counted & (diag["expected"] == "none")).sum())
    assert "verdicts:" in proc.stdout


def _measured_spans(run_dir, timings) -> list[tuple[int, float, float, dict]]:
    """Each worker's measured span (its warm-up's start to its window's end, its own clock)
    after checking it lies inside its launch-to-end span (the parent's clock)."""
    spans = []
    for row in timings.itertuples():
        result = json.loads((run_dir / row.scenario / row.variant / row.phase / "result.json")
                            .read_text())  # fmt: skip
        timing = result["timing"]
        assert row.launched_at <= timing["warmup_started_at"] <= timing["window_ended_at"]
        assert timing["window_ended_at"] <= row.ended_at
        spans.append((row.Index, timing["warmup_started_at"], timing["window_ended_at"], result))
    return spans


def test_no_worker_measures_beside_another(smoke_run):
    """The run loop starts a worker while the previous one tears down (harness.overlap), but
    no measurement runs beside another worker's. A profile's warm-up and window ran while no
    other worker process was alive: its measured span lies outside every other worker's
    launch-to-end span. A sliced timing round's processes are alive together, held: only the
    round's own processes were alive during its measured spans, and no two of their slices
    (each process's monotonic clock, one clock for the machine) overlap."""
    _, run_dir = smoke_run
    timings = pd.read_csv(run_dir / "timings.csv")
    assert timings[["launched_at", "ended_at"]].notna().all().all()
    slices = []
    for i, lo, hi, result in _measured_spans(run_dir, timings):
        others = timings.drop(index=i)
        beside = others[(others["launched_at"] < hi) & (others["ended_at"] > lo)]
        if "slices" not in result:
            assert beside.empty, (timings.loc[i, ["variant", "phase"]].tolist(), beside)
            continue
        assert (beside["phase"] == timings.loc[i, "phase"]).all(), beside  # its round only
        cut = result["slices"]
        assert sum(cut["steps"]) == result["steps"] == len(result["step_ms"])
        slices += [(a, b, i) for a, b in zip(cut["start_s"], cut["end_s"], strict=True)]
    # sync_loading declines slicing (Scenario.slice_rounds): its rounds ran back to back, each
    # span alone; sliced rounds are checked the same way on every scenario in test_smoke_all.py
    timed = timings[timings["phase"].astype(str).str.startswith("timing")]
    assert len(timed) >= 2 and not slices, slices
    wall = json.loads((run_dir / "wall_time.json").read_text())
    assert wall["settings"]["overlap"] is True
    assert wall["workers_overlap_s"] >= 0.0
    assert wall["all_calls_s"] == pytest.approx(wall["total_s"])  # one call


def test_each_worker_collects_and_freezes_its_set_up_heap_before_measuring(smoke_run):
    """A full collection of the import and set-up heap (0.2-0.4 s) must not fall in a window:
    every measuring worker collected and froze it at the end of its set-up, so its result says
    how many objects it froze (a torch process holds well over 10,000) and how long it took."""
    _, run_dir = smoke_run
    timings = pd.read_csv(run_dir / "timings.csv")
    seen = 0
    for _, _, _, result in _measured_spans(run_dir, timings):
        timing = result["timing"]
        assert timing["heap_frozen_objects"] > 10_000, timing
        assert timing["settle_s"] >= 0, timing
        seen += 1
    assert seen == len(timings)
