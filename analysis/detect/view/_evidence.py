"""What a finding shows: evidence items stamped with absolute and window-relative times, and
the NVTX label of a span."""

from __future__ import annotations

from typing import Any

import numpy as np

from analysis import trace as T
from analysis.detect.view._window import Steady
from bottlenecks import MEASURE, STEP

__all__ = ["label_at", "ms", "stamp"]


def label_at(trace: T.Trace, st: Steady, start: int, end: int) -> str | None:
    """Text of the innermost NVTX range on the step thread overlapping [start, end] the most
    (read for that span only)."""
    if st.step_tid is None:
        return None
    r = T.nvtx_ranges(trace, tid=st.step_tid, spans=[(start, end)])
    r = r[r["end_ns"].notna() & ~r["text"].isin([MEASURE, STEP])]
    if r.empty:
        return None
    r = r.astype({"end_ns": "int64"})
    ov = np.minimum(r["end_ns"], end) - np.maximum(r["start_ns"], start)
    best = r.assign(_ov=ov).sort_values(["_ov", "depth"], ascending=False, kind="stable")
    return str(best["text"].iloc[0])


def ms(ns: float) -> float:
    """Nanoseconds as milliseconds rounded to the microsecond, as evidence reports them."""
    return round(float(ns) / 1e6, 3)


def stamp(st: Steady, start: int, end: int, **more: Any) -> dict[str, Any]:
    """An evidence item: absolute ns plus ms from the window start."""
    return {
        "start_ns": int(start),
        "end_ns": int(end),
        "t_ms": ms(start - st.lo),
        "duration_ms": ms(end - start),
        **more,
    }
