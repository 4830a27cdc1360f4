"""How the report, the end-of-run text and every picture write a number: one function per kind.

A number shown twice must read the same both times (a speedup in the matrix and in a table, an
idle share in a panel's title and in its caption), so each kind of number is written here and
nowhere else. The pictures (``analysis/plots``) use it as much as the tables do, which is why it
lives here: ``analysis`` cannot import ``harness``; ``harness.report.fmt`` passes these on.

Each function takes plain floats (NaN or None where unknown, shown as an en dash) and returns
the text. Intervals are written ``[low-high]`` with a hyphen, in the number's own format.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = [
    "DASH",
    "ci",
    "finite",
    "g3",
    "metric_value",
    "ms",
    "ratio",
    "ratio_ci",
    "share",
    "share_ci",
    "share_fine",
    "signed_share",
    "speedup",
    "speedup_ci",
    "speedup_number",
]

#: What an unknown number reads.
DASH = "–"


def finite(v: Any) -> float:
    """``v`` as a float, NaN where it is None, empty or not a number."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return math.nan
    return f if math.isfinite(f) else math.nan


def _known(*values: Any) -> bool:
    return all(math.isfinite(finite(v)) for v in values)


def g3(v: Any) -> str:
    """A plain quantity (a step in ms, a rate): 3 significant digits, thousands grouped."""
    f = finite(v)
    if not math.isfinite(f):
        return DASH
    return f"{f:.3g}" if abs(f) < 1000 else f"{f:,.0f}"


def ms(v: Any) -> str:
    """A time in milliseconds: ``48.7 ms``."""
    return DASH if not _known(v) else f"{g3(v)} ms"


def speedup_number(v: Any) -> str:
    """A speedup's digits without the ``x``: two decimals below 10, one from 10 on."""
    f = finite(v)
    if not math.isfinite(f):
        return DASH
    return f"{f:.2f}" if abs(f) < 10 else f"{f:.1f}"


def ci(low: Any, high: Any, number: Any = None) -> str:
    """``[low-high]`` with both ends in ``number``'s format (default: a speedup's digits); ""
    where either end is unknown."""
    if not _known(low, high):
        return ""
    write = number or speedup_number
    return f"[{write(low)}-{write(high)}]"


def speedup(v: Any) -> str:
    """A speedup: ``1.32x``, ``13.7x``."""
    return DASH if not _known(v) else f"{speedup_number(v)}x"


def speedup_ci(v: Any, low: Any = None, high: Any = None, sep: str = " ") -> str:
    """``1.32x [1.28-1.35]``; the speedup alone where there is no interval (``sep``: what goes
    between them, a line break in a matrix cell)."""
    if not _known(v):
        return DASH
    interval = ci(low, high)
    return speedup(v) + (f"{sep}{interval}" if interval else "")


def ratio(v: Any) -> str:
    """A ratio of two times that is no speedup (the probe effect): two decimals."""
    return DASH if not _known(v) else f"{finite(v):.2f}"


def ratio_ci(v: Any, low: Any = None, high: Any = None) -> str:
    """``1.16 [1.12-1.19]``; the ratio alone without an interval."""
    if not _known(v):
        return DASH
    interval = ci(low, high, ratio)
    return ratio(v) + (f" {interval}" if interval else "")


def share(v: Any) -> str:
    """A share in whole percent: ``24%``."""
    return DASH if not _known(v) else f"{finite(v):.0%}"


def share_fine(v: Any) -> str:
    """A share to a tenth of a percent, for shares near 0 or 1 (a GPU's idle time): ``91.6%``."""
    return DASH if not _known(v) else f"{100 * finite(v):.1f}%"


def share_ci(v: Any, low: Any = None, high: Any = None) -> str:
    """``24% [22-27%]``; the share alone where there is no interval (never a made-up one)."""
    if not _known(v):
        return DASH
    if not _known(low, high):
        return share(v)
    lo, hi = finite(low) * 100, finite(high) * 100
    if hi > lo and f"{lo:.0f}" == f"{hi:.0f}":  # a real width that whole percents hide
        return f"{share_fine(v)} [{lo:.1f}-{hi:.1f}%]"
    return f"{share(v)} [{lo:.0f}-{share(high)}]"


def signed_share(v: Any) -> str:
    """A relative error: ``+11%``, ``-2%`` (``+0%``, never ``-0%``)."""
    if not _known(v):
        return DASH
    r = round(finite(v), 2)
    return f"{r if r != 0 else 0.0:+.0%}"


def metric_value(v: Any, metric: str) -> str:
    """A detector metric: a share for ``*_share`` to a tenth of a percent (as the detectors'
    reasons write it: ``20.8%``), else 3 significant digits."""
    return share_fine(v) if metric.endswith("_share") else g3(v)
