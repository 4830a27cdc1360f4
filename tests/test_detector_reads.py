"""The detectors' shared reads give what a direct read gives (real exports): the OS-runtime
calls taken out of one scan for several threads, names and windows, and the host view's NVTX
loading hints read by a lean query instead of ``trace.nvtx_ranges``."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from analysis import trace as T
from analysis.detect import TraceView, load_thresholds
from analysis.detect import view as C
from tests._fixtures import DATA, sqlite_fixture

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "wild" / "exports"


def _issuing(path: Path) -> tuple[C.Steady, list[int], list[int]]:
    """(steady window, issuing threads, every OS-runtime name id the host view and the GIL
    reading ask about) of one export."""
    cfg = load_thresholds()
    with T.open_trace(path) as tr:
        view = TraceView(tr, cfg)
        host = view.host()
        assert host is not None
        ids = C.evidence_ids(tr, cfg.host)[2]
        ids += C.name_ids(tr, list(cfg.gil_contention.wait_calls))
        return view.steady(), [int(t) for t in host.issuing], sorted(set(ids))


@pytest.mark.parametrize(
    ("name", "data_dir"),
    [("gil_shard_prep", CORPUS), ("gpu_nsys2025_sync_loading", None)],
)
def test_osrt_scan_serves_every_thread_name_set_and_inner_window(
    name: str, data_dir: Path | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One prefetch scan for all issuing threads and names, then each thread's calls of a
    subset of names, in the window and in one inside it (the time model's), equal a direct
    scan for exactly that; none of them scans again."""
    path = sqlite_fixture(name, data_dir) if data_dir else sqlite_fixture(name)
    st, tids, ids = _issuing(path)
    assert ids, "the export names none of the calls asked about"
    inner = replace(st, lo=st.lo + (st.hi - st.lo) // 3)
    asks = [(w, t, sub) for w in (st, inner) for t in tids for sub in (ids, ids[::2], ids[:1])]
    with T.open_trace(path) as direct:
        want = [C.thread_osrt(direct, w, t, sub) for w, t, sub in asks]
    assert sum(w["start"].size for w in want) > 0  # the comparison is not of empties
    scans = []
    real = T.int_columns
    monkeypatch.setattr(
        T,
        "int_columns",
        lambda tr, table, *a, **k: (scans.append(table), real(tr, table, *a, **k))[1],
    )
    with T.open_trace(path) as tr:
        C.prefetch_osrt(tr, st, tids, ids)
        got = [C.thread_osrt(tr, w, t, sub) for w, t, sub in asks]
    assert scans == ["OSRT_API"]
    for g, w in zip(got, want, strict=True):
        assert list(g) == ["start", "end", "name"]
        for k in g:
            np.testing.assert_array_equal(g[k], w[k])


def _hints_by_nvtx_ranges(tr: T.Trace, st: C.Steady, tid: int, hints: list[str]):
    """The host view's hint ranges read through trace.nvtx_ranges (the reference)."""
    r = T.nvtx_ranges(tr, tid=tid, spans=[(st.lo, st.hi)])
    r = r[r["end_ns"].notna() & r["text"].notna()]
    low = r["text"].str.lower()
    hit = np.zeros(len(r), bool)
    for h in hints:
        hit |= low.str.contains(h, regex=False).to_numpy(bool)
    r = r[hit].astype({"end_ns": "int64"})
    return C.union(r["start_ns"].clip(lower=st.lo), r["end_ns"].clip(upper=st.hi))


@pytest.mark.parametrize(
    "hints",
    [["data", "load"], ["_l"], ["step"], ["%"], ["dätä"], []],
)
def test_hint_ranges_match_nvtx_ranges(hints: list[str]) -> None:
    """The lean query (SQL LIKE as a first filter, pandas deciding) finds the ranges that
    nvtx_ranges and pandas find, with LIKE's wildcards in a hint taken literally and a hint
    beyond ASCII read without the SQL filter."""
    path = sqlite_fixture("gpu_nsys2025_sync_loading")
    with T.open_trace(path) as tr:
        view = TraceView(tr, load_thresholds())
        st = view.steady()
        tid = view.host().tid
        got = C.hint_ranges(tr, st, tid, hints)
        want = _hints_by_nvtx_ranges(tr, st, tid, hints)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    # data_load and step ranges are in this capture; none is called like the last two
    assert (got[0].size > 0) == (hints in (["data", "load"], ["_l"], ["step"]))


@pytest.mark.parametrize(
    ("name", "data_dir"),
    [("ue_swiglu", CORPUS), ("lt_depthwise", CORPUS), ("gpu_nsys2025_sync_loading", None)],
)
def test_activity_scan_reads_the_kernel_names_a_scan_of_their_own_reads(
    name: str, data_dir: Path | None
) -> None:
    """gpu_activity's one scan of the kernel table also holds every kernel's rowid, name id and
    launch size (what the GPU-side detectors read): the same as a scan of those alone, and the
    window's rows the same as SQL's window test picks."""
    path = sqlite_fixture(name, data_dir or DATA)
    cfg = load_thresholds()
    with T.open_trace(path) as tr:
        st = TraceView(tr, cfg).steady()
        act = C.gpu_activity(tr, st.lo, st.hi)
        shared = C.kernel_table_rows(tr)
        assert shared is not None and shared["row"].size > 0
        grid = "t.gridX * t.gridY * t.gridZ * t.blockX * t.blockY * t.blockZ"
        own = T.int_columns(
            tr, C.KERNEL, {"row": "t.rowid", "name": "t.demangledName", "grid": grid}, null=0
        )
        assert set(shared) == set(own)
        for k in own:
            assert np.array_equal(shared[k], own[k]), k
        window = T.int_columns(
            tr, C.KERNEL, {"rowid": "t.rowid"}, C.WINDOW, {"lo": st.lo, "hi": st.hi}
        )["rowid"]
        assert np.array_equal(np.sort(act.rowid[act.kind == C.KIND_KERNEL]), window)


@pytest.mark.parametrize("name", ["gpu_nsys2025_sync_loading", "h100/h100_kernel_flood__baseline"])
def test_base_name_in_is_isin_of_base_names(name: str) -> None:
    """Each distinct API name id tested once gives numpy's test of every call's base name."""
    with T.open_trace(sqlite_fixture(name)) as tr:
        st = TraceView(tr, load_thresholds()).steady()
        names = C.window_calls(tr, st)["name"]
        assert names.size > 0
        for wanted in (C.DEVICE_ALLOC, C.HOST_ALLOC, ("cudaLaunchKernel", "cuLaunchKernel")):
            want = np.isin(C.base_names(tr, names), wanted)
            assert np.array_equal(C.base_name_in(tr, names, wanted), want)
        assert C.base_name_in(tr, names, ("cudaLaunchKernel", "cuLaunchKernel")).any()
