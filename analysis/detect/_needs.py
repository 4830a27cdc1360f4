"""What a detector needs of the report before it can read it, as the not-judged finding of a
report that lacks it."""

from __future__ import annotations

from analysis import trace as T
from analysis.detect import view as V
from analysis.findings import Finding, missing

__all__ = ["host_lacking", "lacking", "read_or_lacking"]

#: What a detector that reads the host view starts from: the trace, its steady window, the GPU
#: activity in it and the host view.
Start = tuple[T.Trace, V.Steady, V.Activity, V.HostView | None]


def host_lacking(view: V.TraceView, klass: str) -> Finding | None:
    """The not-judged finding of a class that reads the host view (what the launching threads
    did while the GPU idled) where the report has none: no GPU activity, or no CUDA calls of a
    launching thread; None where it has one."""
    if not view.has_gpu:
        return missing(klass, V.KERNEL, "GPU activity")
    if view.host() is None:
        return missing(klass, V.RUNTIME, "CUDA API calls of a launching thread")
    return None


def lacking(view: V.TraceView, klass: str, table: str, what: str) -> Finding | None:
    """:func:`host_lacking`, after the one table the class reads beside it (``table``, said as
    ``what`` in the finding) is checked to be in the report."""
    if not view.trace.has(table):
        return missing(klass, table, what)
    return host_lacking(view, klass)


def read_or_lacking(view: V.TraceView, klass: str, table: str, what: str) -> Finding | Start:
    """The not-judged finding of a report that lacks what the class reads (:func:`lacking`),
    else what the detector starts from (:data:`Start`)."""
    found = lacking(view, klass, table, what)
    if found is not None:
        return found
    return view.trace, view.steady(), view.activity(), view.host()
