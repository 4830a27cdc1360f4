"""GPU work per step: how many kernels a step launches and how long the GPU needs for them.

The analytic limit of a launch-bound scenario (``kernel_flood``) is the GPU time its kernels
take when nothing else is in the way: the sum of the baseline's kernel durations per step, from
its own trace. The same numbers on a fix show what it changed (``cuda_graphs`` keeps the kernels,
``torch_compile`` fuses them into fewer). One function, one tidy row per export; units in the
column names. A CUDA graph traced at graph level (nsys's default) is one item in
``CUPTI_ACTIVITY_KIND_GRAPH_TRACE`` whose inner kernels are not listed: each replay counts as
one kernel whose duration is the replay's span (``graph_replays_per_step`` says how many).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from analysis import trace as T
from analysis.detect import _common as C
from analysis.detect import load_thresholds

#: Columns of :func:`gpu_work`'s row.
COLUMNS = (
    "window_mode",
    "steps",
    "window_ms",
    "kernels_per_step",
    "kernel_ms_per_step",
    "gpu_busy_ms_per_step",
    "copies_per_step",
    "median_kernel_us",
    "graph_replays_per_step",
)


def gpu_work(trace: T.Trace, thresholds: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """One row: kernels per step, their summed duration (the kernel-sum limit), the GPU's busy
    time (union of kernels, copies and memsets) and copies per step, over the detectors' steady
    window. Without NVTX steps (an arbitrary report) the per-step columns are per second of the
    window instead, and ``window_mode`` says ``activity``.

    Raises :class:`analysis.trace.TraceError` when the export has no GPU activity (a CPU
    capture): there is no GPU work to count, and an empty row would read as "no work".
    """
    if not C.has_gpu(trace):
        raise T.TraceError(
            f"{trace.path}: no GPU activity (no kernel, copy or graph tables): a CPU capture or "
            "--trace without cuda"
        )
    st, act = C.steady_activity(trace, load_thresholds(thresholds))
    graphs = act.kind == C.KIND_GRAPH
    kernels = (act.kind == C.KIND_KERNEL) | graphs
    copies = act.kind == C.KIND_MEMCPY
    durations = (act.end - act.start)[kernels]
    bs, be = C.busy(trace, st, act)
    per = float(st.n_steps) if st.per_step else st.span_ns / 1e9
    row = {
        "window_mode": st.mode,
        "steps": st.n_steps if st.per_step else None,
        "window_ms": st.span_ns / 1e6,
        "kernels_per_step": int(kernels.sum()) / per,
        "kernel_ms_per_step": float(durations.sum()) / 1e6 / per,
        "gpu_busy_ms_per_step": C.length(bs, be) / 1e6 / per,
        "copies_per_step": int(copies.sum()) / per,
        "median_kernel_us": float(np.median(durations)) / 1e3 if durations.size else float("nan"),
        "graph_replays_per_step": int(graphs.sum()) / per,
    }
    return pd.DataFrame([row], columns=list(COLUMNS))
