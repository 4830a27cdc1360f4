"""data_stall against gil_contention on a real export: the wild corpus's ``gil_decode_thread``
(H200, nsys with ``--trace=cuda,nvtx,osrt,python-gil``): a prefetch thread decodes JSON batches
in pure Python into a full queue, holding the GIL; the training thread waits a switch interval
for it before each batch's host-to-device copy. Those waits end with the batch's copy, which is
input evidence, yet the training thread does no input work: data_stall must not fire on them.

The stretches, their copies and their GIL waits are recomputed here with plain SQL and Python
on the export (the steady window's bounds alone come from the detectors' helper); the measured
speedup comes from corpus/wild/measured.csv.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from analysis import trace as T
from analysis.detect import TraceView, diagnose, load_thresholds
from analysis.detect import view as C
from analysis.findings import Finding, State
from analysis.trace_db import unxz
from tests.conftest import REPO

WILD = REPO / "corpus" / "wild"
NAME = "gil_decode_thread"
STRETCH_NS = 1_000_000  # host.stretch_ms


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return unxz(WILD / "exports" / f"{NAME}.sqlite.cols.xz", tmp_path_factory.mktemp("gil"))


@pytest.fixture(scope="module")
def findings(export: Path) -> list[Finding]:
    with T.open_trace(export) as tr:
        return diagnose(tr)


def _overlap(a: int, b: int, spans: list[tuple[int, int]]) -> int:
    return sum(max(0, min(b, e) - max(a, s)) for s, e in spans)


def _gil_ranges(con: sqlite3.Connection, name: str) -> dict[int, list[tuple[int, int]]]:
    """Per thread, the ranges called ``name`` in nsys's ``GIL Trace`` NVTX domain."""
    text = "COALESCE(n.text, s.value)"
    join = "FROM NVTX_EVENTS AS n LEFT JOIN StringIds AS s ON s.id = n.textId"
    domains = [r[0] for r in con.execute(f"SELECT n.domainId {join} WHERE {text} = 'GIL Trace'")]
    assert domains, "the export has nsys's GIL trace"
    rows = con.execute(
        f'SELECT n.globalTid, n.start, n."end" {join} WHERE {text} = ? AND n.domainId IN '
        f"({','.join(map(str, domains))})",
        (name,),
    )
    out: dict[int, list[tuple[int, int]]] = {}
    for tid, s, e in rows:
        out.setdefault(int(tid), []).append((int(s), int(e)))
    return out


def _copy_stretches(con: sqlite3.Connection, lo: int, hi: int) -> tuple[int, list[tuple[int, int]]]:
    """(the process's main thread, its gaps of >= 1 ms between CUDA calls inside [lo, hi] that
    a host-to-device copy follows before the next kernel launch)."""
    tids = [t for (t,) in con.execute("SELECT DISTINCT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME")]
    main = next(t for t in tids if t & 0xFFFFFF == (t >> 24) & 0xFFFFFF)
    h2d = {c for (c,) in con.execute("SELECT correlationId FROM CUPTI_ACTIVITY_KIND_MEMCPY "
                                     "WHERE copyKind = 1")}  # fmt: skip
    calls = con.execute(
        'SELECT r.start, r."end", r.correlationId, s.value FROM CUPTI_ACTIVITY_KIND_RUNTIME AS r '
        "JOIN StringIds AS s ON s.id = r.nameId WHERE r.globalTid = ? ORDER BY r.start",
        (main,),
    ).fetchall()
    out, run = [], None
    for i, (s, e, _, _) in enumerate(calls):
        if run is not None and s - run >= STRETCH_NS and lo <= run and s <= hi:
            for _, _, corr, name in calls[i:]:
                if corr in h2d:
                    out.append((run, s))
                if corr in h2d or name.startswith(("cudaLaunchKernel", "cuLaunchKernel")):
                    break
        run = e if run is None else max(run, e)
    return main, out


def test_the_stretches_before_the_copies_are_gil_waits(export: Path) -> None:
    """What the trace says, before any detector: each stretch of the training thread that ends
    in a batch copy is a wait for the GIL (all but < 1 ms), which the decoder thread holds."""
    with T.open_trace(export) as tr:
        st = C.steady(tr, load_thresholds().window)
    con = sqlite3.connect(f"file:{export}?mode=ro", uri=True)
    main, stretches = _copy_stretches(con, st.lo, st.hi)
    waits = _gil_ranges(con, "Waiting for GIL").get(main, [])
    holds = [r for t, rs in _gil_ranges(con, "Holding GIL").items() if t != main for r in rs]
    assert len(stretches) >= 8  # about two per step over the window's 8 iterations
    for a, b in stretches:
        waited = _overlap(a, b, waits)
        assert (b - a) - waited < STRETCH_NS, (a, b, waited)
        assert _overlap(a, b, holds) >= 0.9 * waited  # held by another thread meanwhile


def test_gil_waits_before_a_copy_are_not_input_work(export: Path, findings: list[Finding]) -> None:
    """The host view sees the same stretches, with the copy after them, and sets them apart as
    GIL-bound: no input work, so data_stall does not fire and gil_contention is the primary."""
    with T.open_trace(export) as tr:
        cfg = load_thresholds()
        st = C.steady(tr, cfg.window)
        view = TraceView(tr, cfg).host()
    con = sqlite3.connect(f"file:{export}?mode=ro", uri=True)
    _, stretches = _copy_stretches(con, st.lo, st.hi)
    assert view is not None
    assert view.evidence["h2d_after"] == len(stretches)
    assert view.evidence["gil_bound"] == len(stretches)
    assert view.stretch_ns["data"] == 0
    by = {f.klass: f for f in findings}
    assert by["data_stall"].state is not State.FIRED, by["data_stall"].reason
    assert by["data_stall"].metrics["data_load_share"] == 0.0
    # nothing left for the replay to remove: no speedup (its cap on the other gaps, which
    # took the GIL waits in them along, comes only with input work)
    assert by["data_stall"].predicted_speedup == pytest.approx(1.0, abs=0.01)
    assert f"{len(stretches)} of those with evidence spent waiting for the GIL" in (
        by["data_stall"].reason
    )
    assert findings[0].klass == "gil_contention" and findings[0].state is State.FIRED


def test_gil_contention_predicts_the_measured_removal(findings: list[Finding]) -> None:
    """Removing the GIL waits predicts what removing the thread measured (within the score's
    20%): the waits, read as gil_contention's and no one else's, carry the whole removal."""
    m = pd.read_csv(WILD / "measured.csv")
    row = m[(m["script"] == NAME) & m["removal"].astype(bool)].iloc[0]
    assert row["class"] == "gil_contention"
    gil = next(f for f in findings if f.klass == "gil_contention")
    assert gil.predicted_speedup == pytest.approx(float(row["speedup"]), rel=0.2)
