"""data_stall: the GPU sits idle while the training thread prepares the next batch.

The GPU's idle time is attributed to what the main thread does (``_host``): input work is a
stretch without CUDA calls that reads files, waits on loader workers (queue, pipe, condition
variable), is followed by the batch's host-to-device copy, or lies in an NVTX range named like
loading (``data``, ``load``, ``fetch``, ...; names are hints, never required), unless the
launching threads spend all of it but less than ``host.stretch_ms`` waiting for the GIL (the
export's GIL trace or CPython's timed waits, as gil_contention reads them): a loop thread
that waits a switch interval for the GIL before the batch's copy does no input work. Its shares
(``data_load_share``: the input work; ``data_wait_share``: the idle removing it would save,
read off the window) are metrics; on a GPU capture they do not decide. The state this module
returns there marks a candidate: :func:`analysis.detect.diagnose` fires the class when the
saving the time model predicts for the input work removed (data resident on the device),
``1 - 1 / predicted_speedup``, is at least ``min_saving_share``, and that saving is the impact
(``decide``).

CPU captures (no GPU activity, no model): the training thread's input runs, its file reads and
waits on loader queues chained with the work between them (``_cpu_input``), are the class's
number (``input_work_share``), read from the OS runtime. They run on the training thread
between its compute, so removing them saves their share of the window: that share is the
prediction (``1 / (1 - share)``) and fires the class at the same bar as a GPU capture's
predicted saving, ``min_saving_share`` (``min_data_load_share`` where it is set):
no NVTX range is needed, and the suite's ``data_load`` range is reported (``data_load_share``)
but does not decide.
"""

from __future__ import annotations

from analysis.detect import _cpu_input as I
from analysis.detect import view as V
from analysis.detect.config import DataStallThresholds
from analysis.findings import Finding, missing
from bottlenecks import Klass

KLASS = Klass.DATA_STALL


def detect(view: V.TraceView, th: DataStallThresholds) -> Finding:
    trace, st = view.trace, view.steady()
    if not view.has_gpu:
        return _cpu(view, st, th)
    host = view.host()
    if host is None:
        return missing(KLASS, V.RUNTIME, "CUDA API calls (no main thread to read)")
    metrics: dict[str, float] = {
        "gpu_idle_share": host.idle_ns / host.span_ns,
        "data_wait_share": host.share("data"),
        "data_load_share": host.stretch_ns["data"] / host.span_ns,
        "gpu_idle_in_data_load_share": host.idle_by["data"] / host.span_ns,
    }
    metrics["input_work_share"] = metrics["data_load_share"]
    if st.mode == "nvtx":  # the suite's own ranges: what the report compares across variants
        ls, le = V.suite_ranges(trace, st, th.range_name)
        metrics["data_load_share"] = V.length(ls, le) / st.step_ns
    evidence = [
        V.stamp(st, a, b, nvtx=V.label_at(trace, st, a, b)) for a, b in host.examples["data"]
    ]
    ev, stretch_ms = host.evidence, view.config.host.stretch_ms
    reason = (
        f"GPU idle {metrics['gpu_idle_share']:.1%} of the window; the main thread spends "
        f"{metrics['data_load_share']:.1%} of it in input work (host stretches >= "
        f"{stretch_ms} ms with file reads {ev['read']}, waits on other "
        f"threads/processes {ev['wait']}, a batch copied to the GPU right after {ev['h2d_after']}, "
        f"loading NVTX ranges {ev['nvtx_hint']}, of {ev['stretches']} stretches; "
        f"{ev.get('gil_bound', 0)} of those with evidence spent waiting for the GIL but for "
        f"< {stretch_ms} ms: not input work), the GPU idle "
        f"{metrics['gpu_idle_in_data_load_share']:.1%} of the window during it; {st.note}"
    )
    # a candidate: the decide step settles it on the predicted saving
    return Finding(KLASS, True, metrics["data_wait_share"], metrics, evidence, reason)


def _cpu(view: V.TraceView, st: V.Steady, th: DataStallThresholds) -> Finding:
    """A CPU capture: judged on the training thread's input runs, read from the OS runtime
    (``_cpu_input``); the suite's ``data_load`` range, where the capture has one, is reported
    beside them and labels the evidence, but never decides."""
    trace = view.trace
    tid = I.training_thread(trace, st)
    if tid is None:
        return missing(KLASS, V.OSRT, "OS-runtime calls and no NVTX steps")
    runs = I.input_runs(view, st, th, tid)
    share = runs.ns / st.span_ns
    metrics = {"input_work_share": share, "data_load_share": share}
    ranged = ""
    if st.mode == "nvtx":  # the suite's own ranges: what the report compares across variants
        ls, le = V.suite_ranges(trace, st, th.range_name)
        if ls.size:
            metrics["data_load_share"] = V.length(ls, le) / st.step_ns
            ranged = (
                f"; its `{th.range_name}` ranges (reported, not deciding) cover "
                f"{metrics['data_load_share']:.1%} of the steps"
            )
    name, count = st.rate("input_reads", runs.reads)
    metrics[name] = count
    name, count = st.rate("input_waits", runs.waits)
    metrics[name] = count
    if st.per_step:
        metrics["input_work_ms_per_step"] = runs.ns / 1e6 / st.n_steps  # type: ignore[operator]
    top = V.top(runs.ends - runs.starts)
    longest = zip(runs.starts[top], runs.ends[top], strict=True)
    evidence = [V.stamp(st, a, b, nvtx=V.label_at(trace, st, a, b)) for a, b in longest]
    least = th.min_saving_share if th.min_data_load_share is None else th.min_data_load_share
    fired = share >= least
    bar = f"{'>=' if fired else '<'} {least:.0%}"
    read = f"{runs.reads} file reads and {runs.waits} waits on loader queues"
    reason = (
        f"no GPU activity (CPU capture): the training thread spends {share:.1%} of the window "
        f"in input runs ({bar}): {read}, chained while at most {th.cpu_input_gap_ms:g} ms "
        f"apart{ranged}; {st.note}"
    )
    speedup, note = _cpu_prediction(share)
    return Finding(
        KLASS, fired, share, metrics, evidence, reason,
        predicted_speedup=speedup, prediction_note=note,
    )  # fmt: skip


def _cpu_prediction(share: float) -> tuple[float | None, str]:
    """The input runs removed from the training thread, everything else kept: on a CPU capture
    they run inside its steps, between its compute, so the window loses their share."""
    if share >= 1.0:
        return None, "input runs cover the whole window: no step is left to predict"
    return round(1.0 / (1.0 - share), 4), (
        "the training thread's input runs removed, everything else kept (a CPU capture: they "
        "run between its compute, so the window loses their share)"
    )
