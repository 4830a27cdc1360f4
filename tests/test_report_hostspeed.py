"""The report's "Host speed" section: each worker's host probes per variant and over the run's
time, unstable variants named with their probes, and what it says when a run has none."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd

from tests.test_report import REFERENCE, assert_picture

#: Two rounds of two variants and a profile of the baseline: (variant, phase, launched_at,
#: launch us before/after, python ms before/after); the baseline's rounds drifted.
_PROBED = [
    ("baseline", "timing-1", 100.0, 10.0, 12.0, 60.0, 64.0),
    ("fix", "timing-1", 110.0, 9.0, 9.4, 58.0, 60.0),
    ("fix", "timing-2", 120.0, 7.0, 7.2, 44.0, 46.0),
    ("baseline", "timing-2", 130.0, 7.1, 7.3, 43.0, 45.0),
    ("baseline", "profile", 140.0, 8.0, 8.4, 50.0, 52.0),
]


def _probed_folder(tmp: Path) -> Path:
    run = tmp / "probed"
    run.mkdir()
    shutil.copy(REFERENCE / "manifest.json", run)
    cols = ["probe_launch_us_before", "probe_launch_us_after"]
    cols += ["probe_python_ms_before", "probe_python_ms_after"]
    rows = [
        {"scenario": "s", "variant": v, "phase": ph, "launched_at": at, "window_s": 1.0,
         "window_ended_at": at + 5.0, **dict(zip(cols, probes, strict=True))}
        for v, ph, at, *probes in _PROBED
    ]  # fmt: skip
    pd.DataFrame(rows).to_csv(run / "timings.csv", index=False)
    runs = pd.DataFrame(
        {"scenario": "s", "variant": ["baseline", "fix"], "kind": ["baseline", "fix"],
         "status": "ok", "round_spread": [0.31, 0.02], "unstable": [True, False]}
    )  # fmt: skip
    runs.to_csv(run / "runs.csv", index=False)
    return run


def test_host_speed_section_lays_out_each_workers_probes(tmp_path):
    from harness.report import RunFolder
    from harness.report.doc import Doc
    from harness.report.hostspeed import host_speed_section, probe_points
    from harness.report.markdown import render_markdown

    run = RunFolder.load(_probed_folder(tmp_path))
    doc = Doc("t")
    host_speed_section(doc, run, run.path)
    md = render_markdown(doc)
    # per variant, its rounds in run order (each the mean of before and after), its profile
    assert "| baseline | 11 · 7.2 | 62 · 44 | 8.2 | 51 | 31% | **unstable** |" in md, md
    assert "| fix | 9.2 · 7.1 | 59 · 45 | – | – | 2% |  |" in md, md
    # the run-wide range over all ten probes, and the unstable variant named with its probes
    assert "Over the run's 10 probes, the launch probe read 7–12 µs" in md
    assert "s/baseline is unstable" in md and "spread by 31%" in md and "11 · 7.2 µs" in md
    assert "s/fix is unstable" not in md
    assert [img.name for img in doc.images] == ["host_probes"]
    assert_picture(doc.images[0].png)
    pts = probe_points(pd.read_csv(run.path / "timings.csv"))
    # before at the window's start, after at its end, from the first launch
    first = pts[(pts["variant"] == "baseline") & (pts["phase"] == "timing-1")]
    assert sorted(first["t_s"]) == [4.0, 5.0]
    assert list(pts["t_s"]) == sorted(pts["t_s"])


def test_host_speed_section_says_when_a_run_has_no_probes(tmp_path):
    from harness.report import RunFolder
    from harness.report.doc import Doc
    from harness.report.hostspeed import host_speed_section
    from harness.report.markdown import render_markdown

    doc = Doc("t")
    host_speed_section(doc, RunFolder.load(REFERENCE), REFERENCE)
    assert "no host probes" in render_markdown(doc) and not doc.images
