"""host_sync: the host blocks on the GPU inside the step, draining its queue every time.

Sync calls: CUDA API calls of category ``sync`` plus blocking device-to-host copies (synchronous
``cudaMemcpy``-style calls, or any DtoH into pageable memory). A GPU-idle gap is *exposed by a
sync* when it starts while a sync call is blocking and the same thread issues its next CUDA call
within ``resume_us`` of the sync returning (it went straight back to GPU work, so the idle is the
drained queue, not some other host phase such as data loading). Rule: syncs per step (or per s
without steps) >= ``min_syncs_per_step`` / ``min_syncs_per_s`` AND exposed gaps cover
>= ``min_sync_exposed_share`` of the window. impact = sync_exposed_share.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from analysis import trace as T
from analysis.detect import _common as C
from analysis.findings import Finding

KLASS = "host_sync"


def detect(trace: T.Trace, thresholds: Mapping[str, Any]) -> Finding:
    th = thresholds[KLASS]
    if not trace.has(C.RUNTIME):
        return C.missing(KLASS, C.RUNTIME, "CUDA API calls")
    st, act = C.steady_activity(trace, thresholds)
    api = C.api_calls(trace, st.lo, st.hi)
    copies = act.loc[act["kind"] == "memcpy", ["correlation_id", "direction", "pageable"]]
    api = api.merge(copies.drop_duplicates("correlation_id"), on="correlation_id", how="left")
    blocking_d2h = (
        (api["category"] == "memcpy")
        & (api["direction"] == "DtoH")
        & (
            ~api["base_name"].str.contains("Async", na=False)
            | api["pageable"].fillna(False).astype(bool)
        )
    )
    is_sync = (api["category"] == "sync") | blocking_d2h
    syncs = api[is_sync & (api["start_ns"] >= st.lo)].sort_values("start_ns", kind="stable")
    metrics: dict[str, float] = {}
    name, value = st.rate("syncs", len(syncs))
    metrics[name] = value
    # the same thread's next CUDA call after each sync returns
    others = api[~is_sync].sort_values("start_ns", kind="stable")
    nxt = pd.merge_asof(
        syncs[["end_ns", "global_tid"]].sort_values("end_ns").reset_index(),
        others[["start_ns", "global_tid"]].rename(columns={"start_ns": "next_ns"}),
        left_on="end_ns", right_on="next_ns", by="global_tid", direction="forward",
    ).set_index("index").reindex(syncs.index)  # fmt: skip
    resumes = (nxt["next_ns"] - syncs["end_ns"]).to_numpy(dtype=float, na_value=np.inf)
    quick = resumes <= th["resume_us"] * 1e3
    bs, be = C.union(act["start_ns"], act["end_ns"])
    gs, ge = C.gaps(bs, be, st.lo, st.hi)
    gs, ge = gs[gs > st.lo], ge[gs > st.lo]  # a gap at the window's edge has no start to judge
    ss = syncs["start_ns"].to_numpy()
    se = syncs["end_ns"].to_numpy()
    j = np.searchsorted(ss, gs, side="right") - 1
    jj = np.clip(j, 0, None)
    exposed = (j >= 0) & (gs <= se[jj]) & quick[jj] if len(ss) else np.zeros(gs.size, bool)
    metrics["sync_exposed_share"] = C.length(gs[exposed], ge[exposed]) / st.span_ns
    metrics["sync_blocked_share"] = C.length(*C.union(ss, se)) / st.span_ns
    idx = np.flatnonzero(exposed)
    top = idx[np.argsort(-(ge[idx] - gs[idx]), kind="stable")[:3]]
    evidence = [
        C.stamp(st, gs[i], ge[i], after=str(syncs["base_name"].iloc[jj[i]]),
                nvtx=C.label_at(trace, st, gs[i], ge[i]))
        for i in top
    ]  # fmt: skip
    min_rate = th["min_syncs_per_step"] if st.per_step else th["min_syncs_per_s"]
    fired = value >= min_rate and metrics["sync_exposed_share"] >= th["min_sync_exposed_share"]
    reason = (
        f"{value:.2f} {name.replace('_', ' ')} (threshold {min_rate}); GPU idle right after a "
        f"sync {metrics['sync_exposed_share']:.1%} of the window (threshold "
        f"{th['min_sync_exposed_share']:.0%}); {st.note}"
    )
    return Finding(
        KLASS, fired, metrics["sync_exposed_share"] if fired else 0.0, metrics, evidence, reason
    )
