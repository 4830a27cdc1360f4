"""blocking_io: checkpoint and log writes on the training thread stop the loop.

``torch.save`` of the weights every N steps, ``np.save`` of an activation, a per-step log
flushed and fsynced: on the loop thread, each copies its tensors to the host (blocking
device-to-host copies that drain the stream), serialises them and writes the file while the GPU
has nothing queued. The detector reads the loop thread's write runs
(:func:`analysis.detect.view.write_runs`: its write-side OS-runtime calls, ``write``,
``writev``, ``pwrite64``, ``fsync``..., chained while close together), the device-to-host bytes
copied in them or just before them, and the GPU idle during them. A save another thread writes (an async checkpoint) still costs the
loop thread its part (:func:`analysis.detect.view.offloaded_saves`): the stager's blocking
device-to-host copies to pageable memory, pinned-host allocations, and the next save's wait for
the last one's writer; those stretches count as the loop's save. Runs covering at least
``min_write_share`` of the window make the class a candidate; the decide step fires it on the
saving the time model predicts for the writes gone (cause ``io``: the runs' host time and their
copies removed, the periodic cost spread over the period's iterations by the replay's mean).
"""

from __future__ import annotations

import numpy as np

from analysis.detect import view as V
from analysis.detect._needs import read_or_lacking
from analysis.detect.config import BlockingIoThresholds
from analysis.findings import Finding
from bottlenecks import Klass

KLASS = Klass.BLOCKING_IO
#: What the class reads beside the host view, as a report that lacks it is told.
_OSRT_CALLS = "OS-runtime calls (nsys --trace osrt)"


def detect(view: V.TraceView, th: BlockingIoThresholds) -> Finding:
    if isinstance(start := read_or_lacking(view, KLASS, V.OSRT, _OSRT_CALLS), Finding):
        return start
    trace, st, act, host = start
    ws, we = V.write_runs(trace, view.config, st, host.tid)
    ws, we = np.clip(ws, st.lo, st.hi), np.clip(we, st.lo, st.hi)
    os_, oe = V.offloaded_saves(trace, view.config, st, host.tid, act, view.calls())
    os_, oe = np.clip(os_, st.lo, st.hi), np.clip(oe, st.lo, st.hi)
    near = V.near_writes(trace, view.config, st, host.tid)
    ns, ne = V.union(np.concatenate([near[0], os_]), np.concatenate([near[1], oe]))
    d2h = (act.kind == V.KIND_MEMCPY) & (act.direction == V.DTOH)
    in_save = d2h & (V.overlap_each(act.start, np.maximum(act.end, act.start + 1), ns, ne) > 0)
    bs, be = V.busy(trace, st, act)
    gs, ge = V.gaps(bs, be, st.lo, st.hi)
    idle = int(V.overlap_each(gs, ge, *V.union(ns, ne)).sum()) if gs.size and ns.size else 0
    metrics: dict[str, float] = {}
    name, value = st.rate("write_runs", ws.size)
    metrics[name] = value
    metrics["blocking_io_share"] = (
        V.length(*V.union(np.concatenate([ws, os_]), np.concatenate([we, oe]))) / st.span_ns
    )
    metrics["offloaded_save_share"] = V.length(os_, oe) / st.span_ns
    metrics["gpu_idle_in_io_share"] = idle / st.span_ns
    metrics["d2h_bytes_in_io"] = float(act.nbytes[in_save].sum())
    often = metrics["blocking_io_share"] >= th.min_write_share
    rs, re_ = V.union(np.concatenate([ws, os_]), np.concatenate([we, oe]))
    longest = np.argsort(-(re_ - rs), kind="stable")[:3]
    evidence = [V.stamp(st, int(rs[i]), int(re_[i])) for i in longest]
    period = f", one every {st.span_ns / rs.size / 1e6:.0f} ms" if rs.size else ""
    own = f"writes files in {ws.size} runs" if ws.size or not os_.size else ""
    offloaded = (
        f"{' and ' if own else ''}stages or waits for saves another thread writes in "
        f"{os_.size} stretches" + (f" ({metrics['offloaded_save_share']:.1%})" if own else "")
        if os_.size
        else ""
    )
    reason = (
        f"the loop thread {own}{offloaded}{period} "
        f"({metrics['blocking_io_share']:.1%} of the window; threshold {th.min_write_share:.1%}"
        f"{'' if often else ': too little to fire'}), with "
        f"{metrics['d2h_bytes_in_io'] / 1e6:.1f} MB copied device-to-host for them and the GPU "
        f"idle {metrics['gpu_idle_in_io_share']:.1%} of the window beside them; {st.note}"
    )
    return Finding(KLASS, bool(often), metrics["blocking_io_share"], metrics, evidence, reason)
