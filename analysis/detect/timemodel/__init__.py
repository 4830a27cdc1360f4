"""The time model: what removing one cause entirely would do to the step, from a replay of the
steady window (everything else unchanged).

- :func:`timeline` reads the replay's inputs off a :class:`~analysis.detect.view.TraceView`
  (the host's calls and gaps, the GPU's items, which call launched which; ``_timeline``);
- :func:`replay` runs them on the host's and the GPU's clocks, :func:`removal` says what one
  cause's removal edits in them (``_replay``);
- :func:`predict` turns the replays with and without the cause into a :class:`Prediction`:
  the speedup for the program as it runs untraced (:func:`fit`: nsys's cost per call, fitted
  to a measured step where there is one), its interval, and the floor no removal can beat
  (:class:`Clamp`, ``_bounds``; ``_forecast``).

:data:`CAUSE_OF` says which cause each class's removal is (``ClassSpec.replay_cause``).
"""

from __future__ import annotations

from analysis.detect.timemodel._bounds import (
    WHAT,
    Clamp,
    gpu_busy_ns,
    gpu_work_ns,
    host_work_ns,
    measured_calls,
)
from analysis.detect.timemodel._forecast import (
    PROBE_KEYS,
    Fit,
    Prediction,
    calibrated_overhead,
    calibrated_scale,
    fit,
    host_speed,
    predict,
    saving,
    usable_speed,
)
from analysis.detect.timemodel._gpu_causes import tensor_rate, tf32_rate
from analysis.detect.timemodel._replay import (
    CAUSE_OF,
    Removal,
    Replayed,
    edge_items,
    removal,
    replay,
    replay_inputs,
)
from analysis.detect.timemodel._timeline import (
    BATCH_BYTES,
    DATA,
    DISPATCH,
    HOST,
    Timeline,
    timeline,
)

__all__ = [
    "BATCH_BYTES",
    "CAUSE_OF",
    "DATA",
    "DISPATCH",
    "HOST",
    "PROBE_KEYS",
    "WHAT",
    "Clamp",
    "Fit",
    "Prediction",
    "Removal",
    "Replayed",
    "Timeline",
    "calibrated_overhead",
    "calibrated_scale",
    "edge_items",
    "fit",
    "gpu_busy_ns",
    "gpu_work_ns",
    "host_speed",
    "host_work_ns",
    "measured_calls",
    "predict",
    "removal",
    "replay",
    "replay_inputs",
    "saving",
    "tensor_rate",
    "tf32_rate",
    "timeline",
    "usable_speed",
]
