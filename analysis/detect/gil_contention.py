"""gil_contention: the launching thread waits for the GIL while another Python thread of the
process holds it.

CPython lets one thread run Python at a time. A thread that wants the GIL while another holds
it waits on a condition variable for one switch interval (``sys.getswitchinterval()``, 5 ms),
then asks the holder to let go and waits again. A training loop's thread lets go of the GIL in
every CUDA launch, in the backward and in every blocking call; when another Python thread of the
process is busy in Python (a metrics or logging thread, a threaded prefetcher, a tokenizer),
it takes the GIL each time, and the loop thread waits up to a switch interval before it can
launch its next kernel, while the GPU runs out of queued work.

Where the waits are read, in this order:

- nsys's Python GIL trace (``--trace=...,python-gil``, nsys 2024+): ranges in the NVTX domain
  ``trace_domain`` ("GIL Trace"), ``wait_ranges`` ("Waiting for GIL") and ``hold_ranges``
  ("Holding GIL") per thread; the holders are read too (``gil_holder_share``: how much of the
  waiting another thread of the process spends holding the GIL);
- else the OS-runtime calls (``--trace=...,osrt``): the launching thread's ``wait_calls``
  (``pthread_cond_timedwait`` / ``clockwait``: CPython's GIL wait; its queues and locks wait on
  semaphores instead, and a C++ timed wait of PyTorch or NCCL runs on threads of their own),
  each no longer than ``max_call_ms``;
- neither: not judged.

The reading itself (:func:`~analysis.detect.view.read_waits`) is the trace view's: its host
view sets the waits apart from other host time, and the time model cuts them out of the gaps.

The launching thread is the host view's main thread; on a CPU capture, the suite's
step thread. Only its waits count: other threads waiting for the GIL (a log shipper waking from
its sleep) cost the loop nothing.

GPU captures: with ``W`` the launching thread's GIL waits, ``H`` its time outside syncs and ``G``
the GPU's busy time, removing the waits saves the GPU idle they cover, and at least
``min(W, H - G)`` when the host is the slower side: ``gil_saving_share``, a reading off the
window, kept as a metric beside ``gil_wait_share``; they do not decide. Where the waits can be
read the class is a candidate (the state this module returns): :func:`analysis.detect.diagnose`
fires it when the saving the time model predicts for the waits cut out of the launching threads'
gaps, ``1 - 1 / predicted_speedup``, is at least ``min_saving_share``, and that saving is the
impact (``predict``). CPU captures (the suite's steps, no GPU, no model): the waits' share of
step time is the class's number, fired at ``min_cpu_wait_share``.
"""

from __future__ import annotations

from typing import Any

from analysis import trace as T
from analysis.detect import view as V
from analysis.detect.config import GilContentionThresholds
from analysis.findings import Finding, State, missing
from bottlenecks import STEP, Klass

__all__ = ["KLASS", "detect"]

KLASS = Klass.GIL_CONTENTION


def detect(view: V.TraceView, th: GilContentionThresholds) -> Finding:
    trace, st = view.trace, view.steady()
    if not view.has_gpu:
        if st.mode != "nvtx" or st.step_tid is None:
            return missing(KLASS, V.KERNEL, "GPU activity and no NVTX steps")
        waits = V.read_waits(trace, st, st.step_tid, th)
        return _nvtx_only(trace, st, th, waits) if waits else _not_judged()
    host = view.host()
    if host is None:
        return missing(KLASS, V.RUNTIME, "CUDA API calls (no main thread to read)")
    waits = V.read_waits(trace, st, host.tid, th, host.issuing)
    if waits is None:
        return _not_judged()
    return _on_gpu(view, st, host, waits)


def _not_judged() -> Finding:
    return Finding(
        KLASS,
        State.NOT_JUDGED,
        reason="the report has neither OS-runtime calls (--trace=osrt) nor nsys's Python GIL "
        "trace (--trace=python-gil), so GIL waits cannot be seen",
    )


def _metrics(st: V.Steady, waits: V.GilWaits, span_ns: int) -> dict[str, float]:
    name, rate = st.rate("gil_waits", waits.count)
    out = {"gil_wait_share": waits.total_ns / max(1, span_ns), name: rate}
    if waits.holder_share is not None:
        out["gil_holder_share"] = waits.holder_share
    return out


def _evidence(trace: T.Trace, st: V.Steady, waits: V.GilWaits) -> list[dict[str, Any]]:
    top = V.top(waits.ends - waits.starts)
    return [
        V.stamp(
            st,
            waits.starts[i],
            waits.ends[i],
            nvtx=V.label_at(trace, st, waits.starts[i], waits.ends[i]),
        )
        for i in top
    ]


def _on_gpu(view: V.TraceView, st: V.Steady, host: V.HostView, waits: V.GilWaits) -> Finding:
    trace, act = view.trace, view.activity()
    gs, ge = V.gaps(*V.busy(trace, st, act), st.lo, st.hi)
    idle_in_waits = V.overlap_total(gs, ge, waits.starts, waits.ends)
    host_ns = host.span_ns - host.blocked_ns
    own_pace = min(waits.total_ns, max(0, host_ns - host.gpu_busy_ns))
    saving = max(idle_in_waits, own_pace) / host.span_ns
    metrics = _metrics(st, waits, host.span_ns)
    metrics |= {
        "gil_saving_share": saving,
        "gpu_idle_in_gil_wait_share": idle_in_waits / host.span_ns,
        "gpu_idle_share": host.idle_ns / host.span_ns,
    }
    reason = (
        f"the launching threads wait for the GIL {metrics['gil_wait_share']:.1%} of the window "
        f"({waits.count} waits read from {_source_words(waits)}{_holders(waits)}); the GPU is "
        f"idle {metrics['gpu_idle_in_gil_wait_share']:.1%} of the window during them; {st.note}"
    )
    # a candidate: the decide step settles it on the predicted saving
    return Finding(KLASS, True, saving, metrics, _evidence(trace, st, waits), reason)


def _nvtx_only(
    trace: T.Trace, st: V.Steady, th: GilContentionThresholds, waits: V.GilWaits
) -> Finding:
    """A CPU capture: the step thread's GIL waits inside its steps, as a share of step time."""
    ss, se = V.suite_ranges(trace, st, STEP)
    inside = V.overlap_total(waits.starts, waits.ends, ss, se)
    share = inside / max(1, st.step_ns)
    metrics = _metrics(st, waits, st.step_ns) | {"gil_wait_share": share}
    metrics["gil_wait_ms_per_step"] = inside / 1e6 / max(1, st.n_steps or 0)
    fired = share >= th.min_cpu_wait_share
    reason = (
        f"no GPU activity (CPU capture): judged on the step thread alone; it waits for the GIL "
        f"{share:.1%} of step time ({waits.count} waits read from {_source_words(waits)}"
        f"{_holders(waits)}; {'>=' if fired else '<'} {th.min_cpu_wait_share:.0%})"
    )
    return Finding(KLASS, fired, share, metrics, _evidence(trace, st, waits), reason)


def _source_words(waits: V.GilWaits) -> str:
    if waits.source is V.Source.GIL_TRACE:
        return "nsys's GIL trace"
    return "its OS-runtime condition waits"


def _holders(waits: V.GilWaits) -> str:
    if waits.holder_share is None:
        return ""
    return f"; another thread holds the GIL {waits.holder_share:.0%} of that time"
