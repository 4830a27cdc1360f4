"""NVTX ranges through one helper, so every scenario names its phases the same way.

The ``nvtx`` package emits ranges with or without CUDA, so CPU profiles carry them too. Ranges
use the default domain; the analysis matches them by text (``step``, ``data_load``, ...).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import nvtx

#: Phase names the analysis understands. Scenarios may add others.
PHASES: tuple[str, ...] = ("data_load", "h2d", "forward", "backward", "optimizer", "comm", "sync")

#: The range around each iteration and the range around the measured window.
STEP = "step"
WINDOW = "measure"

_COLORS = {
    "step": "grey",
    "measure": "black",
    "data_load": "orange",
    "h2d": "red",
    "forward": "green",
    "backward": "blue",
    "optimizer": "purple",
    "comm": "yellow",
    "sync": "cyan",
}


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Open an NVTX push/pop range called ``name`` on the calling thread."""
    nvtx.push_range(name, color=_COLORS.get(name, "white"))
    try:
        yield
    finally:
        nvtx.pop_range()


def mark(name: str) -> None:
    """An instantaneous NVTX marker (e.g. a compile finished)."""
    nvtx.mark(name)
