"""Reading a report's GIL waits: from nsys's Python GIL trace where the process has one, else
from the thread's OS-runtime wait calls that show CPython's GIL signature.

Both :mod:`analysis.detect.gil_contention` (the class) and :mod:`analysis.detect._host` (whose
host view sets the waits apart from other host time) read them, so the reading lives here,
below both: the imports go one way (gil_contention -> _host -> _gil_waits).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from analysis import trace as T
from analysis.detect.config import GilContentionThresholds
from analysis.detect.view._intervals import difference, length, overlap_total, union
from analysis.detect.view._osrt import thread_osrt
from analysis.detect.view._reads import id_list, name_ids
from analysis.detect.view._window import Steady
from bottlenecks.enums import StrEnum

__all__ = ["NVTX", "OSRT", "GilWaits", "Source", "read_waits"]

OSRT = "OSRT_API"
NVTX = "NVTX_EVENTS"
#: ENUM_NSYS_EVENT_TYPE ids where an export lacks the enum table (nsys 2022.4-2025.3 agree).
_DOMAIN_CREATE, _RANGE_TYPES = 75, (59, 60)


class Source(StrEnum):
    """Where a report's GIL waits were read."""

    GIL_TRACE = "gil_trace"
    OSRT = "osrt"


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
        return length(self.starts, self.ends)


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
    trace: T.Trace, st: Steady, pid: int, domains: list[int], names: list[str]
) -> dict[str, np.ndarray]:
    """Ranges of the GIL domains of process ``pid`` named one of ``names`` that overlap the
    window: start, end (clipped) and the global thread id."""
    _, ranges = _event_type_ids(trace)
    ids = name_ids(trace, names)
    literal = ", ".join("'" + n.replace("'", "''") + "'" for n in names) or "NULL"
    named = f"(n.text IN ({literal})" + (f" OR n.textId IN ({id_list(ids)})" if ids else "") + ")"
    sql = f"""SELECT n.start, n."end", n.globalTid FROM {NVTX} AS n
              WHERE n.domainId IN ({id_list(domains)}) AND n.eventType IN ({id_list(ranges)})
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
    trace: T.Trace, st: Steady, tid: int, th: GilContentionThresholds, tids: list[int]
) -> GilWaits | None:
    pid = (int(tid) >> 24) & 0xFFFFFF
    domains = _gil_domains(trace, str(th.trace_domain), pid)
    if not domains:
        return None
    waits = _gil_ranges(trace, st, pid, domains, list(th.wait_ranges))
    mine = np.isin(waits["tid"], tids)
    ws, we = union(waits["start"][mine], waits["end"][mine])
    holds = _gil_ranges(trace, st, pid, domains, list(th.hold_ranges))
    other = ~np.isin(holds["tid"], tids)
    hs, he = union(holds["start"][other], holds["end"][other])
    total = length(ws, we)
    held = overlap_total(ws, we, hs, he) / total if total else 0.0
    if len(tids) > 1:  # the loop's threads hand the GIL to each other too: only the waits
        # while a thread outside the loop holds it are contention (the main thread's alone
        # are kept whole, as the OS-runtime reading, which cannot see holders, keeps them)
        ws, we = difference(ws, we, *difference(ws, we, hs, he))
    return GilWaits(Source.GIL_TRACE, int(tid), ws, we, int(mine.sum()), float(held))


def _from_osrt(
    trace: T.Trace,
    st: Steady,
    tid: int,
    th: GilContentionThresholds,
    *,
    tids: list[int] | None = None,
) -> GilWaits | None:
    """The wait calls of ``tid`` (or of every thread in ``tids``) no longer than
    ``max_call_ms``; None without an OS-runtime table."""
    if not trace.has(OSRT):
        return None
    ids = name_ids(trace, list(th.wait_calls))
    starts, ends, count = [], [], 0
    for t in tids if tids is not None else [tid]:
        rows = thread_osrt(trace, st, int(t), ids) if ids else None
        if rows is None or rows["start"].size == 0 or not _times_out(rows, th):
            continue
        short = rows["end"] - rows["start"] <= float(th.max_call_ms) * 1e6
        starts.append(np.clip(rows["start"][short], st.lo, None))
        ends.append(np.clip(rows["end"][short], None, st.hi))
        count += int(short.sum())
    if not starts:
        return GilWaits(Source.OSRT, int(tid), *union([], []), 0, None)
    ws, we = union(np.concatenate(starts), np.concatenate(ends))
    return GilWaits(Source.OSRT, int(tid), ws, we, count, None)


def _times_out(rows: Mapping[str, np.ndarray], th: GilContentionThresholds) -> bool:
    """Whether a thread's wait calls show CPython's GIL signature: of those lasting 1 ms or
    more, at least ``min_timeout_share`` time out and wait again. CPython's GIL wait times out
    at one switch interval (no earlier; later by the time its thread then waits for a core, up
    to ``max_timeout_late_share`` of an interval on a loaded box) while another thread
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
    interval = th.switch_interval_ms
    late = th.max_timeout_late_share
    at_interval = (dur >= 0.98 * interval) & (dur <= (1.0 + late) * interval)
    gap_us = np.append((start[1:] - end[:-1]) / 1e3, np.inf)
    rewaits = gap_us <= th.max_rewait_us
    timed_out = (at_interval & rewaits)[long]
    return float(timed_out.mean()) >= th.min_timeout_share


def read_waits(
    trace: T.Trace,
    st: Steady,
    tid: int,
    th: GilContentionThresholds,
    tids: Iterable[int] | None = None,
) -> GilWaits | None:
    """The GIL waits of thread ``tid`` and of the other threads in ``tids`` (the loop's issuing
    threads: PyTorch's autograd thread runs the backward and waits for the GIL there while the
    main thread waits for it) in the window ``st``, as one union: from the GIL trace when the
    report has one for its process, else from their OS-runtime calls; None when the report has
    neither. Which of the two threads does the waiting changes from run to run; their union
    does not (docs/detectors.md, "Measurements behind the code")."""
    every = sorted({int(tid), *(int(t) for t in (tids if tids is not None else []))})
    return _from_gil_trace(trace, st, tid, th, every) or _from_osrt(trace, st, tid, th, tids=every)
