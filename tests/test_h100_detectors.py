"""The detectors on real H100 exports of the suite (nsys 2025.3, trimmed with
scripts/trim_export.py, xz-compressed under tests/data/h100/): every baseline fires its class,
graph variants are judged with their GPU work, and without the suite's NVTX ranges the
detectors find the steady state themselves and agree."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from analysis.detect import diagnose, load_thresholds
from analysis.detect import view as C
from analysis.findings import State
from analysis.packed_export import SUFFIX
from analysis.trace import open_trace
from analysis.trace_db import unxz
from bottlenecks import CLASSES
from tests._fixtures import sqlite_fixture

DATA = Path(__file__).resolve().parent / "data"
H100 = DATA / "h100"

#: fixture -> the class its baseline injects ("none" for a clean variant).
CASES = {
    "forced_sync__baseline": "host_sync",
    "kernel_flood__baseline": "launch_bound",
    "pageable_copies__baseline": "pageable_copy",
    "kernel_flood__cuda_graphs": "none",
}


@pytest.fixture(scope="module")
def h100(tmp_path_factory) -> dict[str, Path]:
    """The fixtures decompressed once per module."""
    out = tmp_path_factory.mktemp("h100")
    paths = {}
    for xz in sorted(H100.glob(f"*{SUFFIX}")):
        dst = unxz(xz, out)
        paths[dst.name.removeprefix("h100_").removesuffix(".sqlite")] = dst
    return paths


def _primary(path: Path, overrides: dict | None = None) -> tuple[str, dict]:
    with open_trace(path) as trace:
        found = diagnose(trace, overrides)
    fired = [f for f in found if f.fired]
    return (fired[0].klass if fired else "none"), {f.klass: f for f in found}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("use_nvtx", [True, False], ids=["nvtx", "no_nvtx"])
def test_primary_is_the_injected_class(h100: dict[str, Path], name: str, use_nvtx: bool) -> None:
    primary, found = _primary(h100[name], {"window": {"use_nvtx": use_nvtx}})
    assert primary == CASES[name], {k: (f.state, f.impact, f.reason) for k, f in found.items()}


def test_sync_loading_baseline_without_nvtx_is_not_judged() -> None:
    """A capture of five 1 s steps (two warm-up, three measured) holds too few repeats of its
    GPU work to find its iterations without the suite's NVTX: the window is the span of GPU
    activity, which the time model cannot replay (it needs two iterations, one to warm up).
    The classes it decides are therefore not judged, and say why; the shares still show the
    input work (the evidence a reader needs), and with the suite's steps it is a data stall."""
    primary, found = _primary(
        sqlite_fixture("gpu_nsys2025_sync_loading"), {"window": {"use_nvtx": False}}
    )
    ds = found["data_stall"]
    assert primary == "none"
    assert ds.state is State.NOT_JUDGED and "fewer than 2 steady iterations" in ds.reason
    assert ds.metrics["data_load_share"] > 0.9
    assert _primary(sqlite_fixture("gpu_nsys2025_sync_loading"))[0] == "data_stall"


def _unwritten() -> list[str]:
    """The classes whose detector module is still a skeleton (it defines ``NOT_WRITTEN``)."""
    return [
        k
        for k in CLASSES
        if hasattr(importlib.import_module(f"analysis.detect.{k}"), "NOT_WRITTEN")
    ]


def test_graph_replays_count_as_gpu_work(h100: dict[str, Path]) -> None:
    """Graph-level tracing puts replays in GRAPH_TRACE, not the kernel table: the GPU is busy
    during them, every single-process class is judged, and no reason calls it a CPU export."""
    _, found = _primary(h100["kernel_flood__cuda_graphs"])
    # stage_imbalance compares pipeline ranks: one process leaves nothing to compare
    assert found.pop("stage_imbalance").state is State.NOT_JUDGED
    for k in _unwritten():  # a skeleton detector judges nothing anywhere
        assert found.pop(k).state is State.NOT_JUDGED
    assert all(f.state is not State.NOT_JUDGED for f in found.values())
    assert found["launch_bound"].metrics["gpu_idle_share"] < 0.2
    assert found["launch_bound"].metrics["kernels_per_step"] == pytest.approx(
        1.0, abs=0.05
    )  # one replay a step
    assert not any("CPU" in f.reason for f in found.values())


def test_compiled_graphs_still_host_bound(h100: dict[str, Path]) -> None:
    """torch.compile + CUDA graphs replays 5 small graphs per step; its GPU work takes a
    quarter of the step and the rest is the host (guards, graph-tree bookkeeping)."""
    _, found = _primary(h100["kernel_flood__torch_compile_cudagraphs"])
    lb = found["launch_bound"]
    assert lb.fired and 0.6 < lb.impact < 0.85, lb.reason


@pytest.mark.parametrize(
    "name", ["forced_sync__baseline", "kernel_flood__baseline", "kernel_flood__cuda_graphs"]
)
def test_iterations_found_without_nvtx(h100: dict[str, Path], name: str) -> None:
    """The repeating GPU work gives the steps the harness marked with NVTX, less the first
    (skipped as warm-up) and at most one cut by the capture's edge, inside the same window."""
    cfg = load_thresholds().window
    with open_trace(h100[name]) as trace:
        it = C.gpu_iterations(trace, cfg)
        nvtx = C.steady(trace, load_thresholds().window)
    assert it is not None and nvtx.mode == "nvtx"
    assert nvtx.n_steps - 2 <= it.n <= nvtx.n_steps, (it.n, nvtx.n_steps)
    step = (nvtx.hi - nvtx.lo) / nvtx.n_steps
    assert nvtx.lo - step <= it.starts[0] and it.starts[-1] <= nvtx.hi + step


def test_host_sync_counterfactual(h100: dict[str, Path]) -> None:
    """forced_sync's baseline: the GPU is busy 2/3 of the window and the host only 4/5 of it
    outside sync calls, so without the syncs the window shrinks by the blocked fifth."""
    _, found = _primary(h100["forced_sync__baseline"])
    m = found["host_sync"].metrics
    expected = 1 - max(m["host_busy_share"], m["gpu_busy_share"])
    assert m["sync_exposed_share"] == pytest.approx(expected, abs=1e-9)
    assert m["syncs_per_step"] == pytest.approx(175, abs=1)


def test_tiny_calls_of_no_role_are_left_out_and_change_no_verdict(h100: dict[str, Path]) -> None:
    """window.min_call_ns drops short calls that neither launch, wait, copy, set nor allocate
    (``cuKernelGetName`` before each launch) and only those; the verdicts stay the same. (The
    predicted savings move a little: nsys's default cost per call is taken off every call the
    replay holds, and with the 0.5 us ``cuKernelGetName`` calls kept there are twice as many.)"""
    path = h100["kernel_flood__baseline"]
    with open_trace(path) as trace:
        st = C.steady(trace, load_thresholds({"window": {"min_call_ns": 1}}).window)
        every = C.window_calls(trace, st)
        kept = C.window_calls(
            trace, C.steady(trace, load_thresholds({"window": {"min_call_ns": 1000}}).window)
        )
        names = C.base_names(trace, every["name"])
    short = (every["end"] - every["start"] < 1000) & (every["cat"] == 0)
    assert names[short].tolist().count("cuKernelGetName") > 0.9 * short.sum() > 1000
    assert kept["start"].size == every["start"].size - short.sum()
    for key in ("start", "corr", "tid", "cat"):
        assert (kept[key] == every[key][~short]).all()
    primary_all, all_calls = _primary(path, {"window": {"min_call_ns": 1}})
    primary, fewer_calls = _primary(path)
    assert primary == primary_all == "launch_bound"
    for klass, f in all_calls.items():
        assert f.state == fewer_calls[klass].state, klass
        assert abs(f.impact - fewer_calls[klass].impact) < 0.05, klass


def test_calls_read_ahead_on_a_second_connection_are_the_calls(h100: dict[str, Path]) -> None:
    """prefetch_calls reads the API table on a thread of its own; window_calls waits for it
    and returns what its own read gives."""
    path = h100["forced_sync__baseline"]
    cfg = load_thresholds()
    with open_trace(path) as trace:
        st = C.steady(trace, cfg.window)
        C.prefetch_calls(trace, st)
        ahead = C.window_calls(trace, st)
    with open_trace(path) as trace:
        own = C.window_calls(trace, C.steady(trace, cfg.window))
    assert ahead.keys() == own.keys() and own["start"].size > 1000
    for key, values in own.items():
        assert (ahead[key] == values).all(), key
