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

The launching thread is the host view's main thread (``_host``); on a CPU capture, the suite's
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

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np

from analysis import trace as T
from analysis.detect import _common as C
from analysis.detect import _host as H
from analysis.findings import Finding, State

__all__ = ["KLASS", "GilWaits", "Source", "detect", "gil_waits", "read_waits"]

KLASS = "gil_contention"
OSRT = "OSRT_API"
NVTX = "NVTX_EVENTS"
#: ENUM_NSYS_EVENT_TYPE ids where an export lacks the enum table (nsys 2022.4-2025.3 agree).
_DOMAIN_CREATE, _RANGE_TYPES = 75, (59, 60)


class Source(str, Enum):
    """Where a report's GIL waits were read."""

    GIL_TRACE = "gil_trace"
    OSRT = "osrt"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class GilWaits:
    """The loop threads' GIL waits in the steady window (one union: disjoint, sorted, clipped to
    it; ns); ``tid`` is the main thread."""

    source: Source
    tid: int
    starts: np.ndarray
    ends: np.ndarray
    count: int
    """Wait ranges or calls read (before the union)."""
    holder_share: float | None
    """Share of the waiting during which another thread of the process holds the GIL (GIL
    trace only; None from OS-runtime calls, which do not show the holder)."""

    @property
    def total_ns(self) -> int:
        return C.length(self.starts, self.ends)


def _event_type_ids(trace: T.Trace) -> tuple[int, tuple[int, ...]]:
    """(NvtxDomainCreate, the range event types) as this export numbers them."""
    table = "ENUM_NSYS_EVENT_TYPE"
    if not trace.has(table):
        return _DOMAIN_CREATE, _RANGE_TYPES
    rows = dict(trace.query(f"SELECT name, id FROM {table}")[1])
    ranges = tuple(int(rows[n]) for n in ("NvtxPushPopRange", "NvtxStartEndRange") if n in rows)
    return int(rows.get("NvtxDomainCreate", _DOMAIN_CREATE)), ranges or _RANGE_TYPES


def _gil_domains(trace: T.Trace, name: str, pid: int) -> list[int]:
    """Ids of the NVTX domains called ``name`` created by process ``pid``."""
    if not trace.has(NVTX):
        return []
    create, _ = _event_type_ids(trace)
    text = "COALESCE(n.text, s.value)" if trace.has("StringIds") else "n.text"
    join = "LEFT JOIN StringIds AS s ON s.id = n.textId" if trace.has("StringIds") else ""
    sql = f"""SELECT DISTINCT n.domainId FROM {NVTX} AS n {join}
              WHERE n.eventType = {create} AND {text} = :name
              AND ((n.globalTid >> 24) & 16777215) = :pid AND n.domainId IS NOT NULL"""
    return [int(r[0]) for r in trace.query(sql, {"name": name, "pid": int(pid)})[1]]


def _gil_ranges(
    trace: T.Trace, st: C.Steady, pid: int, domains: list[int], names: list[str]
) -> dict[str, np.ndarray]:
    """Ranges of the GIL domains of process ``pid`` named one of ``names`` that overlap the
    window: start, end (clipped) and the global thread id."""
    _, ranges = _event_type_ids(trace)
    ids = C.name_ids(trace, names)
    literal = ", ".join("'" + n.replace("'", "''") + "'" for n in names) or "NULL"
    named = f"(n.text IN ({literal})" + (f" OR n.textId IN ({C.id_list(ids)})" if ids else "") + ")"
    sql = f"""SELECT n.start, n."end", n.globalTid FROM {NVTX} AS n
              WHERE n.domainId IN ({C.id_list(domains)}) AND n.eventType IN ({C.id_list(ranges)})
              AND ((n.globalTid >> 24) & 16777215) = :pid AND {named}
              AND n."end" > :lo AND n.start < :hi"""
    rows = trace.query(sql, {"pid": int(pid), "lo": st.lo, "hi": st.hi})[1]
    arr = np.array(rows, dtype=np.int64).reshape(-1, 3)
    return {
        "start": np.clip(arr[:, 0], st.lo, None),
        "end": np.clip(arr[:, 1], None, st.hi),
        "tid": arr[:, 2],
    }


def _from_gil_trace(
    trace: T.Trace, st: C.Steady, tid: int, th: Mapping[str, Any], tids: list[int]
) -> GilWaits | None:
    pid = (int(tid) >> 24) & 0xFFFFFF
    domains = _gil_domains(trace, str(th["trace_domain"]), pid)
    if not domains:
        return None
    waits = _gil_ranges(trace, st, pid, domains, list(th["wait_ranges"]))
    mine = np.isin(waits["tid"], tids)
    ws, we = C.union(waits["start"][mine], waits["end"][mine])
    holds = _gil_ranges(trace, st, pid, domains, list(th["hold_ranges"]))
    other = ~np.isin(holds["tid"], tids)
    hs, he = C.union(holds["start"][other], holds["end"][other])
    total = C.length(ws, we)
    held = C.overlap_total(ws, we, hs, he) / total if total else 0.0
    if len(tids) > 1:  # the loop's threads hand the GIL to each other too: only the waits
        # while a thread outside the loop holds it are contention (the main thread's alone
        # are kept whole, as the OS-runtime reading, which cannot see holders, keeps them)
        ws, we = C.difference(ws, we, *C.difference(ws, we, hs, he))
    return GilWaits(Source.GIL_TRACE, int(tid), ws, we, int(mine.sum()), float(held))


def _from_osrt(
    trace: T.Trace, st: C.Steady, tid: int, th: Mapping[str, Any], *, tids: list[int] | None = None
) -> GilWaits | None:
    """The wait calls of ``tid`` (or of every thread in ``tids``) no longer than
    ``max_call_ms``; None without an OS-runtime table."""
    if not trace.has(OSRT):
        return None
    ids = C.name_ids(trace, list(th["wait_calls"]))
    starts, ends, count = [], [], 0
    for t in tids if tids is not None else [tid]:
        rows = C.thread_osrt(trace, st, int(t), ids) if ids else None
        if rows is None or rows["start"].size == 0 or not _times_out(rows, th):
            continue
        short = rows["end"] - rows["start"] <= float(th["max_call_ms"]) * 1e6
        starts.append(np.clip(rows["start"][short], st.lo, None))
        ends.append(np.clip(rows["end"][short], None, st.hi))
        count += int(short.sum())
    if not starts:
        return GilWaits(Source.OSRT, int(tid), *C.union([], []), 0, None)
    ws, we = C.union(np.concatenate(starts), np.concatenate(ends))
    return GilWaits(Source.OSRT, int(tid), ws, we, count, None)


def _times_out(rows: Mapping[str, np.ndarray], th: Mapping[str, Any]) -> bool:
    """Whether a thread's wait calls show CPython's GIL signature: of those lasting 1 ms or
    more, at least ``min_timeout_share`` time out and wait again. CPython's GIL wait times out
    at one switch interval (no earlier; up to 20% later on a busy box) while another thread
    holds the GIL, asks the holder to let go and at once waits again (the next call starts
    within ``max_rewait_us``). A peer's or a queue's wait (gloo's receive) ends when its data
    comes, whatever its length, and the thread then works before it waits again. Fewer than
    three such calls: too few to tell, and too few to matter."""
    order = np.argsort(rows["start"], kind="stable")
    start, end = rows["start"][order], rows["end"][order]
    dur = (end - start) / 1e6
    long = dur >= 1.0
    if int(long.sum()) < 3:
        return True
    interval = float(th.get("switch_interval_ms", 5.0))
    at_interval = (dur >= 0.98 * interval) & (dur <= 1.2 * interval)
    gap_us = np.append((start[1:] - end[:-1]) / 1e3, np.inf)
    rewaits = gap_us <= float(th.get("max_rewait_us", 200.0))
    timed_out = (at_interval & rewaits)[long]
    return float(timed_out.mean()) >= float(th.get("min_timeout_share", 0.2))


def read_waits(
    trace: T.Trace,
    st: C.Steady,
    tid: int,
    th: Mapping[str, Any],
    tids: Iterable[int] | None = None,
) -> GilWaits | None:
    """The GIL waits of thread ``tid`` and of the other threads in ``tids`` (the loop's issuing
    threads: PyTorch's autograd thread runs the backward and waits for the GIL there while the
    main thread waits for it) in the window ``st``, as one union: from the GIL trace when the
    report has one for its process, else from their OS-runtime calls; None when the report has
    neither. Which of the two threads does the waiting changes from run to run (on the H100:
    50% and 19% of the window, then 30% and 37%); their union does not."""
    every = sorted({int(tid), *(int(t) for t in (tids if tids is not None else []))})
    return _from_gil_trace(trace, st, tid, th, every) or _from_osrt(trace, st, tid, th, tids=every)


def _launching_threads(
    trace: T.Trace, cfg: Mapping[str, Any], st: C.Steady
) -> tuple[int, list[int]] | None:
    """(main thread, the threads issuing the loop's GPU work) on a GPU capture (the host
    view's), the suite's step thread alone on a CPU one."""
    if not C.has_gpu(trace):
        return (st.step_tid, [st.step_tid]) if st.mode == "nvtx" and st.step_tid else None
    view = H.host_view(trace, cfg)
    return None if view is None else (view.tid, [int(t) for t in view.issuing])


def gil_waits(trace: T.Trace, cfg: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """The union of the launching thread's GIL-wait intervals in the steady window, as two
    sorted int64 arrays (starts_ns, ends_ns) on the trace's clock, disjoint and clipped to the
    window (:func:`analysis.detect._common.steady`). Read from nsys's GIL trace when the report
    has one, else from the thread's OS-runtime wait calls (see the module docstring); empty
    arrays when the report has neither or no launching thread. ``cfg`` is the whole diagnosis
    config (``analysis.detect.load_thresholds()``), its ``gil_contention`` section deciding
    what a wait is. For the time model: removing the GIL contention takes these intervals out
    of the loop thread's host time."""
    st = C.steady(trace, cfg)
    who = _launching_threads(trace, cfg, st)
    found = None if who is None else read_waits(trace, st, who[0], cfg[KLASS], who[1])
    if found is None:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return found.starts.astype(np.int64), found.ends.astype(np.int64)


def detect(trace: T.Trace, thresholds: Mapping[str, Any]) -> Finding:
    th = thresholds[KLASS]
    st = C.steady(trace, thresholds)
    if not C.has_gpu(trace):
        if st.mode != "nvtx" or st.step_tid is None:
            return C.missing(KLASS, C.KERNEL, "GPU activity and no NVTX steps")
        waits = read_waits(trace, st, st.step_tid, th)
        return _nvtx_only(trace, st, th, waits) if waits else _not_judged()
    view = H.host_view(trace, thresholds)
    if view is None:
        return C.missing(KLASS, C.RUNTIME, "CUDA API calls (no main thread to read)")
    waits = read_waits(trace, st, view.tid, th, view.issuing)
    if waits is None:
        return _not_judged()
    return _on_gpu(trace, thresholds, st, view, waits)


def _not_judged() -> Finding:
    return Finding(
        KLASS,
        State.NOT_JUDGED,
        reason="the report has neither OS-runtime calls (--trace=osrt) nor nsys's Python GIL "
        "trace (--trace=python-gil), so GIL waits cannot be seen",
    )


def _metrics(st: C.Steady, waits: GilWaits, span_ns: int) -> dict[str, float]:
    name, rate = st.rate("gil_waits", waits.count)
    out = {"gil_wait_share": waits.total_ns / max(1, span_ns), name: rate}
    if waits.holder_share is not None:
        out["gil_holder_share"] = waits.holder_share
    return out


def _evidence(trace: T.Trace, st: C.Steady, waits: GilWaits) -> list[dict[str, Any]]:
    top = C.top(waits.ends - waits.starts)
    return [
        C.stamp(
            st,
            waits.starts[i],
            waits.ends[i],
            nvtx=C.label_at(trace, st, waits.starts[i], waits.ends[i]),
        )
        for i in top
    ]


def _on_gpu(
    trace: T.Trace, cfg: Mapping[str, Any], st: C.Steady, view: H.HostView, waits: GilWaits
) -> Finding:
    _, act = C.steady_activity(trace, cfg)
    gs, ge = C.gaps(*C.busy(trace, st, act), st.lo, st.hi)
    idle_in_waits = C.overlap_total(gs, ge, waits.starts, waits.ends)
    host_ns = view.span_ns - view.blocked_ns
    own_pace = min(waits.total_ns, max(0, host_ns - view.gpu_busy_ns))
    saving = max(idle_in_waits, own_pace) / view.span_ns
    metrics = _metrics(st, waits, view.span_ns)
    metrics |= {
        "gil_saving_share": saving,
        "gpu_idle_in_gil_wait_share": idle_in_waits / view.span_ns,
        "gpu_idle_share": view.idle_ns / view.span_ns,
    }
    reason = (
        f"the launching threads wait for the GIL {metrics['gil_wait_share']:.1%} of the window "
        f"({waits.count} waits read from {_source_words(waits)}{_holders(waits)}); the GPU is "
        f"idle {metrics['gpu_idle_in_gil_wait_share']:.1%} of the window during them; {st.note}"
    )
    # a candidate; diagnose() settles it on the predicted saving
    return Finding(KLASS, True, saving, metrics, _evidence(trace, st, waits), reason)


def _nvtx_only(trace: T.Trace, st: C.Steady, th: Mapping[str, Any], waits: GilWaits) -> Finding:
    """A CPU capture: the step thread's GIL waits inside its steps, as a share of step time."""
    ss, se = H.suite_ranges(trace, st, "step")
    inside = C.overlap_total(waits.starts, waits.ends, ss, se)
    share = inside / max(1, st.step_ns)
    metrics = _metrics(st, waits, st.step_ns) | {"gil_wait_share": share}
    metrics["gil_wait_ms_per_step"] = inside / 1e6 / max(1, st.n_steps or 0)
    fired = share >= th["min_cpu_wait_share"]
    reason = (
        f"no GPU activity (CPU capture): judged on the step thread alone; it waits for the GIL "
        f"{share:.1%} of step time ({waits.count} waits read from {_source_words(waits)}"
        f"{_holders(waits)}; {'>=' if fired else '<'} {th['min_cpu_wait_share']:.0%})"
    )
    return Finding(KLASS, fired, share, metrics, _evidence(trace, st, waits), reason)


def _source_words(waits: GilWaits) -> str:
    if waits.source is Source.GIL_TRACE:
        return "nsys's GIL trace"
    return "its OS-runtime condition waits"


def _holders(waits: GilWaits) -> str:
    if waits.holder_share is None:
        return ""
    return f"; another thread holds the GIL {waits.holder_share:.0%} of that time"
