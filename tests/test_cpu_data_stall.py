"""data_stall on CPU captures, read from the OS runtime: no NVTX range decides.

``cpu_nsys2022_user_loop_{sync,memory}`` are a user's own loop with no NVTX at all
(``scripts/cpu_stall_capture.py``, tests/data/README.md): ``sync`` loads each batch on the
training thread (files opened, read, decoded), ``memory`` runs the same steps on batches decoded
before the loop. The suite's ``cpu_nsys2022_sync_loading`` exports carry a ``data_load`` range,
which must not matter. Expected shares are recomputed here from the OSRT_API table with plain
SQL and a Python loop, not with the detector's helpers.
"""

from __future__ import annotations

import csv
import sqlite3
from pathlib import Path

import pytest

from analysis import trace as T
from analysis.detect import diagnose, load_thresholds
from analysis.findings import Finding, State
from tests._fixtures import DATA, sqlite_fixture

SYNC = sqlite_fixture("cpu_nsys2022_user_loop_sync")
MEMORY = sqlite_fixture("cpu_nsys2022_user_loop_memory")
SUITE_BASE = sqlite_fixture("cpu_nsys2022_sync_loading")
SUITE_FIX = sqlite_fixture("cpu_nsys2022_sync_loading_async_dataloader")

#: File reads and loader-queue waits, spelled out (the defaults of diagnosis.host.file_calls and
#: diagnosis.data_stall.cpu_wait_calls).
INPUT_CALLS = (
    "read", "pread64", "pread", "readv", "preadv", "fread", "open", "open64", "openat",
    "openat64", "fopen", "fopen64", "poll", "ppoll", "select", "pselect6", "epoll_wait",
    "epoll_pwait", "recv", "recvfrom", "recvmsg",
)  # fmt: skip
GAP_NS = 10_000_000  # diagnosis.data_stall.cpu_input_gap_ms


def _data_stall(path: Path, over: dict | None = None) -> Finding:
    with T.open_trace(path) as tr:
        return {f.klass: f for f in diagnose(tr, over)}["data_stall"]


def _sql(path: Path, sql: str, params: tuple = ()) -> list[tuple]:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return db.execute(sql, params).fetchall()
    finally:
        db.close()


def _user_window(path: Path) -> tuple[int, int, int]:
    """(thread, lo, hi) of a capture without NVTX: the main thread (tid == pid) whose OS-runtime
    calls start first; the span of all OS-runtime calls less its first fifth."""
    rows = _sql(path, "SELECT globalTid, MIN(start) FROM OSRT_API GROUP BY globalTid")
    mains = [(s, t) for t, s in rows if t % (1 << 24) == (t >> 24) % (1 << 24)]
    tid = min(mains)[1]
    a, b = _sql(path, 'SELECT MIN(start), MAX("end") FROM OSRT_API')[0]
    return tid, a + int(0.2 * (b - a)), b


def _suite_window(path: Path) -> tuple[int, int, int]:
    """(thread, lo, hi) of the suite's ``measure`` range."""
    sql = """SELECT n.globalTid, n.start, n."end" FROM NVTX_EVENTS n
             JOIN StringIds s ON s.id = n.textId WHERE s.value = 'measure'"""
    return _sql(path, sql)[0]


def _input_share(path: Path, tid: int, lo: int, hi: int) -> tuple[float, int]:
    """Share of [lo, hi] in runs of the thread's input calls at most GAP_NS apart, and how many
    input calls it made there."""
    marks = ", ".join("?" * len(INPUT_CALLS))
    sql = f"""SELECT o.start, o."end" FROM OSRT_API o JOIN StringIds s ON s.id = o.nameId
              WHERE o.globalTid = ? AND o."end" > ? AND o.start < ? AND s.value IN ({marks})
              ORDER BY o.start"""
    calls = [(max(s, lo), min(e, hi)) for s, e in _sql(path, sql, (tid, lo, hi, *INPUT_CALLS))]
    total, run = 0, None
    for s, e in calls:
        if run is not None and s - run[1] <= GAP_NS:
            run = (run[0], max(run[1], e))
            continue
        if run is not None:
            total += run[1] - run[0]
        run = (s, e)
    if run is not None:
        total += run[1] - run[0]
    return total / (hi - lo), len(calls)


def test_user_loop_without_nvtx_fires_from_the_os_runtime() -> None:
    assert not _sql(SYNC, "SELECT name FROM sqlite_master WHERE name = 'NVTX_EVENTS'")
    f = _data_stall(SYNC)
    tid, lo, hi = _user_window(SYNC)
    share, n = _input_share(SYNC, tid, lo, hi)
    assert n > 500  # two calls (open, read) per item, 24 items a step
    assert f.fired, f.reason
    assert f.metrics["input_work_share"] == pytest.approx(share, abs=1e-9)
    assert f.impact == f.metrics["input_work_share"] == f.metrics["data_load_share"]
    assert 0.45 < share < 0.65  # ~22 ms of loading in each ~37 ms step
    assert f.metrics["input_reads_per_s"] == pytest.approx(n / ((hi - lo) / 1e9))
    assert "no NVTX steps" in f.reason and f"{n} file reads" in f.reason
    assert len(f.evidence) == 3 and all(e["nvtx"] is None for e in f.evidence)
    assert all(lo <= e["start_ns"] < e["end_ns"] <= hi for e in f.evidence)


def test_user_loop_with_batches_in_memory_is_clear() -> None:
    f = _data_stall(MEMORY)
    tid, lo, hi = _user_window(MEMORY)
    share, n = _input_share(MEMORY, tid, lo, hi)
    assert hi - lo > 1e9  # the window is the loop (its 40 steps), not an empty edge of it
    assert f.state is State.CLEAR, f.reason
    assert f.metrics["input_work_share"] == pytest.approx(share, abs=1e-9)
    assert share < 0.05 and f.impact == 0.0
    assert f.metrics["input_reads_per_s"] == pytest.approx(n / ((hi - lo) / 1e9))


@pytest.mark.parametrize(
    ("path", "fired"), [(SUITE_BASE, True), (SUITE_FIX, True)], ids=["baseline", "async"]
)
def test_suite_capture_judged_without_its_data_load_range(path: Path, fired: bool) -> None:
    """The suite's sync_loading on the CPU: the same state whatever the ``data_load`` range is
    called, and the input share (not the range's) is what decides. The async fix fires too:
    on the 2-core box its two workers cannot keep up, and the training thread waits for their
    queue 19% of the window, over the class's 15% (the fix is declared partial, data_stall
    expected)."""
    tid, lo, hi = _suite_window(path)
    share, _ = _input_share(path, tid, lo, hi)
    own = _data_stall(path)
    blind = _data_stall(path, {"data_stall": {"range_name": "no_such_range"}})
    for f in (own, blind):
        assert f.fired is fired, f.reason
        assert f.metrics["input_work_share"] == pytest.approx(share, abs=1e-9)
        assert f.impact == (pytest.approx(share, abs=1e-9) if fired else 0.0)
    assert own.metrics["data_load_share"] != blind.metrics["data_load_share"] == share
    # the share decides: a bar just above it clears the class, one just below fires it
    for bar, expect in ((share + 0.01, False), (share - 0.01, True)):
        f = _data_stall(path, {"data_stall": {"min_data_load_share": bar}})
        assert f.fired is expect, (bar, f.reason)


def test_loader_waits_count_as_input() -> None:
    """The async fix's main thread polls and receives from its workers' queue: those waits are
    input runs of their own (12 in its 4 steps), not file reads."""
    f = _data_stall(SUITE_FIX)
    assert f.metrics["input_waits_per_step"] == 3.0
    tight = _data_stall(SUITE_FIX, {"data_stall": {"cpu_wait_calls": ["sem_wait"]}})
    assert tight.metrics["input_work_share"] < f.metrics["input_work_share"]


def test_an_input_share_under_the_old_bar_fires_at_the_class_bar() -> None:
    """Issue 52, item 8: sync_loading at severity 128 on the CPU. The training thread loads
    about a fifth of each step (the input runs: 20.9% of the window here), and removing the
    loading (``ideal``) measured 1.44x, a 31% saving. The CPU rule held that share to a bar of
    its own, 30%, while the truth holds a saving to the class's bar, 15%: refuted. The input
    runs run between the thread's compute, so their share is the saving: it fires at the
    class's bar and predicts ``1 / (1 - share)``, within the tolerance of the measured speedup
    (the run's committed timing: 5 rounds of each variant)."""
    path = sqlite_fixture("cpu_nsys2022_sync_loading_128")
    cfg = load_thresholds()
    f = _data_stall(path)
    share = f.metrics["input_work_share"]
    assert cfg.data_stall.min_saving_share <= share < 0.3, share  # between the two bars
    assert f.fired and f.impact == share, f.reason
    assert f.predicted_speedup == pytest.approx(1 / (1 - share), abs=1e-4)
    with (DATA / "cpu_nsys2022_sync_loading_128.runs.csv").open() as fh:
        mean = {r["variant"]: float(r["step_ms_mean"]) for r in csv.DictReader(fh)}
    measured = mean["baseline"] / mean["ideal"]
    assert measured > 1 / (1 - cfg.data_stall.min_saving_share)  # the truth: the class is there
    assert abs(f.predicted_speedup / measured - 1) <= cfg.predict.tolerance_share
    old = _data_stall(path, {"data_stall": {"min_data_load_share": 0.3}})
    assert old.state is State.CLEAR and old.metrics["input_work_share"] == share  # as it was
