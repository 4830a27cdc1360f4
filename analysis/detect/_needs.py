"""What a detector needs of the report before it can read it, as the not-judged finding of a
report that lacks it."""

from __future__ import annotations

from analysis.detect import view as V
from analysis.findings import Finding, missing

__all__ = ["host_lacking", "lacking"]


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
