"""The trace view: one export and the settings it is read with, what every detector and the
time model take."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis import trace as T
from analysis.detect.config import DiagnosisConfig
from analysis.detect.view import _host
from analysis.detect.view._calls import window_calls
from analysis.detect.view._gpu import Activity, gpu_activity
from analysis.detect.view._reads import has_gpu
from analysis.detect.view._window import Steady, gpu_activity_lost, no_steady_state, steady

__all__ = ["TraceView"]


@dataclass(frozen=True)
class TraceView:
    """One nsys export as the detectors read it: the open ``trace`` and the diagnosis
    ``config`` whose reading sections (``window``, ``host``, the ``gil_contention`` section's
    GIL reading, ``data_stall.range_name``) decide the steady window, the host's timeline and
    the GIL waits. Every reading is cached on the trace, so the detectors, the time model and a
    second view of the same trace and settings share one scan per table."""

    trace: T.Trace
    config: DiagnosisConfig

    @property
    def has_gpu(self) -> bool:
        """Whether the report recorded GPU activity (kernels, copies, memsets, graphs)."""
        return has_gpu(self.trace)

    def steady(self) -> Steady:
        """The steady-state window every detector judges."""
        return steady(self.trace, self.config.window)

    def activity(self) -> Activity:
        """The GPU activity in the steady window."""
        st = self.steady()
        return gpu_activity(self.trace, st.lo, st.hi)

    def calls(self) -> dict[str, np.ndarray]:
        """The CUDA API calls of the steady window (:func:`window_calls`)."""
        return window_calls(self.trace, self.steady())

    def host(self) -> _host.HostView | None:
        """What the threads issuing the loop's GPU work did while the GPU idled (None on a
        CPU capture or without a launching thread)."""
        return _host.host_view(self.trace, self.config)

    def gil_waits(self) -> tuple[np.ndarray, np.ndarray]:
        """The launching threads' GIL waits in the window, as a union (:func:`_host.gil_waits`)."""
        return _host.gil_waits(self.trace, self.config)

    def unjudgeable(self) -> str | None:
        """Why no class can be judged on this report (its GPU activity lost, no steady state),
        or None."""
        return gpu_activity_lost(self.trace) or no_steady_state(self.trace, self.config.window)
