"""NCCL kernels split into waits and transfers across ranks (analysis.detect.view.comm), and what
exposed_comm and stage_imbalance make of it.

Real exports: the 2 x H200 `pipeline_imbalance` baseline (a 3:1 GPipe cut, the cut of the time, 2 ranks in one report,
cut to 2 steps with `scripts/trim_export.py --gpu-only --margin-ms 30`, tests/data/README.md)
and the corpus' `ddp_exposed_comm` (DDP with 0.05 MB buckets on 2 x H200, whole process).
Synthetic exports (sqlite3 in the nsys schema) pin down each charge: what the late rank did
while the other waited.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from analysis import trace as T
from analysis.detect import TraceView, diagnose, load_thresholds
from analysis.detect import view as C
from analysis.findings import Finding, State
from tests._fixtures import sqlite_fixture
from tests.conftest import DATA, REPO

PIPE = sqlite_fixture("h200x2_pipeline_imbalance__baseline", DATA / "h200x2")
DDP = sqlite_fixture("ddp_exposed_comm", REPO / "corpus" / "wild" / "exports")


def _found(path: Path, over: dict | None = None) -> dict[str, Finding]:
    with T.open_trace(path) as tr:
        return {f.klass: f for f in diagnose(tr, over)}


def _r(m: dict[str, float], *keys: str) -> tuple[float, ...]:
    return tuple(round(m[k], 3) for k in keys)


# --- real exports ---------------------------------------------------------------------------


def test_pipeline_waits_are_imbalance_not_communication() -> None:
    """The light rank spins in its receive kernels while the heavy rank computes: 30% of the
    window is a wait on a computing peer, under 1% is transfer."""
    found = _found(PIPE)
    ec, si = found["exposed_comm"], found["stage_imbalance"]
    assert ec.state is State.CLEAR and si.state is State.FIRED
    m = ec.metrics
    assert m["nccl_matched_share"] == 1.0
    assert _r(m, "nccl_share", "nccl_transfer_exposed_share", "wait_on_peer_compute_share") == (
        0.499,
        0.006,
        0.3,
    )
    assert _r(m, "wait_on_peer_work_share", "wait_coupling_share", "nccl_exposed_share") == (
        0.034,
        0.002,
        0.008,
    )
    s = si.metrics
    assert _r(s, "busy_share_rank0", "busy_share_rank1", "saving_share") == (0.958, 0.375, 0.291)
    assert si.impact == pytest.approx(s["saving_share"])
    assert si.predicted_speedup == pytest.approx(1 / s["balanced_share"], abs=1e-4)
    assert (round(s["observed_step_ms"], 1), round(s["balanced_step_ms"], 1)) == (108.0, 76.6)
    assert "lockstep_share" not in s  # GPU reports match the waits instead


def test_unmatched_kernels_read_as_communication() -> None:
    """Without the matching every NCCL kernel is all transfer, and the pipeline's waits read as
    exposed communication (as they did before the split: issue 35). No two ranks' kernels end
    within a nanosecond of each other, so a skew of 0 pairs none of them."""
    found = _found(PIPE, {"exposed_comm": {"max_end_skew_us": 1e-4}})
    assert found["exposed_comm"].metrics["nccl_matched_share"] == 0.0
    ec = found["exposed_comm"]
    assert ec.state is State.FIRED
    assert ec.metrics["nccl_exposed_share"] > 0.3
    assert ec.metrics["wait_on_peer_compute_share"] == 0.0
    assert found["stage_imbalance"].state is State.CLEAR  # nothing charged to the peer


def test_ddp_tiny_buckets_waits_are_coupling() -> None:
    """DDP with hundreds of tiny all-reduces: rank 1 waits ~0.45 ms at each for rank 0, whose
    host issues the same work (kernel counts within 12%) at its own pace: the collectives'
    coupling, communication (label exposed_comm: no_sync measured 1.43x, predicted 1.55x)."""
    found = _found(DDP)
    ec = found["exposed_comm"]
    assert ec.state is State.FIRED
    m = ec.metrics
    assert _r(m, "nccl_transfer_exposed_share", "wait_coupling_share", "nccl_exposed_share") == (
        0.02,
        0.334,
        0.354,
    )
    assert _r(m, "wait_on_peer_compute_share", "wait_on_peer_work_share") == (0.011, 0.0)
    assert ec.predicted_speedup == pytest.approx(1 / (1 - m["nccl_exposed_share"]), abs=1e-4)
    assert found["stage_imbalance"].state is State.CLEAR


def test_more_work_ratio_decides_coupling_against_imbalance() -> None:
    """The same DDP waits charged as unequal work once any late rank that issues work counts as
    having more of it (min_work_ratio 0.5): communication drops to its transfers."""
    ec = _found(DDP, {"exposed_comm": {"min_work_ratio": 0.5}})["exposed_comm"]
    assert ec.state is State.CLEAR
    assert round(ec.metrics["wait_on_peer_work_share"], 3) == 0.334
    assert round(ec.metrics["nccl_exposed_share"], 3) == 0.02


# --- synthetic: one wait, charged by what the late rank did ------------------------------------

AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
LAUNCH = "cudaLaunchKernel_v7000"
MS = 1_000_000


def _export(path: Path, kernels: list[tuple], calls: list[tuple]) -> Path:
    """kernels: (start, end, name, device, pid[, stream]); calls: (start, end, name, pid), each
    call on its process's main thread. Kernel i has correlation id i + 1; so does call i (a
    launch). NCCL kernels run on stream 13 unless given one."""
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    names = sorted({k[2] for k in kernels} | {c[2] for c in calls})
    ids = {n: i for i, n in enumerate(names, 1)}
    db.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, n) for n, i in ids.items()])
    db.execute(
        "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL,"
        " deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL,"
        " correlationId INTEGER, globalPid INTEGER, demangledName INTEGER NOT NULL,"
        " shortName INTEGER NOT NULL)"
    )
    gp = lambda pid: (1 << 56) | (pid << 24)  # noqa: E731
    db.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, 1, ?, ?, ?, ?, ?)",
        [
            (
                k[0],
                k[1],
                k[3],
                k[5] if len(k) > 5 else 13 if "nccl" in k[2] else 7,
                i + 1,
                gp(k[4]),
                ids[k[2]],
                ids[k[2]],
            )
            for i, k in enumerate(kernels)
        ],
    )
    db.execute(
        "CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT"
        " NULL, eventClass INTEGER NOT NULL, globalTid INTEGER, correlationId INTEGER,"
        " nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL, callchainId INTEGER)"
    )
    db.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 0, ?, ?, ?, 0, NULL)",
        [(s, e, gp(p) | p, i + 1, ids[n]) for i, (s, e, n, p) in enumerate(calls)],
    )
    db.commit()
    db.close()
    return path


WHOLE = {"window": {"startup_skip_share": 0.0, "find_iterations": False}}


def _wait_case(tmp_path: Path, late_gpu: str, late_host: str) -> dict[str, float]:
    """GPU 1 (pid 2) reaches an all-reduce at 1 ms, GPU 0 (pid 1) at 5 ms; both then compute.
    ``late_gpu``: what GPU 0 runs in [1, 5) ms ("compute" or "idle"); ``late_host``: what
    pid 1's host does meanwhile ("issuing": a launch call every 0.1 ms, or "away": no call)."""
    k = [(0, 1 * MS, "gemm", 1, 2), (1 * MS, 6 * MS, AR, 1, 2), (6 * MS, 10 * MS, "gemm", 1, 2)]
    k += [(0, 1 * MS, "gemm", 0, 1), (5 * MS, 6 * MS, AR, 0, 1), (6 * MS, 10 * MS, "gemm", 0, 1)]
    if late_gpu == "compute":
        k.append((1 * MS, 5 * MS, "gemm", 0, 1))
    calls = [(c, c + 10_000, LAUNCH, 1) for c in range(0, 10 * MS, MS // 10)]
    if late_host == "away":
        calls = [c for c in calls if not 1 * MS <= c[0] < 5 * MS]
    calls += [(c, c + 10_000, LAUNCH, 2) for c in range(0, 10 * MS, MS // 10)]
    path = _export(tmp_path / f"{late_gpu}_{late_host}.sqlite", k, calls)
    with T.open_trace(path) as tr:
        view = TraceView(tr, load_thresholds(WHOLE))
        ch = C.charges(view, view.steady())
        return {w: ch.ns(1, w) / MS for w in C.CHARGES}


@pytest.mark.parametrize(
    ("late_gpu", "late_host", "charged"),
    [
        ("compute", "issuing", "peer_compute"),
        ("idle", "away", "peer_host"),
        ("idle", "issuing", "coupling"),
    ],
)
def test_a_wait_is_charged_to_what_the_late_rank_did(
    tmp_path: Path, late_gpu: str, late_host: str, charged: str
) -> None:
    got = _wait_case(tmp_path, late_gpu, late_host)
    assert got[charged] == pytest.approx(4.0)  # GPU 1 waited [1, 5) ms
    assert sum(got.values()) == pytest.approx(5.0)  # and transferred [5, 6) ms


def test_the_transfer_is_what_follows_the_last_arrival(tmp_path: Path) -> None:
    got = _wait_case(tmp_path, "idle", "issuing")
    # GPU 1's kernel [1, 6) ms: waits [1, 5), transfers [5, 6); nothing of its own hides either
    assert (got["coupling"], got["transfer"]) == (pytest.approx(4.0), pytest.approx(1.0))


SR = "ncclDevKernel_SendRecv"


def test_point_to_point_lanes_take_one_peer(tmp_path: Path) -> None:
    """Two pairs of pipeline ranks, 0->2 and 1->3, their messages at the same moments: every
    receive overlaps all four lanes' kernels (and GPUs 0 and 1 come first, a wrong pair), but a
    message ends on both of its ranks at once and a send/receive lane takes one peer, so each
    receive waits for its own sender only."""
    k = []
    for step in range(4):
        t = step * 10 * MS
        for send, recv, lag, end in ((0, 2, 2 * MS, t + 5 * MS), (1, 3, 3 * MS, t + 6 * MS)):
            k.append((t + lag, end, SR, send, send + 1, 20 + send))  # the sender arrives late
            k.append((t, end, SR, recv, recv + 1, 20 + send))  # the receiver waits from t
            k.append((end, end + 3 * MS, "gemm", send, send + 1))
            k.append((end, end + 3 * MS, "gemm", recv, recv + 1))
    path = _export(tmp_path / "pairs.sqlite", k, [])
    with T.open_trace(path) as tr:
        cfg = load_thresholds(WHOLE)
        cm = C.comm(tr, C.steady(tr, cfg.window), cfg.exposed_comm)
    assert cm.lanes == 4 and cm.peer_lanes == 4 and cm.matched.all()
    waits = {d: dict(cm.waits_on(d)) for d in (2, 3)}
    assert set(waits[2]) == {0} and set(waits[3]) == {1}
    assert C.length(*waits[2][0]) == 4 * 2 * MS  # waited 2 ms a step for rank 0, not 3
    assert C.length(*waits[3][1]) == 4 * 3 * MS


# --- expectations recomputed from the export ------------------------------------------------------


def _sweep(ivs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for s, e in sorted(ivs):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        elif e > s:
            out.append([s, e])
    return [(s, e) for s, e in out]


def _covered(ivs: list[tuple[int, int]]) -> int:
    return sum(e - s for s, e in ivs)


def test_pipeline_nccl_shares_recomputed_from_the_export() -> None:
    """Not a pin: per GPU, its NCCL kernels' union over the ``measure`` window, and the part of
    it no compute kernel of its own overlaps, by plain SQL and a sweep. ``nccl_share`` is their
    mean; the exposed share (transfers and coupling waits only) is at most the uncovered part,
    and the class stays clear as the light rank's waits are on a computing peer."""
    db = sqlite3.connect(f"file:{PIPE}?mode=ro", uri=True)
    try:
        lo, hi = db.execute(
            """SELECT MIN(n.start), MAX(n."end") FROM NVTX_EVENTS n
               JOIN StringIds s ON s.id = n.textId WHERE s.value = 'measure'"""
        ).fetchone()
        rows = db.execute(
            """SELECT k.deviceId, k.start, k."end", s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k
               JOIN StringIds s ON s.id = k.shortName WHERE k."end" > ? AND k.start < ?""",
            (lo, hi),
        ).fetchall()
    finally:
        db.close()
    span = hi - lo
    nccl_shares, bare_shares = [], []
    for d in sorted({r[0] for r in rows if "nccl" in r[3].lower()}):
        mine = [(max(s, lo), min(e, hi)) for dev, s, e, _ in rows if dev == d]
        names = [n for dev, _, _, n in rows if dev == d]
        nccl = _sweep([iv for iv, n in zip(mine, names, strict=True) if "nccl" in n.lower()])
        comp = _sweep([iv for iv, n in zip(mine, names, strict=True) if "nccl" not in n.lower()])
        hidden = sum(max(0, min(e, ce) - max(s, cs)) for s, e in nccl for cs, ce in comp)
        nccl_shares.append(_covered(nccl) / span)
        bare_shares.append((_covered(nccl) - hidden) / span)
    assert len(nccl_shares) == 2
    ec = _found(PIPE)["exposed_comm"]
    assert ec.metrics["nccl_share"] == pytest.approx(sum(nccl_shares) / 2, abs=1e-12)
    assert ec.metrics["nccl_exposed_share"] <= sum(bare_shares) / 2 + 1e-12
    assert ec.state is State.CLEAR
