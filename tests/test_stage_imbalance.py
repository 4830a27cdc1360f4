"""stage_imbalance on real nsys exports: two-rank gloo pipelines and DDP captured on the CPU
(nsys 2022.4, OS runtime only), DDP on 2 GPUs (nsys 2025.3), single-rank reports. The 2-GPU
pipeline, whose waits are matched across the ranks, is in tests/test_comm.py.

The CPU captures are the corpus scripts run under
``nsys profile --trace=nvtx,osrt --sample=none --cpuctxsw=none python -m torch.distributed.run
--standalone --nproc_per_node=2 corpus/wild/<script>.py [--fix ...]`` on this project's 2-core
CPU box, cut to the loop (tests/data/README.md). Exact values are regression pins: the
detector's numbers on these files today, so a change that moves them shows; they are not
derived independently from the exports.
"""

from __future__ import annotations

import sqlite3

import pytest

from analysis.detect import TraceView, load_thresholds
from analysis.detect import stage_imbalance as S
from analysis.detect.config import DiagnosisConfig
from analysis.findings import State
from analysis.trace import open_trace
from tests._fixtures import sqlite_fixture
from tests.conftest import REPO

IMBALANCED = {
    # fixture: (saving_share, lockstep_share, busy_share_min, busy_share_max)
    "cpu_nsys2022_stage_pp_param_split": (0.246, 0.083, 0.205, 0.696),
    "cpu_nsys2022_stage_pp_heavy_head": (0.278, 0.204, 0.252, 0.807),
}
BALANCED = {
    "cpu_nsys2022_stage_pp_balanced": (0.042, 0.457, 0.537, 0.621),
}
DDP_CPU = "cpu_nsys2022_stage_ddp"


def _find(name: str, thresholds: DiagnosisConfig | None = None, path=None):
    """The detector's own finding (its verdict: stage_imbalance decides on its own bound)."""
    cfg = thresholds or load_thresholds()
    with open_trace(path or sqlite_fixture(name)) as trace:
        return S.detect(TraceView(trace, cfg), cfg.stage_imbalance)


def _numbers(f) -> tuple[float, ...]:
    m = f.metrics
    keys = ("saving_share", "lockstep_share", "busy_share_min", "busy_share_max")
    return tuple(round(m[k], 3) for k in keys)


@pytest.mark.parametrize("name", sorted(IMBALANCED))
def test_fires_on_imbalanced_pipelines(name: str) -> None:
    f = _find(name)
    assert f.state is State.FIRED
    assert _numbers(f) == IMBALANCED[name]
    assert f.impact == pytest.approx(f.metrics["saving_share"])
    assert f.metrics["ranks"] == 2
    # the light rank is the first (pid order: torchrun's rank 0 holds the light stage)
    assert f.metrics["busy_share_rank0"] == f.metrics["busy_share_min"]
    assert f.metrics["balanced_share"] == pytest.approx(1 - f.metrics["saving_share"])
    assert len(f.evidence) == 3 and all(e["peer_busy_ns"] > 0 for e in f.evidence)
    assert "observed_step_ms" not in f.metrics  # no NVTX steps in a user's script


@pytest.mark.parametrize("name", sorted(BALANCED))
def test_clear_on_balanced_pipelines(name: str) -> None:
    f = _find(name)
    assert f.state is State.CLEAR
    assert _numbers(f) == BALANCED[name]


def test_decoy_fires_without_the_balanced_splits_idle(monkeypatch) -> None:
    """The key rule on the balanced decoy: a balanced split keeps the busiest rank's own idle
    (fill, drain, hand-offs). Spread the work evenly but drop that idle from the bound, and the
    decoy's bubble (each rank waits ~40% of its window) reads as an imbalance."""
    name = "cpu_nsys2022_stage_pp_balanced"
    assert _find(name).state is State.CLEAR
    monkeypatch.setattr(S, "balanced_ns", lambda busy, idle_busiest: sum(busy) / len(busy))
    f = _find(name)
    assert f.state is State.FIRED
    assert round(f.metrics["saving_share"], 3) == 0.421


def test_ddp_in_lockstep_is_clear_and_fires_without_the_lockstep_rule() -> None:
    """CPU DDP under load: one rank was slowed for a while and the other waited for it in the
    all-reduces, so an even split would 'save' 16%; but the waits end with both ranks in the
    collective (lockstep 63%), which no pipeline receive does."""
    f = _find(DDP_CPU)
    assert f.state is State.CLEAR
    assert _numbers(f) == (0.16, 0.63, 0.254, 0.573)
    loose = load_thresholds({"stage_imbalance": {"max_lockstep_share": 1.0}})
    assert _find(DDP_CPU, loose).state is State.FIRED


def test_ddp_on_two_gpus_is_clear() -> None:
    """ddp_exposed_comm on 2 x H200: equal ranks; rank 1 waits at every all-reduce for rank 0,
    whose host issues the same work later (coupling, communication: tests/test_comm.py), so
    neither rank is idle for want of work and an even split saves nothing."""
    path = sqlite_fixture("ddp_exposed_comm", REPO / "corpus" / "wild" / "exports")
    f = _find("", path=path)
    assert f.state is State.CLEAR
    assert f.metrics["ranks"] == 2 and "busy_share_rank1" in f.metrics
    assert "lockstep_share" not in f.metrics  # GPU reports: waits matched, no lockstep test
    assert round(f.metrics["saving_share"], 3) == 0.011


@pytest.mark.parametrize(
    ("name", "data"),
    [("h100_forced_sync__baseline", "h100"), ("cpu_nsys2022_sync_loading", "")],
)
def test_a_single_rank_is_not_judged(name: str, data: str) -> None:
    f = _find("", path=sqlite_fixture(name, REPO / "tests" / "data" / data))
    assert f.state is State.NOT_JUDGED
    assert "1 rank(s)" in f.reason


def test_the_scenarios_own_profiles_per_step() -> None:
    """pipeline_imbalance's smoke profiles (the suite's NVTX window, 10 steps, both ranks in one
    report): the finding gives the observed and the balanced step."""
    base = _find("cpu_nsys2022_pipeline_imbalance_baseline")
    assert base.state is State.FIRED
    m = {k: round(v, 3) for k, v in base.metrics.items()}
    assert (m["busy_share_rank0"], m["busy_share_rank1"]) == (0.921, 0.376)  # 6 | 2 blocks
    assert (m["observed_step_ms"], m["balanced_step_ms"]) == (186.279, 135.518)
    assert m["saving_share"] == 0.273 and m["lockstep_share"] == 0.025
    bal = _find("cpu_nsys2022_pipeline_imbalance_balanced")
    assert bal.state is State.CLEAR
    assert round(bal.metrics["saving_share"], 3) == 0.054


def test_thresholds_are_validated() -> None:
    from analysis.detect.config import ThresholdError

    with pytest.raises(ThresholdError, match="max_lockstep_share"):
        load_thresholds({"stage_imbalance": {"max_lockstep_share": 1.5}})
    with pytest.raises(ThresholdError, match="min_idle_us"):
        load_thresholds({"stage_imbalance": {"min_idle_us": 0}})


# --- expectations recomputed from the export -----------------------------------------------------

PIPELINE = "cpu_nsys2022_pipeline_imbalance_"  # + baseline / balanced: the suite's NVTX window


def _sql_stage(path) -> dict[str, float]:
    """The deciding numbers recomputed with plain SQL and Python on a capture with the suite's
    ``measure`` ranges: a rank is a process whose main thread (tid == pid) makes at least 4 condition
    waits of 10 us or more in the window; its idle is the union of all its main thread's
    OS-runtime calls of 10 us or more, clipped to the window; a balanced split takes the mean
    busy time plus the busiest rank's idle."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        lo, hi = db.execute(  # one `measure` per rank: the window spans them all
            """SELECT MIN(n.start), MAX(n."end") FROM NVTX_EVENTS n
               JOIN StringIds s ON s.id = n.textId WHERE s.value = 'measure'"""
        ).fetchone()
        rows = db.execute(
            """SELECT o.globalTid, o.start, o."end", s.value FROM OSRT_API o
               JOIN StringIds s ON s.id = o.nameId WHERE o."end" > ? AND o.start < ?
               AND o."end" - o.start >= 10000 ORDER BY o.start""",
            (lo, hi),
        ).fetchall()
    finally:
        db.close()
    conds = ("pthread_cond_wait", "pthread_cond_timedwait", "pthread_cond_clockwait")
    mains = {t for t, *_ in rows if t % (1 << 24) == (t >> 24) % (1 << 24)}
    ranks = sorted(t for t in mains if sum(r[0] == t and r[3] in conds for r in rows) >= 4)
    busy = []
    for t in ranks:
        idle, end = 0, lo
        for _, s, e, _ in (r for r in rows if r[0] == t):
            s, e = max(s, lo, end), min(e, hi)
            if e > s:
                idle += e - s
                end = e
        busy.append(hi - lo - idle)
    span = hi - lo
    balanced = min(1.0, (sum(busy) / len(busy) + span - max(busy)) / span)
    return {"ranks": len(ranks), "saving_share": 1 - balanced, "busy_share_max": max(busy) / span}


@pytest.mark.parametrize(("variant", "fired"), [("baseline", True), ("balanced", False)])
def test_saving_share_recomputed_from_the_export(variant: str, fired: bool) -> None:
    """Not a pin: the saving that decides, recomputed from the OS-runtime table."""
    f = _find(PIPELINE + variant)
    exp = _sql_stage(sqlite_fixture(PIPELINE + variant))
    assert exp["ranks"] == f.metrics["ranks"] == 2
    assert f.metrics["saving_share"] == pytest.approx(exp["saving_share"], abs=1e-12)
    assert f.metrics["busy_share_max"] == pytest.approx(exp["busy_share_max"], abs=1e-12)
    assert f.fired is fired, f.reason


def test_a_parent_waiting_for_its_one_worker_is_no_second_rank() -> None:
    """A CPU capture of one worker (gil_contention's ideal, forked by the profile server that
    nsys launched) on a loaded 2-core box: the server waited in condition variables the whole
    window and was outside an OS-runtime call 5.5% of it, the worker computed 99.96%. Read as
    two ranks, that was a 47% "imbalance" on a job with one process; the server is no rank."""
    f = _find("cpu_nsys2022_gil_ideal_server_waits")
    assert f.state is State.NOT_JUDGED, f.metrics
    assert f.reason.startswith("1 rank(s) in the report"), f.reason
