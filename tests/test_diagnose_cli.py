"""``python -m harness diagnose`` on the committed real exports: JSON shape, ranking, exit codes,
and a report whose GPU activity was never written (a killed process)."""

from __future__ import annotations

import json

import pytest

from analysis.detect import GPU_ACTIVITY_LOST, gpu_activity_lost
from analysis.findings import CLASSES as ALL_CLASSES
from analysis.packed_export import SUFFIX
from analysis.trace import open_trace
from tests._fixtures import DATA, sqlite_fixture, xz_fixture
from tests.conftest import assert_fits

GPU_BASE = sqlite_fixture("gpu_nsys2025_sync_loading")
GPU_FIX = sqlite_fixture("gpu_nsys2025_sync_loading_async_dataloader")
CLASSES = set(ALL_CLASSES)


def _json(cli, *paths):
    proc = cli(["diagnose", "--format", "json", *map(str, paths)])
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_json_shape_and_primary_on_the_baseline(cli):
    out = _json(cli, GPU_BASE)
    assert set(out) == {"report", "primary", "judged", "findings"}
    assert out["judged"] is True
    assert out["report"] == str(GPU_BASE)
    assert out["primary"] == "data_stall"
    assert {f["class"] for f in out["findings"]} == CLASSES
    for f in out["findings"]:
        assert list(f)[:6] == ["class", "state", "fired", "impact", "metrics", "evidence"]
        assert f["state"] in ("fired", "clear", "not_judged")
        assert f["fired"] is (f["state"] == "fired")
        assert 0.0 <= f["impact"] <= 1.0
        assert isinstance(f["metrics"], dict)
    impacts = [f["impact"] for f in out["findings"] if f["fired"]]
    assert impacts == sorted(impacts, reverse=True)
    top = out["findings"][0]
    assert top["class"] == "data_stall" and top["fired"]
    assert top["evidence"] and {"start_ns", "end_ns"} <= set(top["evidence"][0])


def test_fix_is_host_bound_and_several_reports_give_a_list(cli):
    """The batch-128 fix loads data on workers; with 14 workers crowding the main thread it is
    host-bound first (an instant host: 2.07x), and removing the input pipeline, the workers'
    toll on the main thread with it, would save almost as much (1.98x: a partial data_stall;
    see test_detectors.test_data_stall_on_async_fix_is_the_loaders_side_effects)."""
    out = _json(cli, GPU_BASE, GPU_FIX)
    assert [r["primary"] for r in out] == ["data_stall", "launch_bound"]
    fired = {f["class"] for f in out[1]["findings"] if f["fired"]}
    assert fired == {"launch_bound", "data_stall"}


def test_text_format_names_primary_within_100_columns(cli):
    """The text for people: the primary, each finding, its metrics and reason wrapped to fit
    100 columns (the reasons run to 400 characters)."""
    proc = cli(["diagnose", str(GPU_BASE)])
    assert proc.returncode == 0
    assert "primary: data_stall" in proc.stdout
    assert "FIRED data_stall" in proc.stdout
    assert_fits(proc.stdout)


@pytest.mark.parametrize("kind", ["truncated", "missing", "text"])
def test_unreadable_file_exits_2_with_a_clear_message(cli, tmp_path, kind):
    bad = tmp_path / f"{kind}.sqlite"
    if kind == "truncated":
        bad.write_bytes(GPU_BASE.read_bytes()[:5000])
    elif kind == "text":
        bad.write_text("not a database\n")
    proc = cli(["diagnose", "--format", "json", str(bad)])
    assert proc.returncode == 2
    assert f"cannot diagnose {bad}" in proc.stderr
    assert proc.stdout == ""


def test_an_xz_export_is_read_as_it_is_kept(cli):
    """The corpus and the fixtures keep their exports packed, an nsys capture comes
    xz-compressed; diagnose reads both as they are, with the same findings as the decompressed
    file."""
    b = _json(cli, GPU_BASE)
    for xz in (
        DATA / f"gpu_nsys2025_sync_loading{SUFFIX}",
        xz_fixture("gpu_nsys2025_sync_loading"),
    ):
        a = _json(cli, xz)
        assert a["report"] == str(xz)
        assert a["primary"] == b["primary"] == "data_stall"
        assert a["findings"] == b["findings"]


def test_a_broken_xz_file_exits_2(cli, tmp_path):
    bad = tmp_path / "broken.sqlite.xz"
    bad.write_bytes(b"\xfd7zXZ\x00 truncated")
    proc = cli(["diagnose", str(bad)])
    assert proc.returncode == 2 and proc.stdout == ""
    assert f"cannot diagnose {bad}" in proc.stderr and "not a readable .xz file" in proc.stderr


# --- a report without GPU activity ---------------------------------------------------------------

#: A process stopped by SIGTERM under nsys on the H100 (the lead's capture): CUDA API rows and
#: NVTX, but its CUPTI activity buffers were never flushed, so no kernel or copy tables.
KILLED = "h100_killed_sigterm"


def _killed() -> str:
    if not (DATA / f"{KILLED}{SUFFIX}").is_file():
        pytest.skip(f"tests/data/{KILLED}{SUFFIX} is not committed yet (a SIGTERM'd H100 capture)")
    return str(sqlite_fixture(KILLED))


def test_a_killed_capture_is_not_judged_and_says_why(cli):
    """Every class not judged, each saying the report holds CUDA API calls but no GPU activity
    and why that happens; exit 0, no traceback."""
    path = _killed()
    proc = cli(["diagnose", "--format", "json", path])
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["primary"] == "none" and out["judged"] is False
    assert {f["class"] for f in out["findings"]} == CLASSES
    for f in out["findings"]:
        assert f["state"] == "not_judged" and f["reason"] == GPU_ACTIVITY_LOST
    text = cli(["diagnose", path])
    assert text.returncode == 0, text.stderr
    said = " ".join(text.stdout.split())  # wrapped to 100 columns
    assert f"nothing could be judged: {' '.join(GPU_ACTIVITY_LOST.split())}" in said
    assert text.stdout.count("CUPTI never flushed") == 1  # said once, not per class
    assert_fits(text.stdout)


@pytest.mark.parametrize(
    "name", ["gpu_nsys2025_sync_loading", "gpu_nsys2025_sync_loading_async_dataloader",
             "cpu_nsys2022_sync_loading"],
)  # fmt: skip
def test_reports_with_gpu_activity_or_no_cuda_at_all_are_not_flagged(name):
    """The check reads CUDA API rows without GPU rows: a GPU capture has both, a CPU capture
    (nsys 2022.4 on a machine without a GPU) has neither; both are judged as before."""
    with open_trace(sqlite_fixture(name)) as trace:
        assert gpu_activity_lost(trace) is None


#: The start of pp_heavy_head (a 2-rank gloo pipeline on CPUs) captured whole with
#: --trace=cuda,nvtx,osrt on the one-H100 machine (2026-11-25), cut to 150 ms with
#: scripts/trim_export.py (unread tables dropped, unreferenced strings pruned): torch touched the
#: driver (one cuModuleGetLoadingMode row) and launched nothing.
CPU_ON_GPU_BOX = "cpu_program_on_gpu_box_pp"


def test_a_cpu_program_on_a_gpu_machine_is_judged_as_a_cpu_report(cli):
    """CUDA API rows that launch nothing are not a lost capture: the report reads as a CPU one
    (the GPU classes not judged for want of GPU tables), never "CUPTI never flushed"."""
    path = str(sqlite_fixture(CPU_ON_GPU_BOX))
    with open_trace(path) as trace:
        assert trace.query("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME")[1] == [(1,)]
        assert gpu_activity_lost(trace) is None
    proc = cli(["diagnose", "--format", "json", path])
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert "CUPTI never flushed" not in proc.stdout
    lost = {f["class"] for f in out["findings"] if f["reason"] == GPU_ACTIVITY_LOST}
    assert lost == set()
    kernel_less = {
        f["class"] for f in out["findings"] if "CUPTI_ACTIVITY_KIND_KERNEL" in f["reason"]
    }
    assert {"launch_bound", "host_sync", "exposed_comm"} <= kernel_less


def test_text_says_each_prediction_with_its_interval_basis_and_what_untraced_means(cli):
    """The text shows each prediction as the JSON has it: the speedup with its 95% interval (or
    why there is none), the step left "untraced" said in words, and the basis it rests on
    (``prediction_note``)."""
    h100 = DATA / "h100" / f"h100_kernel_flood__baseline{SUFFIX}"
    text = cli(["diagnose", str(h100), str(GPU_BASE)])
    assert text.returncode == 0, text.stderr
    said = " ".join(text.stdout.split())
    out = _json(cli, h100, GPU_BASE)
    for report in out:
        for f in report["findings"]:
            if f["predicted_speedup"] is None or f["state"] == "not_judged":
                continue
            head = f"predicted, the cause removed entirely: {f['predicted_speedup']:.2f}x"
            lo, hi = f["predicted_speedup_ci_low"], f["predicted_speedup_ci_high"]
            if lo is not None:
                head += f" [{lo:.2f}-{hi:.2f}] (95% interval over the steady iterations)"
            else:
                head += " (no interval: too few measured iterations to resample)"
            assert head in said, (report["report"], f["class"])
            assert f"basis: {' '.join(f['prediction_note'].split())}" in said
    assert "untraced (as the program runs without nsys: nsys's own cost per call taken off)" in said
    assert "(no interval" in said and "(95% interval" in said  # both kinds in these two reports
    assert_fits(text.stdout)
