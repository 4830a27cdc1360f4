"""data_stall: the GPU sits idle while the host prepares the next batch.

Rule (NVTX steps): GPU idle share of the window (1 - union of kernel/memcpy/memset busy time)
>= ``min_gpu_idle_share`` AND the host's ``data_load`` ranges on the step thread cover
>= ``min_data_load_share`` of step time. impact = GPU-idle time inside ``data_load`` / step time.
Without NVTX: ``data_load_share`` is the share of the window in GPU-idle gaps of at least
``min_gap_ms`` during which a thread that launches kernels makes an OS-runtime file call (the
training thread itself is reading input).
CPU exports (no kernel table): ``data_load_share`` from NVTX alone, and it is also the impact.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from analysis import trace as T
from analysis.detect import _common as C
from analysis.findings import Finding

KLASS = "data_stall"


def _data_load(trace: T.Trace, st: C.Steady, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Union of the ``data_load`` ranges on the step thread, clipped to the window."""
    r = T.step_ranges(trace, name)  # the ranges called `name` (selected in SQL)
    r = r[(r["global_tid"] == st.step_tid) & r["end_ns"].notna()].astype({"end_ns": "int64"})
    return C.union(r["start_ns"].clip(lower=st.lo), r["end_ns"].clip(upper=st.hi))


def _file_io(trace: T.Trace, st: C.Steady, calls: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Union of OS-runtime file calls overlapping the window, made by the threads that launch
    kernels in it: input read on the critical path (a loader worker's reads overlap compute)."""
    if not trace.has("OSRT_API") or not calls:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    marks = ", ".join(f":n{i}" for i in range(len(calls)))
    rows = trace.query(
        f"SELECT id FROM StringIds WHERE value IN ({marks})",
        {f"n{i}": c for i, c in enumerate(calls)},
    )[1]
    launchers = C.launcher_tids(trace, st.lo, st.hi)
    if not rows or launchers.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    where = (
        f"{C.WINDOW} AND t.nameId IN ({C.id_list(r[0] for r in rows)}) "
        f"AND t.globalTid IN ({C.id_list(launchers)})"
    )
    io = T.int_columns(
        trace,
        "OSRT_API",
        {"start": "t.start", "end": 't."end"'},
        where,
        {"lo": st.lo, "hi": st.hi},
        few=True,
    )
    return C.union(np.clip(io["start"], st.lo, None), np.clip(io["end"], None, st.hi))


def detect(trace: T.Trace, thresholds: Mapping[str, Any]) -> Finding:
    th = thresholds[KLASS]
    st = C.steady(trace, thresholds)
    has_gpu = trace.has(C.KERNEL)
    metrics: dict[str, float] = {}
    evidence: list[dict[str, Any]] = []

    if not has_gpu:
        if st.mode != "nvtx":
            return C.missing(KLASS, C.KERNEL, "CUDA kernels and no NVTX steps")
        ls, le = _data_load(trace, st, th["range_name"])
        share = C.length(ls, le) / st.step_ns
        metrics["data_load_share"] = share
        metrics["data_load_ms_per_step"] = C.length(ls, le) / 1e6 / st.n_steps  # type: ignore[operator]
        top = np.argsort(-(le - ls), kind="stable")[:3]
        evidence = [C.stamp(st, ls[i], le[i], nvtx=th["range_name"]) for i in top]
        fired = share >= th["min_data_load_share"]
        reason = (
            f"no kernel table (CPU export): judged on NVTX alone; {th['range_name']} covers "
            f"{share:.1%} of step time ({'>=' if fired else '<'} {th['min_data_load_share']:.0%})"
        )
        return Finding(KLASS, fired, share if fired else 0.0, metrics, evidence, reason)

    act = C.gpu_activity(trace, st.lo, st.hi)
    bs, be = C.busy(trace, st, act)
    gs, ge = C.gaps(bs, be, st.lo, st.hi)
    idle = C.length(gs, ge) / st.span_ns
    metrics["gpu_idle_share"] = idle

    if st.mode == "nvtx":
        ls, le = _data_load(trace, st, th["range_name"])
        load_share = C.length(ls, le) / st.step_ns
        idle_in_load = float(C.overlap_each(gs, ge, ls, le).sum()) / st.step_ns
        source = f"NVTX `{th['range_name']}` ranges"
    else:
        fs, fe = _file_io(trace, st, list(th["file_calls"]))
        long = (ge - gs) >= th["min_gap_ms"] * 1e6
        with_io = C.overlap_each(gs, ge, fs, fe) > 0
        load_share = C.length(gs[long & with_io], ge[long & with_io]) / st.span_ns
        idle_in_load = load_share
        source = f"GPU-idle gaps >= {th['min_gap_ms']} ms with file I/O on the launching thread (no NVTX)"
    metrics["data_load_share"] = load_share
    metrics["gpu_idle_in_data_load_share"] = idle_in_load

    top = np.argsort(-(ge - gs), kind="stable")[:3]
    evidence = [C.stamp(st, gs[i], ge[i], nvtx=C.label_at(trace, st, gs[i], ge[i])) for i in top]
    fired = idle >= th["min_gpu_idle_share"] and load_share >= th["min_data_load_share"]
    reason = (
        f"GPU idle {idle:.1%} of the window (threshold {th['min_gpu_idle_share']:.0%}); "
        f"data loading ({source}) {load_share:.1%} of step time "
        f"(threshold {th['min_data_load_share']:.0%}); {st.note}"
    )
    return Finding(KLASS, fired, idle_in_load if fired else 0.0, metrics, evidence, reason)
