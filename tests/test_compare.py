"""`harness compare`: the speedup matrix faceted by GPU, from the H100 reference run and a CPU
run folder made by the harness in this session (plus a copy of it relabelled in tmp_path)."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from tests.conftest import REPO, run_cli
from tests.test_report import (
    REFERENCE,
    assert_links_resolve,
    assert_markdown_images,
    shared_sweep,
)


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory, cache_dir):
    s = shared_sweep(tmp_path_factory, cache_dir)
    assert s["proc"].returncode == 0, s["proc"].stderr[-3000:]
    return s["runs"][-1]


def test_compare_h100_with_a_cpu_run(cpu_run, tmp_path):
    out = tmp_path / "cmp"
    proc = run_cli(["compare", str(REFERENCE), str(cpu_run), "--out", str(out)])
    assert proc.returncode == 0, proc.stderr
    for name in ("compare.html", "compare.md", "compare.csv"):
        assert (out / name).is_file(), name
    csv = pd.read_csv(out / "compare.csv")
    assert list(dict.fromkeys(csv["gpu"])) == ["h100 · full", "cpu · smoke"]
    # the numbers are the runs' own: every row of both runs.csv that has a speedup
    for label, folder in (("h100 · full", REFERENCE), ("cpu · smoke", cpu_run)):
        runs = pd.read_csv(folder / "runs.csv")
        mine = csv[csv["gpu"] == label].set_index("variant")
        for r in runs[runs["kind"] != "baseline"].itertuples():
            assert mine.loc[r.variant, "speedup"] == pytest.approx(r.speedup)
            assert mine.loc[r.variant, "ci_low"] == pytest.approx(r.speedup_ci_low)
        assert set(mine["gpu_slug"]) == {
            json.loads((folder / "manifest.json").read_text())["gpu"]["slug"]
        }
    md = (out / "compare.md").read_text()
    assert "| scenario | variant | h100 · full | cpu · smoke |" in md
    assert "| sync_loading | dali | 44.0x [37.9-50.9] | n/a |" in md  # cpu ran no dali
    assert "different sizes" in md and "CPU run" in md
    pngs = {p.stem for p in assert_markdown_images(out / "compare.md")}
    assert pngs == {"compare_matrix", "compare_points"}
    assert_links_resolve(out / "compare.html")


def test_compare_two_gpus_same_size(cpu_run, tmp_path):
    """A copy of the CPU run that says it ran on another GPU: two facets with equal numbers,
    no size caveat; two runs of one GPU are told apart by their folder names."""
    other = tmp_path / "copy"
    shutil.copytree(cpu_run, other, ignore=shutil.ignore_patterns("*.sqlite", "*.nsys-rep"))
    manifest = json.loads((other / "manifest.json").read_text())
    manifest["gpu"]["slug"] = "othergpu"
    (other / "manifest.json").write_text(json.dumps(manifest))
    out = tmp_path / "cmp"
    from harness.report.compare import main

    assert main([str(cpu_run), str(other), "--out", str(out)]) == 0
    csv = pd.read_csv(out / "compare.csv")
    assert set(csv["gpu"]) == {"cpu · smoke", "othergpu · smoke"}
    a = csv[csv["gpu"] == "cpu · smoke"].set_index("variant")["speedup"]
    b = csv[csv["gpu"] == "othergpu · smoke"].set_index("variant")["speedup"]
    pd.testing.assert_series_equal(a, b, check_names=False)
    assert "different sizes" not in (out / "compare.md").read_text()

    twin = tmp_path / "twin"  # the same GPU again
    shutil.copytree(other, twin)
    (twin / "manifest.json").write_text(
        json.dumps({**manifest, "gpu": {**manifest["gpu"], "slug": "cpu"}})
    )
    out2 = tmp_path / "same"
    assert main([str(cpu_run), str(twin), str(other), "--out", str(out2)]) == 0
    labels = list(dict.fromkeys(pd.read_csv(out2 / "compare.csv")["gpu"]))
    assert labels == [f"cpu · smoke · {cpu_run.name}", "cpu · smoke · twin", "othergpu · smoke"]


def test_compare_usage_errors(tmp_path):
    from harness.report.compare import main

    assert main([str(REFERENCE)]) == 2
    assert main([str(REFERENCE), str(tmp_path)]) == 2


def test_compare_says_when_the_software_differs(tmp_path, monkeypatch):
    """The committed H100 and H200 reference runs used the same driver, torch and nsys: no
    caveat. A copy of the H200 run with another torch in its manifest gets one, naming both.
    Without --out the comparison goes to results/ of the working directory, never into the
    tracked reference folders beside the runs."""
    from harness.report.compare import main

    ref = REPO / "results" / "reference"
    before = sorted(p.name for p in ref.iterdir())
    monkeypatch.chdir(tmp_path)
    assert main([str(ref / "h100"), str(ref / "h200")]) == 0
    same = tmp_path / "results" / "compare-h100-vs-h200"
    said = (same / "compare.md").read_text()
    assert not any(f"different {what}" in said for what in ("torch", "driver", "nsys")), said
    assert sorted(p.name for p in ref.iterdir()) == before

    h200 = tmp_path / "h200"
    shutil.copytree(ref / "h200", h200)
    manifest = json.loads((h200 / "manifest.json").read_text())
    manifest["torch"] = "2.99.0"
    (h200 / "manifest.json").write_text(json.dumps(manifest))
    other = tmp_path / "other"
    assert main([str(ref / "h100"), str(h200), "--out", str(other)]) == 0
    text = (other / "compare.md").read_text()
    assert "different torch versions" in text and "2.99.0" in text and "2.11.0" in text
    assert "different driver" not in text and "different nsys" not in text


# --- two runs on the same GPU model: do the speedups repeat, and how far did the host move? -----


def _runs_csv(speedups: dict[str, tuple[float, float, float]], probes: dict[str, tuple]):
    """A runs.csv frame of kernel_flood: each variant's speedup [CI] and host probes."""
    rows = []
    for v, (sp, lo, hi) in speedups.items():
        launch, python = probes.get(v, (None, None))
        rows.append(
            {"scenario": "kernel_flood", "variant": v, "kind": "baseline" if v == "baseline"
             else "fix", "status": "ok", "size": "full", "speedup": sp, "speedup_ci_low": lo,
             "speedup_ci_high": hi, "probe_launch_us": launch, "probe_python_ms": python}
        )  # fmt: skip
    return pd.DataFrame(rows)


RUN_A = _runs_csv(
    {"baseline": (1.0, 0.9, 1.1), "cuda_graphs": (8.85, 8.29, 9.37), "torch_compile": (1.5, 1.4, 1.7)},
    {"baseline": (10.1, 61.0), "cuda_graphs": (10.0, 60.0), "torch_compile": (9.9, 62.0)},
)  # fmt: skip
RUN_B = _runs_csv(
    {"baseline": (1.0, 0.97, 1.03), "cuda_graphs": (5.5, 5.4, 5.62), "torch_compile": (1.6, 1.5, 1.7)},
    {"baseline": (7.2, 44.0), "cuda_graphs": (7.0, 45.0), "torch_compile": (7.1, 43.0)},
)  # fmt: skip


def test_repeat_table_and_the_host_drift_sentence():
    from harness.report.repeat import host_probes, repeat_table

    t = repeat_table(RUN_A, RUN_B).set_index("variant")
    assert list(t.index) == ["cuda_graphs", "torch_compile"]  # fixes only
    cg, tc = t.loc["cuda_graphs"], t.loc["torch_compile"]
    assert (cg["a_in_b"], cg["b_in_a"], cg["repeats"]) == (False, False, False)
    assert (tc["a_in_b"], tc["b_in_a"], tc["repeats"]) == (True, True, True)
    assert cg["base_launch_us_change"] == pytest.approx(7.2 / 10.1 - 1)
    assert cg["fix_python_ms_b"] == 45.0
    assert cg["host_drift"] == (
        "kernel_flood/baseline: launch probe 10.1 -> 7.2 us (-29%), python loop 61 -> 44 ms "
        "(-28%); kernel_flood/cuda_graphs: launch probe 10 -> 7 us (-30%), python loop "
        "60 -> 45 ms (-25%)"
    )
    assert tc["host_drift"] == ""  # it repeats: nothing to explain
    assert host_probes(RUN_A) == {"probe_launch_us": 10.0, "probe_python_ms": 61.0}
    old = RUN_A.drop(columns=["probe_launch_us", "probe_python_ms"])  # a run before the probes
    assert all(v != v for v in host_probes(old).values())
    both_old = repeat_table(old, RUN_B.drop(columns=["probe_launch_us", "probe_python_ms"]))
    assert set(both_old["host_drift"]) == {"no host probes in either run", ""}


def _folder(tmp_path, name: str, runs: pd.DataFrame):
    run = tmp_path / name
    run.mkdir()
    manifest = {"gpu": {"names": ["NVIDIA H200"], "slug": "h200"}, "device": "cuda"}
    (run / "manifest.json").write_text(json.dumps(manifest))
    runs.to_csv(run / "runs.csv", index=False)
    return run


def test_compare_two_runs_of_one_gpu_says_what_repeats(tmp_path):
    from harness.report.compare import main

    a, b = _folder(tmp_path, "a", RUN_A), _folder(tmp_path, "b", RUN_B)
    out = tmp_path / "cmp"
    assert main([str(a), str(b), "--out", str(out)]) == 0
    rep = pd.read_csv(out / "compare_repeat.csv")
    assert set(rep["run_a"]) == {"h200 · full · a"} and set(rep["run_b"]) == {"h200 · full · b"}
    md = (out / "compare.md").read_text()
    assert "## Repeatability: runs on the same GPU model" in md
    assert "| kernel_flood | cuda_graphs | 8.85x [8.29-9.37] | 5.50x [5.40-5.62] | **no** |" in md
    assert "launch probe 10.1 -> 7.2 us (-29%)" in md
    # each run's host probes beside its environment
    assert "| launch µs | Python loop ms |" in md
    assert "| full | 10 | 61 |" in md and "| full | 7.1 | 44 |" in md


def test_the_host_free_table_puts_host_bound_variants_first():
    """A variant whose GPU is busy less than 80% of its step in a run's trace is host-bound,
    and leads the table in every run; the columns are the runs' own."""
    import pandas as pd

    from harness.report.repeat import host_free_table

    runs = {
        "a": pd.DataFrame({"scenario": ["s", "s"], "variant": ["fast", "slow"],
                           "step_ms_mean": [10.0, 40.0], "step_launches": [1000.0, 4000.0],
                           "loop_cpu_launches": [900.0, 3500.0]}),
        "b": pd.DataFrame({"scenario": ["s", "s"], "variant": ["fast", "slow"],
                           "step_ms_mean": [10.1, 30.0], "step_launches": [1010.0, 4020.0],
                           "loop_cpu_launches": [905.0, 3490.0]}),
    }  # fmt: skip
    work = {
        "a": pd.DataFrame({"scenario": ["s", "s"], "variant": ["fast", "slow"],
                           "gpu_busy_ms_per_step": [9.9, 8.0]}),
        "b": None,
    }  # fmt: skip
    table = host_free_table(runs, work)
    assert list(zip(table["variant"], table["run"], strict=True)) == [
        ("slow", "a"),
        ("slow", "b"),
        ("fast", "a"),
        ("fast", "b"),
    ]
    slow_a = table.iloc[0]
    assert slow_a["host_bound"] and slow_a["gpu_busy_ms_per_step"] == 8.0
    assert not table.iloc[2]["host_bound"]  # 9.9 of 10 ms busy
    assert table.iloc[1]["step_launches"] == 4020.0 and pd.isna(
        table.iloc[1]["gpu_busy_ms_per_step"]
    )


def test_a_repeat_writes_each_speedup_as_the_run_reports_do(tmp_path):
    """Two real H200 runs (the 1ee4050 run's tables and the committed reference): each speedup
    of the repeat table reads as the run's own report writes it, from its runs.csv (one
    formatter: '51.3x [45.1-57.3]', never '51.30x [45.10-57.30]')."""
    import tarfile
    from pathlib import Path

    from analysis.plots.numbers import speedup_ci
    from harness.report.compare import main
    from tests.conftest import DATA

    with tarfile.open(DATA / "h200_run_tables.tar.xz") as tar:
        tar.extractall(tmp_path, filter="data")
    a = tmp_path / "h200_run_tables"
    b = Path(shutil.copytree(REPO / "results" / "reference" / "h200", tmp_path / "ref"))
    out = tmp_path / "cmp"
    assert main([str(a), str(b), "--out", str(out)]) == 0
    md = (out / "compare.md").read_text()
    section = md.partition("## Repeatability")[2].partition("\n## ")[0]
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in section.splitlines()
            if line.startswith("| ") and not line.startswith(("| scenario", "| ---"))]  # fmt: skip
    runs = [pd.read_csv(run / "runs.csv").set_index(["scenario", "variant"]) for run in (a, b)]
    assert len(rows) >= 10
    for cells in rows:
        for run, shown in zip(runs, cells[2:4], strict=True):
            r = run.loc[(cells[0], cells[1])]
            assert shown == speedup_ci(r["speedup"], r["speedup_ci_low"], r["speedup_ci_high"])
    assert sum(float(c[2].split("x")[0]) >= 10 for c in rows) >= 2  # where '51.30x' was
