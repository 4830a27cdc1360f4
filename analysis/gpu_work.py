"""GPU work per step: how many kernels a step launches and how long the GPU needs for them.

The analytic limit of a launch-bound scenario (``kernel_flood``) is the GPU time its kernels
take when nothing else is in the way: the sum of the baseline's kernel durations per step, from
its own trace. The same numbers on a fix show what it changed (``cuda_graphs`` keeps the kernels,
``torch_compile`` fuses them into fewer). One function, one tidy row per export; units in the
column names. A CUDA graph traced at graph level (nsys's default) is one item in
``CUPTI_ACTIVITY_KIND_GRAPH_TRACE`` whose inner kernels are not listed: each replay counts as
one kernel whose duration is the replay's span (``graph_replays_per_step`` says how many).

Side-stream work: kernels and copies on CUDA streams the training loop's thread never launches
onto, launched by other threads (a GPU input pipeline such as DALI's decoders, a prefetcher on a
stream of its own, communication on NCCL's streams). PyTorch's autograd thread launches the
backward onto the loop's stream, so it counts as the step's own work. For a variant beside an
``ideal`` (which trains on data already on the GPU), that work bounds how close it can come:
the GPU must run the ideal's work plus the side kernels in each step
(:func:`add_side_bound`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from analysis import trace as T
from analysis.detect import load_thresholds
from analysis.detect import view as V

#: Columns of :func:`gpu_work`'s row.
COLUMNS = (
    "window_mode",
    "steps",
    "window_ms",
    "kernels_per_step",
    "kernel_ms_per_step",
    "gpu_busy_ms_per_step",
    "gpu_idle_ms_per_step",
    "copies_per_step",
    "median_kernel_us",
    "graph_replays_per_step",
    "side_streams",
    "side_kernel_ms_per_step",
    "side_busy_ms_per_step",
    "side_copies_per_step",
)


def gpu_work(trace: T.Trace, thresholds: Any = None) -> pd.DataFrame:
    """One row: kernels per step, their summed duration (the kernel-sum limit), the GPU's busy
    time (union of kernels, copies and memsets) and the rest of the step it idles, copies per
    step, and the side-stream work (see the module's docstring), over the detectors' steady
    window. Without NVTX steps (an arbitrary report) the per-step columns are per second of the
    window instead, and ``window_mode`` says ``activity``.

    Raises :class:`analysis.trace.TraceError` when the export has no GPU activity (a CPU
    capture): there is no GPU work to count, and an empty row would read as "no work".
    """
    if not V.has_gpu(trace):
        raise T.TraceError(
            trace.path,
            "no GPU activity (no kernel, copy or graph tables): a CPU capture or --trace without "
            "cuda",
        )
    st, act = V.steady_activity(trace, load_thresholds(thresholds).window)
    graphs = act.kind == V.KIND_GRAPH
    kernels = (act.kind == V.KIND_KERNEL) | graphs
    copies = act.kind == V.KIND_MEMCPY
    durations = (act.end - act.start)[kernels]
    bs, be = V.busy(trace, st, act)
    per = float(st.n_steps) if st.per_step else st.span_ns / 1e9
    side = side_stream_rows(trace, st, act)
    sbs, sbe = V.union(act.start[side], act.end[side])
    row = {
        "window_mode": st.mode,
        "steps": st.n_steps if st.per_step else None,
        "window_ms": st.span_ns / 1e6,
        "kernels_per_step": int(kernels.sum()) / per,
        "kernel_ms_per_step": float(durations.sum()) / 1e6 / per,
        "gpu_busy_ms_per_step": V.length(bs, be) / 1e6 / per,
        "gpu_idle_ms_per_step": (st.span_ns - V.length(bs, be)) / 1e6 / per
        if st.per_step
        else None,
        "copies_per_step": int(copies.sum()) / per,
        "median_kernel_us": float(np.median(durations)) / 1e3 if durations.size else float("nan"),
        "graph_replays_per_step": int(graphs.sum()) / per,
        "side_streams": int(np.unique(act.stream[side]).size),
        "side_kernel_ms_per_step": float((act.end - act.start)[side & kernels].sum()) / 1e6 / per,
        "side_busy_ms_per_step": V.length(sbs, sbe) / 1e6 / per,
        "side_copies_per_step": int((side & copies).sum()) / per,
    }
    return pd.DataFrame([row], columns=list(COLUMNS))


def side_stream_rows(trace: T.Trace, st: V.Steady, act: V.Activity) -> np.ndarray:
    """Mask of the window's activity on streams the loop's thread never launches onto (stream
    0 stands for 'no stream recorded', as memsets have none: never side work)."""
    launchers = V.launcher_tids(trace, st.lo, st.hi)
    if not launchers.size or not len(act):
        return np.zeros(len(act), dtype=bool)
    if st.step_tid is not None and st.step_tid in set(launchers.tolist()):
        loop = int(st.step_tid)  # the thread that runs the steps
    else:
        loop = int(V.launcher_tids(trace, st.lo, st.hi, most_first=True)[0])
    found, tids = V.caller_tids(trace, st, act.corr)
    by_loop = np.zeros(len(act), dtype=bool)
    by_loop[np.flatnonzero(found)[tids == loop]] = True
    own = np.unique(act.stream[by_loop])
    return (act.stream != 0) & ~np.isin(act.stream, own)


def add_side_bound(table: pd.DataFrame) -> pd.DataFrame:
    """``gpu_work.csv``'s rows with ``side_bound_share_of_ideal`` for every variant of a
    scenario that has an ``ideal`` row: the share of ideal's speed the variant can reach at
    most when the GPU has to run ideal's work plus the variant's side-stream kernels each step,
    ideal's step / max(ideal's step, ideal's GPU busy time + side kernel time) (1 when there is
    no side work). ``table`` needs ``scenario``, ``kind``, ``step_ms_mean`` and the columns of
    :data:`COLUMNS`; other rows get NaN."""
    out = table.copy()
    out["side_bound_share_of_ideal"] = np.nan
    need = {"scenario", "kind", "step_ms_mean", "gpu_busy_ms_per_step", "side_kernel_ms_per_step"}
    if out.empty or not need <= set(out.columns):
        return out
    for _, group in out.groupby("scenario", sort=False):
        ideal = group[group["kind"] == "ideal"]
        if ideal.empty or pd.isna(ideal["gpu_busy_ms_per_step"].iloc[0]):
            continue
        step = float(ideal["step_ms_mean"].iloc[0])
        busy = float(ideal["gpu_busy_ms_per_step"].iloc[0])
        need_ms = np.maximum(step, busy + group["side_kernel_ms_per_step"].astype(float))
        out.loc[group.index, "side_bound_share_of_ideal"] = step / need_ms
    return out
