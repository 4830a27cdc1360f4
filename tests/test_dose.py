"""Dose-response: a real `harness run -m` severity sweep (smoke size, under nsys) gathered into
a sweep report, and the plot's pieces on their own."""

from __future__ import annotations

import json
import math
import re
import shutil

import matplotlib

matplotlib.use("Agg")

import pandas as pd
import pytest

from analysis.plots.dose import firing_onset, plot_dose
from tests.conftest import run_cli
from tests.test_report import (
    SCENARIO,
    SEVERITIES,
    assert_links_resolve,
    assert_markdown_images,
    png_pixels,
    shared_sweep,
)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory, cache_dir):
    """The shared sweep; its exports, diagnosis and timelines need nsys."""
    if shutil.which("nsys") is None:
        pytest.skip("nsys not installed (scripts/install-nsys-cpu.sh)")
    s = shared_sweep(tmp_path_factory, cache_dir)
    assert s["proc"].returncode == 0, s["proc"].stderr[-3000:]
    assert s["sweep"] is not None, "no multirun folder"
    return s


def _baseline_fired(run) -> bool:
    diag = pd.read_csv(run / "diagnosis.csv").set_index("variant")
    if "data_stall_state" in diag:
        return diag.loc["baseline", "data_stall_state"] == "fired"
    return bool(diag.loc["baseline", "data_stall_fired"])


def test_each_job_names_its_run_folder(sweep):
    markers = sorted(sweep["sweep"].glob("*/harness-run.json"))
    assert len(markers) == len(SEVERITIES)
    named = set()
    for m in markers:
        data = json.loads(m.read_text())
        (entry,) = data["runs"]
        assert (m.parent / entry["relative"]).resolve() == (m.parent / entry["absolute"]).resolve()
        assert any(o.startswith(f"scenario.{SCENARIO}.severity=") for o in data["overrides"])
        named.add((m.parent / entry["relative"]).resolve())
    assert named == {p.resolve() for p in sweep["runs"]}


def test_sweep_report_written_by_the_multirun(sweep):
    folder = sweep["sweep"]
    assert f"sweep report: {folder / 'report.html'}" in sweep["proc"].stderr
    page = assert_links_resolve(folder / "report.html")
    # each run is linked through its own report
    for run in sweep["runs"]:
        assert any(h.endswith(f"{run.name}/report.html") for h in page.hrefs), run.name
    (png,) = [p for p in assert_markdown_images(folder / "report.md") if p.stem.startswith("dose_")]
    assert png.stem == f"dose_{SCENARIO}_cpu_smoke"
    px = png_pixels(png.read_bytes())
    assert px.shape[0] > 500 and px.shape[1] > 800


def test_dose_table_matches_each_runs_files(sweep):
    md = (sweep["sweep"] / "report.md").read_text()
    rows = [r for r in md.splitlines() if re.match(r"^\| \d", r)]
    by = {}
    for r in rows:
        cells = [c.strip() for c in r.strip("|").split("|")]
        by[(float(cells[0]), cells[2])] = cells
    for sev, run in zip(SEVERITIES, sweep["runs"], strict=True):
        runs = pd.read_csv(run / "runs.csv").set_index("variant")
        assert runs["severity"].iloc[0] == sev
        base = by[(sev, "baseline")]
        ideal = by[(sev, "ideal")]
        assert base[1] == run.name and base[5] == "1 (reference)"
        assert ideal[5].startswith(f"{runs.loc['ideal', 'speedup']:.2f}x")
        # the detector's metric comes from the export; fired from diagnosis.csv
        share = float(base[6].rstrip("%")) / 100
        assert 0 <= share <= 1
        fired = _baseline_fired(run)
        assert base[7] == ("**fired**" if fired else "clear")  # the detector table's word
        diag = pd.read_csv(run / "diagnosis.csv").set_index("variant")
        reason = diag.loc["baseline", "data_stall_reason"]
        assert f"{share:.1%}" in reason  # the same number the detector gave in its reason


def test_onset_sentence_agrees_with_diagnosis(sweep):
    fired = [_baseline_fired(run) for run in sweep["runs"]]
    onset = firing_onset(pd.Series(SEVERITIES), pd.Series(fired))
    md = (sweep["sweep"] / "report.md").read_text()
    if onset is None:
        assert "does not fire on the baseline at every severity" in md
    else:
        assert f"fires on the baseline from severity {onset:g} px" in md


def test_report_of_run_folders_given_one_by_one(sweep, tmp_path):
    out = tmp_path / "dose"
    proc = run_cli(["report", *map(str, sweep["runs"]), "--out", str(out)])
    assert proc.returncode == 0, proc.stderr
    md = (out / "report.md").read_text()
    assert f"{SCENARIO} on cpu (smoke): {len(SEVERITIES)} severities" in md
    assert_links_resolve(out / "report.html")


def test_results_folder_is_a_sweep_too(sweep, tmp_path):
    """`harness report RESULTS_DIR`: every run folder under it (two levels down)."""
    from harness.report import find_run_folders

    found = find_run_folders(sweep["results"])
    assert {p.resolve() for p in found} == {p.resolve() for p in sweep["runs"]}
    assert {p.resolve() for p in find_run_folders(sweep["sweep"])} == set(found)


# --- the plot's parts -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fired", "onset"),
    [
        ([False, False, True, True], 4.0),
        ([True, True, True, True], 1.0),
        ([False, True, False, True], 8.0),
        ([False, False, False, False], None),
        ([True, True, True, False], None),
    ],
)
def test_firing_onset(fired, onset):
    assert firing_onset(pd.Series([1, 2, 4, 8]), pd.Series(fired)) == onset


def test_onset_ignores_unjudged_points():
    sev = pd.Series([1, 2, 4])
    assert firing_onset(sev, pd.Series([pd.NA, True, True], dtype=object)) == 2.0
    assert firing_onset(sev, pd.Series([pd.NA] * 3, dtype=object)) is None


def test_plot_without_metric_says_why(tmp_path):
    speed = pd.DataFrame(
        {
            "severity": [1.0, 8.0, 1.0, 8.0],
            "variant": ["baseline", "baseline", "fix", "fix"],
            "kind": ["baseline", "baseline", "fix", "fix"],
            "speedup": [1.0, 1.0, 1.5, 3.0],
            "ci_low": [math.nan, math.nan, 1.4, 2.8],
            "ci_high": [math.nan, math.nan, 1.6, 3.2],
            "status": ["ok"] * 4,
        }
    )
    det = pd.DataFrame(
        {
            "severity": [1.0, 8.0],
            "variant": ["baseline"] * 2,
            "kind": ["baseline"] * 2,
            "value": [math.nan] * 2,
            "fired": [pd.NA] * 2,
        }
    )
    fig = plot_dose(speed, det, scenario="x", unit="MB", klass="pageable_copy",
                    metric="pageable_h2d_share", threshold=0.05, note="table X is missing")  # fmt: skip
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert any("no detector metric" in t and "table X is missing" in t for t in texts)
    assert fig.onset is None and fig.severities == [1.0, 8.0]
    fig.savefig(tmp_path / "d.png")
    assert png_pixels((tmp_path / "d.png").read_bytes()).std() > 15
