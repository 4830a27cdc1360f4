"""Which threads issue the loop's work, and calls that wait for the device before their own work,
on real H200 corpus exports (corpus/wild/README.md, "Two launch_bound primaries").

- The loop's threads take turns within a step (the main thread's forward, PyTorch's autograd
  thread's backward): read on a part of the window, a sub-step window's threads are half seen.
- A 2-rank export holds two processes whose stream ids and CUPTI correlation ids coincide:
  another rank's threads and kernels are not this loop's.
- A synchronous cudaFree, and a launch that loads its kernel first (lazy loading), wait for the
  device: a host that issued instantly would still wait there.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from analysis import trace as T
from analysis.detect import diagnose, load_thresholds
from analysis.detect import timemodel as TM
from analysis.detect import view as V
from analysis.detect.timemodel import _replay as M
from analysis.detect.view import _host as H
from bottlenecks import Klass
from tests._fixtures import sqlite_fixture

EXPORTS = Path(__file__).resolve().parents[1] / "corpus" / "wild" / "exports"


def _open(name: str) -> T.Trace:
    return T.open_trace(sqlite_fixture(name, EXPORTS))


def _pid(gtid: np.ndarray) -> np.ndarray:
    return (np.asarray(gtid, np.int64) >> 24) & 0xFFFFFF


def test_the_loops_threads_are_read_over_the_whole_window() -> None:
    """ue_layernorm_gelu's window is 18 sub-step iterations whose first fifth holds the backward
    alone (the autograd thread's launches): the main thread, which launches the forward and the
    optimizer, issues beside it all the same, and without it missing from the replay's host
    launch_bound does not fire (a CUDA-graphs switch measured 1.01x; fusing 1.83x)."""
    cfg = load_thresholds(None)
    with _open("ue_layernorm_gelu") as tr:
        st, act = V.steady_activity(tr, cfg.window)
        main, issuing = V.issuing_threads(tr, st, act, cfg.host.min_launch_share)
        first, _ = H._who_launched(tr, st, st.lo, st.lo + (st.hi - st.lo) // 5)
        found = {f.klass: f for f in diagnose(tr, cfg, step_ms=17.507)}
    assert main == st.step_tid and len(issuing) == 2, (main, issuing)
    assert set(first.tolist()) == set(issuing.tolist()) - {main}  # the fifth: the backward alone
    fired = sorted((f for f in found.values() if f.fired), key=lambda f: -f.impact)
    assert [f.klass for f in fired] == [Klass.UNFUSED_ELEMENTWISE], [f.reason for f in fired]
    assert found[Klass.LAUNCH_BOUND].predicted_speedup < 1.1


def test_another_ranks_threads_and_kernels_are_not_the_loops() -> None:
    """ddp_exposed_comm holds both ranks (one process each, on devices 0 and 1, each rank's
    compute stream id 7, correlation ids over the same range): the issuing threads are the main
    thread's process's, and each GPU item joins a call of its own device's process."""
    cfg = load_thresholds(None)
    with _open("ddp_exposed_comm") as tr:
        st, act = V.steady_activity(tr, cfg.window)
        main, issuing = V.issuing_threads(tr, st, act, cfg.host.min_launch_share)
        found, tids = V.caller_tids(tr, st, act.corr)
    assert set(_pid(issuing).tolist()) == {int(_pid(np.array([main]))[0])}, issuing
    pids = _pid(tids)
    per_device = {int(d): set(pids[act.device[found] == d].tolist()) for d in np.unique(act.device)}
    assert len(per_device) == 2 and all(len(p) == 1 for p in per_device.values()), per_device
    assert per_device[0] != per_device[1]


def test_a_launch_that_loads_its_kernel_waits_for_the_device() -> None:
    """ddp_exposed_comm's window holds the first optimizer step's kernel loads: a 135 ms launch
    behind the all-reduce that waited 157 ms for the other rank, and a 16.6 ms one. Replayed as
    waits for the device the window is reproduced (read as a capped launch the compute stream
    ran ahead of the all-reduce: a fit of 0.48, launch_bound 5.5x); hs_item_checks' slow
    launches onto an idle GPU waited for nothing and are none."""
    cfg = load_thresholds(None)
    with _open("ddp_exposed_comm") as tr:
        view = V.TraceView(tr, cfg)
        tl = TM.timeline(view)
        found = {f.klass: f for f in diagnose(tr, cfg)}
    loads = tl.drains & (tl.cat == V.LAUNCH)
    assert sorted((tl.own[loads] // 1_000_000).tolist()) == [16, 135]
    assert found[Klass.LAUNCH_BOUND].metrics["model_fit"] > 0.85
    assert not found[Klass.LAUNCH_BOUND].fired and found[Klass.EXPOSED_COMM].fired
    with _open("hs_item_checks") as tr:
        tl = TM.timeline(V.TraceView(tr, cfg))
    assert not (tl.drains & (tl.cat == V.LAUNCH)).any()


def test_a_synchronous_free_waits_for_the_queued_work() -> None:
    """ac_empty_cache_varlen's ``empty_cache()`` frees every cached segment a step (cudaFree:
    a device sync first). With the launches removed and the frees kept, the frees wait for the
    queued kernels: launch_bound predicts less than `graphs`, which removed the launches and the
    churn together, measured (1.71x; it claimed 1.88x when the frees ran beside the queue), and
    allocator_churn (nocall 1.73x) reads first."""
    cfg = load_thresholds(None)
    with _open("ac_empty_cache_varlen") as tr:
        tl = TM.timeline(V.TraceView(tr, cfg))
        found = {f.klass: f for f in diagnose(tr, cfg, step_ms=35.142)}
    frees = tl.drains & tl.alloc_call
    assert frees.sum() >= 10 * 30  # ~33 frees a step over the 10 replayed steps
    rm = M.removal(tl, "launch")
    waits = M.replay(tl, rm).total_ns
    beside = M.replay(replace(tl, drains=np.zeros(tl.n_ops, bool)), rm).total_ns
    assert waits > 1.15 * beside, (waits, beside)  # the allocator's time no longer hidden
    assert found[Klass.LAUNCH_BOUND].predicted_speedup < 1.71
    fired = sorted((f for f in found.values() if f.fired), key=lambda f: -f.impact)
    assert fired[0].klass == Klass.ALLOCATOR_CHURN, [(f.klass, f.impact) for f in fired]
