"""Small pieces every report section uses: number formatting, relative links, and the guard
that turns a failing section into a visible note instead of a lost report."""

from __future__ import annotations

import math
import os
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from harness.report.doc import Doc
from harness.report.load import warn

__all__ = [
    "BY_REPORT",
    "BY_RUN",
    "VERDICT_KINDS",
    "RemoteError",
    "clip",
    "figure_context",
    "g3",
    "num",
    "pct",
    "rel",
    "section",
    "speedup_text",
    "x",
]

#: Which command wrote a report (its subtitle says so): ``harness report`` or ``harness run``.
BY_REPORT = "python -m harness report"
BY_RUN = "python -m harness run"

VERDICT_KINDS = {"confirmed": "confirmed", "refuted": "refuted", "inconclusive": "inconclusive"}


def rel(target: Path, out_dir: Path) -> str:
    """``target`` relative to the report's folder, with forward slashes (for links)."""
    return os.path.relpath(target, out_dir).replace(os.sep, "/")


def num(v: Any) -> float:
    """A table value as a float; NaN where it is empty or not a number."""
    n = pd.to_numeric(v, errors="coerce")
    return float(n) if pd.notna(n) else math.nan


def g3(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"


def x(v: float) -> str:
    """A speedup: ``1.32x``, ``13.7x``; an en dash where unknown."""
    if not math.isfinite(v):
        return "–"
    return f"{v:.2f}x" if abs(v) < 10 else f"{v:.1f}x"


def pct(v: float, metric: str = "_share") -> str:
    """A metric value: a percentage for ``*_share``, else 3 significant digits."""
    if not math.isfinite(v):
        return "–"
    return f"{v:.0%}" if metric.endswith("_share") else f"{v:.3g}"


def clip(text: str, width: int = 200) -> str:
    """``text`` whole when it fits in ``width`` characters, else cut at the last space before
    the limit (never inside a word) with an ellipsis."""
    text = " ".join(text.split())
    if len(text) <= width:
        return text
    head = text[: width - 1]
    cut = head.rfind(" ")
    return (head[:cut] if cut > width // 2 else head).rstrip(" ,;:") + "…"


def speedup_text(r: Any) -> str:
    """``1.32x [1.28–1.35]`` from a row with speedup and speedup_ci_low/high."""
    s, lo, hi = num(r.get("speedup")), num(r.get("speedup_ci_low")), num(r.get("speedup_ci_high"))
    if not math.isfinite(s):
        return "–"
    ci = f" [{lo:.2f}–{hi:.2f}]" if math.isfinite(lo) and math.isfinite(hi) else ""
    return x(s) + ci


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
