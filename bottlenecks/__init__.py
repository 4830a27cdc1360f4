"""The suite's vocabulary, defined once: bottleneck classes and the NVTX range names.

The classes are specified in :mod:`bottlenecks.classes` (one :class:`ClassSpec` each, in
``SPECS``); :class:`Klass` and :data:`CLASSES` are derived from those specs here.

Both ``scenarios/`` (which emit the ranges and declare the class they inject) and ``analysis/``
(which reads them back from an nsys export) import this package; it imports neither of them nor
``harness``, so there is no cycle between the packages. ``phase`` and ``mark`` are the
scenario-writing API: every range a workload opens goes through them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from bottlenecks.classes import SPECS, ClassSpec, check_specs
from bottlenecks.enums import StrEnum

__all__ = [
    "BACKWARD",
    "CHECKPOINT",
    "CLASSES",
    "COMM",
    "DATA_LOAD",
    "FORWARD",
    "GRAPH_REPLAY",
    "H2D",
    "MEASURE",
    "METRICS",
    "OPTIMIZER",
    "PHASES",
    "SPECS",
    "STEP",
    "SYNC",
    "ClassSpec",
    "Klass",
    "mark",
    "phase",
]


check_specs(SPECS)

#: A bottleneck class (``Klass.DATA_STALL == "data_stall"``), one member per spec in ``SPECS``.
Klass = StrEnum("Klass", [(s.name.upper(), s.name) for s in SPECS], module=__name__)
Klass.__doc__ = "A bottleneck class: one member per spec in ``bottlenecks.classes.SPECS``."

#: The class names, in the order reports list them (the order of ``SPECS``).
CLASSES: tuple[str, ...] = tuple(k.value for k in Klass)

#: NVTX range around each iteration, and around the measured window.
STEP = "step"
MEASURE = "measure"

#: Phase ranges the analysis understands inside a step (scenarios may add others).
PHASES: tuple[str, ...] = ("data_load", "h2d", "forward", "backward", "optimizer", "comm", "sync")
DATA_LOAD, H2D, FORWARD, BACKWARD, OPTIMIZER, COMM, SYNC = PHASES

#: Other ranges scenarios open inside a step, for people reading the timeline: a CUDA-graph
#: replay, a metrics thread's work, a checkpoint write. No detector needs them (names are hints).
GRAPH_REPLAY, METRICS, CHECKPOINT = "graph_replay", "metrics", "checkpoint"

# ARGB integers, not names: nvtx resolves a name outside its own short list by importing
# matplotlib on the first range (half a second per worker, and a SIGTERM landing inside that
# import surfaced as nvtx's TypeError instead of a clean exit).
_COLORS = {
    STEP: 0xFF808080,  # grey
    MEASURE: 0xFF000000,  # black
    DATA_LOAD: 0xFFFFA500,  # orange
    H2D: 0xFFFF0000,  # red
    FORWARD: 0xFF008000,  # green
    BACKWARD: 0xFF0000FF,  # blue
    OPTIMIZER: 0xFF800080,  # purple
    COMM: 0xFFFFFF00,  # yellow
    SYNC: 0xFF00FFFF,  # cyan
}


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Open an NVTX push/pop range called ``name`` on the calling thread."""
    import nvtx  # lazy: analysis imports this package without needing nvtx

    nvtx.push_range(name, color=_COLORS.get(name, 0xFFFFFFFF))
    try:
        yield
    finally:
        nvtx.pop_range()


def mark(name: str) -> None:
    """An instantaneous NVTX marker (e.g. a compile finished)."""
    import nvtx

    nvtx.mark(name)
