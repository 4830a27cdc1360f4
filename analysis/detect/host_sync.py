"""host_sync: the host blocks on the GPU inside the step, so its own work stops overlapping.

Sync calls: CUDA API calls of category ``sync`` plus blocking device-to-host copies (synchronous
``cudaMemcpy``-style calls, or any DtoH into pageable memory: ``.item()``, ``.cpu()``,
``torch.nonzero``'s size read-back), made by the threads that issue the loop's work (the
main thread, and PyTorch's autograd thread for a sync in a backward hook). A sync costs only what it
*exposes*: the host's work that would otherwise run while the GPU is busy. With ``H`` the main
thread's time outside sync calls and ``G`` the GPU's busy time, the window would take
``max(H, G)`` without the syncs (``_host``); ``sync_exposed_share`` = 1 - max(H, G) / window.
A loop that is slow because the host cannot keep up (``H`` > ``G``) gains little from dropping
its syncs, and is launch_bound's. ``sync_exposed_share`` and the blocked share are metrics, what
the host and the GPU did; they do not decide.

Rule: syncs per step (or per s without steps) >= ``min_syncs_per_step`` / ``min_syncs_per_s``
(with iterations found in the GPU work rather than the suite's steps, one may be a layer of a
transformer, not a step, so ``min_syncs_per_s`` alone also passes) makes the class a candidate,
the state this module returns; :func:`analysis.detect.diagnose` then fires it when the saving
the time model predicts for the syncs removed, ``1 - 1 / predicted_speedup``, is at least
``min_saving_share``, and that saving is the impact (``predict``).
"""

from __future__ import annotations

import numpy as np

from analysis import trace as T
from analysis.detect import view as V
from analysis.detect._needs import read_or_lacking
from analysis.detect.config import HostSyncThresholds
from analysis.findings import Finding
from bottlenecks import Klass

KLASS = Klass.HOST_SYNC


def _sync_calls(
    trace: T.Trace, st: V.Steady, act: V.Activity, loop: np.ndarray
) -> dict[str, np.ndarray]:
    """Calls overlapping the window that wait for the loop's work on the streams ``loop``
    (:func:`~analysis.detect.view.blocking_calls`), sorted by start (ties in table order); ``base`` holds
    the base names."""
    calls = V.window_api(trace, st, ("sync", "memcpy"))
    keep = V.blocking_calls(trace, act, calls, loop)
    out = {k: v[keep] for k, v in calls.items()}
    out["base"] = V.base_names(trace, out["name"])
    return out


def detect(view: V.TraceView, th: HostSyncThresholds) -> Finding:
    if isinstance(start := read_or_lacking(view, KLASS, V.RUNTIME, "CUDA API calls"), Finding):
        return start
    trace, st, act, host = start
    every = view.calls()
    loop = V.loop_streams(act, every["corr"][V.member(every["tid"], host.issuing)])
    blocking = _sync_calls(trace, st, act, loop)  # not another pipeline's waits (DALI's)
    mine = (blocking["start"] >= st.lo) & V.member(blocking["tid"], host.issuing)
    syncs = {k: v[mine] for k, v in blocking.items()}
    metrics: dict[str, float] = {}
    name, value = st.rate("syncs", syncs["start"].size)
    metrics[name] = value
    metrics["sync_exposed_share"] = host.share("sync")
    metrics["sync_blocked_share"] = host.blocked_ns / host.span_ns
    metrics["gpu_idle_share"] = host.idle_ns / host.span_ns
    metrics["host_busy_share"] = 1.0 - metrics["sync_blocked_share"]
    metrics["gpu_busy_share"] = host.gpu_busy_ns / host.span_ns
    kinds = sorted(set(syncs["base"]))
    evidence = [
        V.stamp(st, a, b, after=_sync_before(syncs, a), nvtx=V.label_at(trace, st, a, b))
        for a, b in _idle_after_syncs(trace, st, act, syncs)
    ]
    min_rate = th.min_syncs_per_step if st.per_step else th.min_syncs_per_s
    often = value >= min_rate
    if st.mode != "nvtx":  # found iterations may be one layer, not one step: the rate per s too
        often |= syncs["start"].size / (st.span_ns / 1e9) >= th.min_syncs_per_s
    reason = (
        f"{value:.2f} {name.replace('_', ' ')} on the threads issuing the loop's work ({', '.join(kinds) or 'none'}; "
        f"threshold {min_rate}{'' if often else ': too few to fire'}); blocked "
        f"{metrics['sync_blocked_share']:.1%} of the window, host busy "
        f"{metrics['host_busy_share']:.1%}, GPU busy {metrics['gpu_busy_share']:.1%}, GPU idle "
        f"{metrics['gpu_idle_share']:.1%}; {st.note}"
    )
    # a candidate when the syncs are frequent: the decide step settles it on the saving
    return Finding(KLASS, bool(often), metrics["sync_exposed_share"], metrics, evidence, reason)


def _sync_before(syncs: dict[str, np.ndarray], t: int) -> str:
    j = int(np.searchsorted(syncs["start"], t, side="right")) - 1
    return str(syncs["base"][j]) if j >= 0 else ""


def _idle_after_syncs(trace, st, act, syncs) -> list[tuple[int, int]]:
    """The three longest GPU-idle gaps that start while a sync call blocks."""
    bs, be = V.busy(trace, st, act)
    gs, ge = V.gaps(bs, be, st.lo, st.hi)
    ss, se = syncs["start"], syncs["end"]
    if ss.size == 0 or gs.size == 0:
        return []
    after = V.search(ss, gs, side="right")  # the gaps come sorted
    j = np.maximum(after - 1, 0)
    hit = (after > 0) & (gs <= se[j])
    idx = np.flatnonzero(hit)
    top = idx[V.top(ge[idx] - gs[idx])]
    return [(int(gs[i]), int(ge[i])) for i in top]
