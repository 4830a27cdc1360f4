"""The kernels step over a run folder: it skips with its reason where ncu or a GPU is missing,
and, with stand-ins for ncu and nvidia-smi (this box has no GPU), it plans from real H200
exports, starts one ncu process per variant that needs one with the row's command, reads the
rest from it, writes the tables, brings the witness into diagnosis.csv and verdicts.csv, and
records a failed, timed-out or over-budget variant without stopping the row.

The ncu stand-in never runs the worker: it checks its command line, records it, and writes a
raw page as ncu would for the window: one row per configuration of each kernel its
``--kernel-name`` regex names (the configurations the export launched every step), each a real
row of ncu's from the first H200 run (``FAKE_NCU_PAGE``) under that kernel's name, grid and
block; without a name filter, the page's first ``--launch-count`` rows."""

from __future__ import annotations

import json
import shutil
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from analysis import trace as T
from analysis.gpu_work import gpu_work
from harness.kernels import cli
from harness.kernels.plan import plan_export
from harness.kernels.step import KERNELS_CSV, LIMITS_CSV, RUN_JSON, StepState, run_kernels
from tests import _ncu_dev1
from tests._fixtures import DATA, sqlite_fixture

NCU = DATA / "ncu"

FAKE_NCU = """\
#!{python}
import csv, io, json, os, re, sys, time
argv = sys.argv[1:]
def value(opt):
    return argv[argv.index(opt) + 1] if opt in argv else None
assert value("--clock-control") == "none" and value("--profile-from-start") == "off", argv
assert "--nvtx" not in argv, argv
with open(os.environ["FAKE_NCU_LOG"], "a") as fh:
    fh.write(json.dumps(argv) + "\\n")
if os.environ.get("FAKE_NCU_FAIL"):
    print("==ERROR== the stand-in was told to fail", file=sys.stderr)
    sys.exit(1)
time.sleep(float(os.environ.get("FAKE_NCU_SLEEP", "0")))
quoted = [ln for ln in open(os.environ["FAKE_NCU_PAGE"]).read().splitlines() if ln.startswith('"')]
rows = list(csv.reader(io.StringIO("\\n".join(quoted))))
head, units, body = rows[0], rows[1], rows[2:]
col = {{n: head.index(n) for n in ("ID", "Kernel Name", "Grid Size", "Block Size")}}
configs = json.load(open(os.environ["FAKE_NCU_CONFIGS"]))
name = value("--kernel-name")
out = []
if name:
    pattern = re.compile(name.removeprefix("regex:"))
    wanted = [(n, g, b) for n, cs in configs.items() if pattern.fullmatch(n) for g, b in cs]
    for i, (n, g, b) in enumerate(wanted):
        r = list(body[i % len(body)])
        r[col["ID"]], r[col["Kernel Name"]], r[col["Grid Size"]], r[col["Block Size"]] = (
            str(i), n, g, b)
        out.append(r)
else:
    out = body[: int(value("--launch-count"))]
buf = io.StringIO()
csv.writer(buf, quoting=csv.QUOTE_ALL).writerows([head, units, *out])
with open(value("--log-file"), "w") as fh:
    fh.write("==PROF== stand-in\\n" + buf.getvalue())
"""


def _variant(run: Path, scenario: str, variant: str, kind: str, stem: str) -> None:
    pdir = run / scenario / variant / "profile"
    pdir.mkdir(parents=True)
    shutil.copyfile(sqlite_fixture(stem, NCU), pdir / f"{scenario}__{variant}.sqlite")
    shutil.copyfile(NCU / f"{stem}.spec.json", pdir / "spec.json")
    result = json.loads((NCU / f"{stem}.result.json").read_text())
    (pdir / "result.json").write_text(json.dumps({**result, "variant": variant, "kind": kind}))


UNITS = (
    ("forced_sync", "baseline", "baseline", "host_sync", "h200_forced_sync__baseline"),
    ("forced_sync", "sync_free", "fix", "host_sync", "h200_forced_sync__baseline"),
    ("kernel_flood", "cuda_graphs", "fix", "launch_bound", "h200_kernel_flood__cuda_graphs"),
)


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A run folder of three profiled H200 variants (exports cut from a real run; the fix of
    forced_sync shares its baseline's export, so its kernels are the baseline's), runs.csv and
    the gpu_work.csv analysis.gpu_work makes of them."""
    run = tmp_path / "run"
    rows, runs = [], []
    for scen, var, kind, klass, stem in UNITS:
        _variant(run, scen, var, kind, stem)
        with T.open_trace(run / scen / var / "profile" / f"{scen}__{var}.sqlite") as trace:
            rows.append(gpu_work(trace).assign(scenario=scen, variant=var, step_ms_mean=57.0))
        runs.append({"scenario": scen, "variant": var, "kind": kind, "bottleneck": klass})
    pd.concat(rows).to_csv(run / "gpu_work.csv", index=False)
    pd.DataFrame(runs).to_csv(run / "runs.csv", index=False)
    return run


@pytest.fixture
def fakes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A bin folder with an ncu stand-in and an nvidia-smi that lists one H200, alone on PATH;
    the stand-in's page and the configurations the export launched every step."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ncu").write_text(FAKE_NCU.format(python=sys.executable))
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 'NVIDIA H200, 570.86, 143771, Default'\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("NCU", raising=False)
    monkeypatch.setenv("FAKE_NCU_LOG", str(tmp_path / "ncu-calls.jsonl"))
    dev1 = _ncu_dev1.extract(tmp_path / "ncu")
    monkeypatch.setenv(
        "FAKE_NCU_PAGE", str(dev1 / "ncu" / "sync_checkpoint" / "baseline" / "ncu.csv")
    )
    plan = plan_export(sqlite_fixture("h200_forced_sync__baseline", NCU), top=64)
    steady = plan.kernels[plan.kernels["launches_per_step"] >= 1]
    configs: dict[str, list[list[str]]] = {}
    for r in steady.itertuples():
        configs.setdefault(r.mangled, []).append([r.grid, r.block])
    (tmp_path / "configs.json").write_text(json.dumps(configs))
    monkeypatch.setenv("FAKE_NCU_CONFIGS", str(tmp_path / "configs.json"))
    return bin_dir


def _calls(tmp_path: Path) -> list[list[str]]:
    log = tmp_path / "ncu-calls.jsonl"
    return [json.loads(ln) for ln in log.read_text().splitlines()] if log.exists() else []


def test_skips_without_a_gpu(run_dir: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi
    said: list[str] = []
    result = run_kernels(run_dir, say=said.append)
    assert result.state == StepState.SKIPPED and "GPU" in result.reason
    assert json.loads((run_dir / RUN_JSON).read_text())["reason"] == result.reason
    assert not (run_dir / KERNELS_CSV).exists() and "skipped" in said[0]


def test_skips_without_ncu_and_when_disabled(run_dir: Path, fakes: Path) -> None:
    (fakes / "ncu").unlink()
    missing = run_kernels(run_dir, {"ncu_path": str(fakes / "none")}, say=lambda m: None)
    assert missing.state == StepState.SKIPPED and "no ncu" in missing.reason
    off = run_kernels(run_dir, {"enabled": False}, say=lambda m: None)
    assert off.state == StepState.SKIPPED and off.reason == "kernels.enabled=false"
    assert cli.main([str(run_dir)]) == 0


def test_profiles_the_chosen_kernels_reads_the_rest_and_writes_the_tables(
    run_dir: Path, fakes: Path, tmp_path
) -> None:
    result = run_kernels(run_dir, {"parallel": 2}, say=lambda m: None)
    assert result.state == StepState.DONE
    kernels = pd.read_csv(run_dir / KERNELS_CSV)
    limits = pd.read_csv(run_dir / LIMITS_CSV).set_index("variant")
    base = limits.loc["baseline"]
    mine = kernels[kernels["variant"] == "baseline"]
    assert base["state"] == "ok" and base["selection"] == "heaviest"
    assert mine["planned"].all() and len(mine) == base["launches"] == base["kernels_profiled"] == 4
    assert set(mine["measured_in"]) == {"forced_sync/baseline"} and base["kernels_reused"] == 0
    assert set(mine["family"]) == {"matmul", "elementwise"}
    assert 0 < base["roofline_ms_per_step"] < base["kernel_ms_per_step"]
    # the fix has the baseline's kernels: no ncu run, every row read from the baseline's
    fix = limits.loc["sync_free"]
    theirs = kernels[kernels["variant"] == "sync_free"]
    assert fix["state"] == "ok" and fix["selection"] == "reused" and fix["launches"] == 0
    assert fix["kernels_reused"] == len(theirs) == 4
    assert set(theirs["measured_in"]) == {"forced_sync/baseline"}
    metrics = ["sm_throughput_pct", "memory_throughput_pct", "bound", "pipe"]
    assert theirs[metrics].values.tolist() == mine[metrics].values.tolist()
    # the graph-level variant: its first launches, no per-kernel times, so no limit
    graphs = limits.loc["cuda_graphs"]
    assert graphs["selection"] == "first_launches" and pd.isna(graphs["roofline_ms_per_step"])
    calls = _calls(tmp_path)
    assert len(calls) == 2
    named = next(c for c in calls if "--kernel-name" in c)
    spec = json.loads(Path(named[named.index("--spec") + 1]).read_text())
    unit = run_dir / "forced_sync" / "baseline" / "ncu"
    assert spec["out_dir"] == str(unit) and spec["phase"] == "ncu" and spec["gate"] is False
    assert spec["config"]["full"]["steps"] == 1 and spec["max_warmup_s"] == 0.0
    outcome = json.loads((unit / "outcome.json").read_text())
    assert outcome["state"] == "ok" and outcome["launches"] == 4 and outcome["start_s"] >= 0
    assert not (run_dir / "forced_sync" / "sync_free" / "ncu").exists()
    unnamed = next(c for c in calls if "--kernel-name" not in c)
    assert unnamed[unnamed.index("--filter-mode") + 1] == "global"
    assert unnamed[unnamed.index("--launch-count") + 1] == "4"


def test_the_step_brings_the_witness_into_the_judged_tables(run_dir: Path, fakes: Path) -> None:
    diag = pd.DataFrame([
        {"scenario": s, "variant": v, "kind": k, "truth_state": "fires" if k == "baseline"
         else "clear", "witness": "absent", "witness_reason": "not yet"}
        for s, v, k, _, _ in UNITS
    ])  # fmt: skip
    diag.to_csv(run_dir / "diagnosis.csv", index=False)
    pd.DataFrame([{"scenario": "forced_sync", "bottleneck": "host_sync", "verdict": "confirmed",
                   "reason": "every variant as measured"},
                  {"scenario": "kernel_flood", "bottleneck": "launch_bound",
                   "verdict": "inconclusive", "reason": "no baseline"}]).to_csv(
        run_dir / "verdicts.csv", index=False)  # fmt: skip
    run_kernels(run_dir, say=lambda m: None)
    after = pd.read_csv(run_dir / "diagnosis.csv").set_index("variant")
    assert after.loc["baseline", "witness"] == "unjudged"  # host_sync has no kernel signature
    assert "no kernel-level signature for host_sync" in after.loc["baseline", "witness_reason"]
    assert after.loc["cuda_graphs", "witness"] == "unjudged"  # a launch-bound fix is not held
    verdicts = pd.read_csv(run_dir / "verdicts.csv").set_index("scenario")
    assert verdicts.loc["forced_sync", "verdict"] == "confirmed"
    assert verdicts.loc["forced_sync", "reason"] == "every variant as measured"


def test_a_failed_or_slow_variant_is_recorded_and_the_row_goes_on(
    run_dir: Path, fakes: Path, monkeypatch
) -> None:
    monkeypatch.setenv("FAKE_NCU_FAIL", "1")
    failed = run_kernels(run_dir, say=lambda m: None)
    limits = pd.read_csv(run_dir / LIMITS_CSV).set_index("variant")
    assert failed.state == StepState.DONE
    assert limits.loc[["baseline", "cuda_graphs"], "state"].tolist() == ["failed", "failed"]
    assert limits.loc[["baseline", "cuda_graphs"], "reason"].str.contains("told to fail").all()
    assert limits.loc["sync_free", "state"] == "no_kernels"  # nothing to read from
    assert cli.main([str(run_dir)]) == 1
    monkeypatch.delenv("FAKE_NCU_FAIL")
    monkeypatch.setenv("FAKE_NCU_SLEEP", "120")
    slow = run_kernels(run_dir, {"timeout_s": 0.5, "parallel": 2}, say=lambda m: None)
    ran = slow.limits[slow.limits["selection"] != "reused"]
    assert set(ran["state"]) == {"timeout"} and (ran["wall_s"] < 60).all()


def test_the_budget_leaves_variants_out_before_they_start(
    run_dir: Path, fakes: Path, tmp_path
) -> None:
    result = run_kernels(run_dir, {"budget_s": 1.0}, say=lambda m: None)
    states = result.limits.set_index("variant")["state"]
    assert states[["baseline", "cuda_graphs"]].tolist() == ["over_budget"] * 2
    assert states["sync_free"] == "no_kernels"  # what it would read was never measured
    assert _calls(tmp_path) == []


def test_variants_pick_by_name(run_dir: Path, fakes: Path, tmp_path) -> None:
    result = run_kernels(run_dir, variants=["kernel_flood"], say=lambda m: None)
    assert result.limits["variant"].tolist() == ["cuda_graphs"]
    assert len(_calls(tmp_path)) == 1


def test_probe_scripts_parse(tmp_path: Path) -> None:
    import subprocess

    for name in ("ncu-probe.sh", "ncu-time.sh"):
        script = Path(__file__).resolve().parents[1] / "scripts" / "device" / name
        assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0, name


def _ncu_alive(bin_dir: Path) -> bool:
    """Whether a process of the ncu stand-in in ``bin_dir`` is running."""
    me = str(bin_dir / "ncu").encode()
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and me in (proc / "cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


def _await_calls(tmp_path: Path, n: int) -> None:
    for _ in range(600):
        if len(_calls(tmp_path)) >= n:
            return
        time.sleep(0.1)
    raise AssertionError(f"ncu was not started {n} times")


def test_the_work_beside_runs_while_ncu_runs_and_the_tables_come_after_it(
    run_dir: Path, fakes: Path, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("FAKE_NCU_SLEEP", "1")
    work = run_dir / "gpu_work.csv"
    kept = work.rename(tmp_path / "gpu_work.csv")  # written by the work beside, as the diagnosis
    said: list[str] = []

    def beside() -> None:
        _await_calls(tmp_path, 2)  # both ncu processes started while this runs
        said.append("beside: done")
        kept.rename(work)

    result = run_kernels(run_dir, {"parallel": 2}, say=said.append, meanwhile=beside)
    base = result.limits.set_index("variant").loc["baseline"]
    assert result.state == StepState.DONE and base["state"] == "ok"
    assert 0 < base["roofline_ms_per_step"] < base["kernel_ms_per_step"]
    assert base["gpu_busy_ms_per_step"] > 0  # from the gpu_work.csv the work beside wrote
    # the row's lines wait for the work beside: none breaks into its lines
    assert said.index("beside: done") < min(i for i, m in enumerate(said) if "ncu on" in m)


def test_a_stop_in_the_work_beside_stops_the_ncu_processes(
    run_dir: Path, fakes: Path, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("FAKE_NCU_SLEEP", "120")

    def beside() -> None:
        _await_calls(tmp_path, 1)
        assert _ncu_alive(fakes)
        raise KeyboardInterrupt

    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run_kernels(run_dir, {"parallel": 2}, say=lambda m: None, meanwhile=beside)
    assert not _ncu_alive(fakes) and time.monotonic() - t0 < 60
    assert not (run_dir / KERNELS_CSV).exists()


def test_beside_holds_the_lines_and_raises_the_row_s_own_error() -> None:
    from harness.kernels.launch import beside

    said: list[str] = []
    ran = threading.Event()

    def work(stop: threading.Event, say) -> None:
        say("row")
        ran.set()

    def meanwhile() -> None:
        assert ran.wait(30)
        said.append("beside")

    assert beside(work, meanwhile, said.append) >= 0.0 and said == ["beside", "row"]

    def broken(stop: threading.Event, say) -> None:
        raise ValueError("the row broke")

    done: list[bool] = []
    with pytest.raises(ValueError, match="the row broke"):
        beside(broken, lambda: done.append(True), said.append)
    assert done == [True]  # the work beside ran to its end first
