"""Small pieces every report section uses: the number formats, relative links, and the guard
that turns a failing section into a visible note instead of a lost report.

Every number the report writes goes through :mod:`analysis.plots.numbers` (passed on here), the
one module that writes numbers for the report's tables, the end-of-run text and the pictures:
a number shown twice reads the same both times."""

from __future__ import annotations

import datetime as dt
import math
import os
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.plots.numbers import (
    DASH,
    g3,
    metric_value,
    ratio_ci,
    share,
    share_ci,
    share_fine,
    signed_share,
    speedup,
    speedup_ci,
)
from harness.report.doc import Doc
from harness.report.load import warn

__all__ = [
    "BY_REPORT",
    "BY_RUN",
    "DASH",
    "VERDICT_KINDS",
    "RemoteError",
    "clip",
    "figure_context",
    "g3",
    "metric_value",
    "num",
    "ratio_ci",
    "rel",
    "section",
    "share",
    "share_ci",
    "share_fine",
    "signed_share",
    "speedup",
    "speedup_ci",
    "speedup_of",
    "written",
]

#: Which command wrote a report (its subtitle says so): ``harness report`` or ``harness run``.
BY_REPORT = "python -m harness report"
BY_RUN = "python -m harness run"

VERDICT_KINDS = {"confirmed": "confirmed", "refuted": "refuted", "inconclusive": "inconclusive"}


def written(writer: str) -> str:
    """A report's subtitle end: ``written <date> <time> UTC by <the command>``."""
    return f"written {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC by {writer}"


def rel(target: Path, out_dir: Path) -> str:
    """``target`` relative to the report's folder, with forward slashes (for links)."""
    return os.path.relpath(target, out_dir).replace(os.sep, "/")


def num(v: Any) -> float:
    """A table value as a float; NaN where it is empty or not a number."""
    n = pd.to_numeric(v, errors="coerce")
    return float(n) if pd.notna(n) else math.nan


def clip(text: str, width: int = 200) -> str:
    """``text`` whole when it fits in ``width`` characters, else cut at the last space before
    the limit (never inside a word) with an ellipsis."""
    text = " ".join(text.split())
    if len(text) <= width:
        return text
    head = text[: width - 1]
    cut = head.rfind(" ")
    return (head[:cut] if cut > width // 2 else head).rstrip(" ,;:") + "…"


def speedup_of(r: Mapping[str, Any], sep: str = " ") -> str:
    """A runs.csv row's speedup with its interval (``speedup``, ``speedup_ci_low/high``)."""
    return speedup_ci(r.get("speedup"), r.get("speedup_ci_low"), r.get("speedup_ci_high"), sep)


class RemoteError(Exception):
    """An exception raised in another process (a worker drawing a picture), carried back as its
    type's name, its message and the function it was raised in: :func:`section` notes it as it
    would have noted the exception itself."""

    def __init__(self, type_name: str, message: str, where: str) -> None:
        super().__init__(message)
        self.type_name = type_name
        self.where = where


def section(doc: Doc, what: str, build: Callable[[], None]) -> None:
    """Run one section builder; a failure becomes a visible error note, never a lost report."""
    try:
        build()
    except Exception as exc:
        if isinstance(exc, RemoteError):
            name, where = exc.type_name, exc.where
        else:
            name, where = type(exc).__name__, traceback.extract_tb(exc.__traceback__)[-1].name
        warn(f"the {what} section failed: {name}: {exc}")
        doc.note(f"this section could not be drawn: {name}: {exc} ({where})", kind="error")


def figure_context() -> None:
    """Matplotlib without a display (the report runs on headless machines)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
