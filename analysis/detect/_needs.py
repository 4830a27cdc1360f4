"""What a detector needs of the report before it can read it, as the not-judged finding of a
report that lacks it."""

from __future__ import annotations

from analysis.detect import view as V
from analysis.findings import Finding, missing

__all__ = ["host_lacking"]


def host_lacking(view: V.TraceView, klass: str) -> Finding | None:
    """The not-judged finding of a class that reads the host view (what the launching threads
    did while the GPU idled) where the report has none: no GPU activity, or no CUDA calls of a
    launching thread; None where it has one."""
    if not view.has_gpu:
        return missing(klass, V.KERNEL, "GPU activity")
    if view.host() is None:
        return missing(klass, V.RUNTIME, "CUDA API calls of a launching thread")
    return None
