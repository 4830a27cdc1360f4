"""OS-runtime calls (file reads, waits, sleeps) of chosen threads in the window: one chunked
scan per thread, or one prefetched scan that several threads, names and windows share."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from analysis import trace as T
from analysis.detect.config import HostThresholds
from analysis.detect.view import _reads as R
from analysis.detect.view._arrays import member, rows_where
from analysis.detect.view._calls import LAUNCH_LOOKBACK_NS
from analysis.detect.view._window import Steady

__all__ = ["prefetch_osrt", "thread_osrt"]


def thread_osrt(trace: T.Trace, st: Steady, tid: int, ids: list[int]) -> dict[str, np.ndarray]:
    """The OS-runtime calls of thread ``tid`` overlapping the window (start, end, name) whose
    name id is one of ``ids``: one chunked scan (cached) where a loader thread can make
    millions; taken out of a :func:`prefetch_osrt` scan where one covers them."""
    key = ("osrt", st.lo, st.hi, int(tid), tuple(sorted(ids)))
    cache = R.trace_cache(trace)
    if key in cache:
        return cache[key]
    cover = _osrt_cover(trace, st, [tid], ids)
    if cover is None:
        rows = _read_osrt(trace, st, [int(tid)], ids)
        cache[key] = {k: rows[k] for k in ("start", "end", "name")}
        return cache[key]
    rows = R._resolved(cache, cover)
    keep = (rows["tid"] == int(tid)) & member(rows["name"], list(ids))
    if (st.lo, st.hi) != cover[1:3]:  # a window inside the scan's: its overlap test again
        keep &= (rows["end"] > st.lo) & (rows["start"] < st.hi)
    cache[key] = rows_where({k: rows[k] for k in ("start", "end", "name")}, keep)
    return cache[key]


def prefetch_osrt(trace: T.Trace, st: Steady, tids: Any, ids: Any) -> None:
    """Start one scan of the OS-runtime calls of the threads ``tids`` with name ids ``ids`` on a
    thread of its own (:func:`_read_ahead`), as soon as both are known: it runs while the
    caller works on what it read before, and :func:`thread_osrt` takes the calls of one thread
    and some of the names, in this window or one inside it, out of it (the host view's input
    calls, gil_contention's waits of each issuing thread, the time model's last iterations:
    one scan of the table where there was one per thread, set of names and window). The scan
    starts :data:`LAUNCH_LOOKBACK_NS` early, as :func:`window_calls` does: the time model's
    last iterations start at a launch call, which can come before the window."""
    tids, ids = sorted({int(t) for t in tids}), sorted({int(i) for i in ids})
    if not tids or not ids or not trace.has("OSRT_API") or _osrt_cover(trace, st, tids, ids):
        return
    wide = replace(st, lo=st.lo - LAUNCH_LOOKBACK_NS)
    key = ("osrt_all", wide.lo, wide.hi, tuple(tids), tuple(ids))
    R._read_ahead(trace, key, "osrt", lambda own: _read_osrt(own, wide, tids, ids))


def _osrt_cover(trace: T.Trace, st: Steady, tids: Any, ids: Any) -> tuple | None:
    """The cache key of a :func:`prefetch_osrt` scan that holds the calls of these threads and
    names in this window, or None."""
    for key in list(R.trace_cache(trace)):  # a copy: detectors on other threads add keys
        if isinstance(key, tuple) and key[0] == "osrt_all" and key[1] <= st.lo <= st.hi <= key[2]:
            if {int(t) for t in tids} <= set(key[3]) and {int(i) for i in ids} <= set(key[4]):
                return key
    return None


def _read_osrt(
    trace: T.Trace, st: Steady, tids: list[int], ids: list[int]
) -> dict[str, np.ndarray]:
    """The OS-runtime calls of the threads ``tids`` with name ids ``ids`` overlapping the
    window, in rowid order: start, end, name and tid. With several threads, which one is read
    as its index in ``tids``, under the start where the window's end leaves the bits (every
    start read is before it)."""
    table = "OSRT_API"
    cols = {"start": "t.start", "end": R._end_column(trace, table), "name": "t.nameId"}
    # the names first: SQLite tests the terms in this order, and the names turn rows away
    where = f"t.nameId IN ({R.id_list(ids)}) AND t.globalTid IN ({R.id_list(tids)}) AND {R.WINDOW}"
    pack = R._name_under_duration(trace, table, cols)
    bits = (len(tids) - 1).bit_length()
    if bits:
        whens = " ".join(f"WHEN {t} THEN {i}" for i, t in enumerate(tids))
        cols["who"] = f"CASE t.globalTid {whens} END"
        if (abs(st.lo) + abs(st.hi) + 1) << bits < 2**62:
            pack.append(("start", "who", bits))
    rows = T.int_columns(trace, table, cols, where, {"lo": st.lo, "hi": st.hi}, pack=pack)
    who = rows.pop("who", np.zeros(rows["start"].size, np.int64))
    return R._end_back(trace, table, rows) | {"tid": np.asarray(tids, np.int64)[who]}


#: OS-runtime calls that mean the thread waits on other threads or processes for input: the
#: polls, receives and (timed) semaphore waits of Python queues fed by loader workers or a
#: pin-memory thread, and sleeps. Untimed ``pthread_cond_wait`` / mutex waits are left out: the
#: main thread makes them while PyTorch's autograd thread runs the backward. Timed condition
#: waits (``pthread_cond_timedwait`` / ``clockwait``) are left out too: on a Python thread they
#: are CPython waiting for the GIL (Python's own queues and locks wait on semaphores), which is
#: gil_contention's evidence, not input (``diagnosis.gil_contention.wait_calls``).
WAIT_CALLS = (
    "poll", "ppoll", "select", "pselect6", "epoll_wait", "epoll_pwait", "recv", "recvfrom",
    "recvmsg", "sem_wait", "sem_timedwait", "sem_clockwait", "nanosleep", "clock_nanosleep",
    "usleep", "sleep",
)  # fmt: skip


def osrt_ids(trace: T.Trace, host: HostThresholds) -> list[int]:
    """Name ids of the OS-runtime calls read from the main thread in one scan: the input
    evidence's file reads and waits, and the sleeps on another thread the time model keeps
    (``host.blocked_calls``)."""
    names = [*host.file_calls, *WAIT_CALLS, *host.blocked_calls, *host.write_calls]
    return sorted(set(R.name_ids(trace, names)))
