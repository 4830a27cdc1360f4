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
(``predict``).

CPU captures (no GPU activity, no model): the training thread's input runs, its file reads and
waits on loader queues chained with the work between them (``_cpu_input``), are the class's
number (``input_work_share``, fired at >= ``min_data_load_share``), read from the OS runtime:
no NVTX range is needed, and the suite's ``data_load`` range is reported (``data_load_share``)
but does not decide.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from analysis import trace as T
from analysis.detect import _common as C
from analysis.detect import _cpu_input as I
from analysis.detect import _host as H
from analysis.findings import Finding

KLASS = "data_stall"


def detect(trace: T.Trace, thresholds: Mapping[str, Any]) -> Finding:
    th = thresholds[KLASS]
    st = C.steady(trace, thresholds)
    if not C.has_gpu(trace):
        return _cpu(trace, st, thresholds)
    view = H.host_view(trace, thresholds)
    if view is None:
        return C.missing(KLASS, C.RUNTIME, "CUDA API calls (no main thread to read)")
    metrics: dict[str, float] = {
        "gpu_idle_share": view.idle_ns / view.span_ns,
        "data_wait_share": view.share("data"),
        "data_load_share": view.stretch_ns["data"] / view.span_ns,
        "gpu_idle_in_data_load_share": view.idle_by["data"] / view.span_ns,
    }
    metrics["input_work_share"] = metrics["data_load_share"]
    if st.mode == "nvtx":  # the suite's own ranges: what the report compares across variants
        ls, le = H.suite_ranges(trace, st, th["range_name"])
        metrics["data_load_share"] = C.length(ls, le) / st.step_ns
    evidence = [
        C.stamp(st, a, b, nvtx=C.label_at(trace, st, a, b)) for a, b in view.examples["data"]
    ]
    ev = view.evidence
    reason = (
        f"GPU idle {metrics['gpu_idle_share']:.1%} of the window; the main thread spends "
        f"{metrics['data_load_share']:.1%} of it in input work (host stretches >= "
        f"{thresholds['host']['stretch_ms']} ms with file reads {ev['read']}, waits on other "
        f"threads/processes {ev['wait']}, a batch copied to the GPU right after {ev['h2d_after']}, "
        f"loading NVTX ranges {ev['nvtx_hint']}, of {ev['stretches']} stretches; "
        f"{ev.get('gil_bound', 0)} of those with evidence spent waiting for the GIL but for "
        f"< {thresholds['host']['stretch_ms']} ms: not input work), the GPU idle "
        f"{metrics['gpu_idle_in_data_load_share']:.1%} of the window during it; {st.note}"
    )
    # a candidate; diagnose() settles it on the predicted saving
    return Finding(KLASS, True, metrics["data_wait_share"], metrics, evidence, reason)


def _cpu(trace: T.Trace, st: C.Steady, thresholds: Mapping[str, Any]) -> Finding:
    """A CPU capture: judged on the training thread's input runs, read from the OS runtime
    (``_cpu_input``); the suite's ``data_load`` range, where the capture has one, is reported
    beside them and labels the evidence, but never decides."""
    th = thresholds[KLASS]
    tid = I.training_thread(trace, st)
    if tid is None:
        return C.missing(KLASS, "OSRT_API", "OS-runtime calls and no NVTX steps")
    runs = I.input_runs(trace, st, thresholds, tid)
    share = runs.ns / st.span_ns
    metrics = {"input_work_share": share, "data_load_share": share}
    ranged = ""
    if st.mode == "nvtx":  # the suite's own ranges: what the report compares across variants
        ls, le = H.suite_ranges(trace, st, th["range_name"])
        if ls.size:
            metrics["data_load_share"] = C.length(ls, le) / st.step_ns
            ranged = (
                f"; its `{th['range_name']}` ranges (reported, not deciding) cover "
                f"{metrics['data_load_share']:.1%} of the steps"
            )
    name, count = st.rate("input_reads", runs.reads)
    metrics[name] = count
    name, count = st.rate("input_waits", runs.waits)
    metrics[name] = count
    if st.per_step:
        metrics["input_work_ms_per_step"] = runs.ns / 1e6 / st.n_steps  # type: ignore[operator]
    top = C.top(runs.ends - runs.starts)
    evidence = [
        C.stamp(st, runs.starts[i], runs.ends[i], nvtx=C.label_at(trace, st, runs.starts[i],
                runs.ends[i]))
        for i in top
    ]  # fmt: skip
    fired = share >= th["min_data_load_share"]
    reason = (
        f"no GPU activity (CPU capture): the training thread spends {share:.1%} of the window "
        f"in input runs ({'>=' if fired else '<'} {th['min_data_load_share']:.0%}): "
        f"{runs.reads} file reads and {runs.waits} waits on loader queues, chained while at "
        f"most {th['cpu_input_gap_ms']:g} ms apart{ranged}; {st.note}"
    )
    return Finding(KLASS, fired, share, metrics, evidence, reason)
