"""The PyTorch Profiler (Kineto) around a worker's measured window (``kineto.enabled``).

A kineto unit is a worker like a timing one, with ``torch.profiler`` on over its window: CPU
activities, and CUDA ones on a GPU, on every rank. The profiler starts before the window, runs
``kineto.lead_steps`` steps that its schedule keeps out of the trace (its warm-up: the first
step after starting pays for CUPTI's or the CPU tracer's set-up), then records the window's
steps as ``ProfilerStep#N`` ranges (HTA's iterations) and ``step`` ranges (the step alone, as
nsys's NVTX ``step``) inside a ``measure`` range, and is stopped and written
after the window, so neither its start nor its post-processing is part of a step. Each rank
writes ``<scenario>__<variant>-rank<r>.pt.trace.json.gz`` (:func:`harness.core.runfolder.kineto_trace`).

The trace carries ``distributedInfo`` (what HTA reads a trace's rank from): the profiler
records it itself when a process group is initialised (the distributed scenarios); a single
process gets ``{"backend": "none", "rank": 0, "world_size": 1}``, so HTA reads it as rank 0.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from harness.core import runfolder as rf

#: A single process's ``distributedInfo`` (no process group: the profiler records none).
SINGLE_PROCESS_INFO = {"backend": "none", "rank": 0, "world_size": 1}


class Capture:
    """``torch.profiler`` over one worker's window: :meth:`start` (and the lead steps),
    :meth:`step` after every window step but the last, :meth:`window` around the window,
    :meth:`finish` after it. ``start_s`` and ``write_s`` are its costs outside the window."""

    def __init__(self, settings: dict[str, Any], torch: Any, on_gpu: bool, trace: Path) -> None:
        self.settings = settings
        self.torch = torch
        self.on_gpu = on_gpu
        self.trace = trace
        self.prof: Any = None
        self.start_s = 0.0
        self.write_s = 0.0

    def start(self, workload: Any, first: int, steps: int, sync: Any) -> int:
        """Start the profiler and run its lead steps (steps ``first``...); the first window
        step's number."""
        from torch.profiler import ProfilerActivity, profile, schedule

        t0 = time.perf_counter()
        lead = int(self.settings.get("lead_steps", 1))
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.on_gpu else [])
        self.prof = profile(
            activities=acts,
            schedule=schedule(wait=0, warmup=lead, active=steps, repeat=1),
            record_shapes=bool(self.settings.get("record_shapes", False)),
            with_stack=bool(self.settings.get("with_stack", False)),
        )
        dist = getattr(self.torch, "distributed", None)
        if not (dist is not None and dist.is_available() and dist.is_initialized()):
            self.prof.preset_metadata_json("distributedInfo", json.dumps(SINGLE_PROCESS_INFO))
        self.prof.start()
        for j in range(lead):
            workload.step(first + j)
            self.prof.step()
        if lead:
            sync()
        self.start_s = time.perf_counter() - t0
        return first + lead

    def window(self) -> Any:
        """The window's ``measure`` range in the trace (the NVTX one nsys sees, for Kineto)."""
        import bottlenecks as markers

        return self.torch.profiler.record_function(markers.MEASURE)

    def step_range(self) -> Any:
        """One window step's ``step`` range (the NVTX one nsys sees): exactly the step, where
        ``ProfilerStep#N`` also holds what runs between steps."""
        import bottlenecks as markers

        return self.torch.profiler.record_function(markers.STEP)

    def step(self) -> None:
        """Between two window steps: the next ``ProfilerStep#N`` range."""
        self.prof.step()

    def finish(self) -> None:
        """Stop the profiler (its last step's range ends here) and write the gzipped trace."""
        t0 = time.perf_counter()
        self.prof.stop()
        self.trace.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.trace.with_name(f".{self.trace.name}.tmp{rf.KINETO_SUFFIX}")
        self.prof.export_chrome_trace(str(tmp))
        tmp.replace(self.trace)  # atomic: a trace on disk is whole
        self.write_s = time.perf_counter() - t0


def capture_for(spec: Any, torch: Any, on_gpu: bool, rank: int) -> Capture | None:
    """The worker's capture when its unit is a kineto one (``spec.kineto`` set), else None."""
    if spec.kineto is None:
        return None
    trace = rf.kineto_trace(Path(spec.out_dir), spec.scenario, spec.variant, rank)
    return Capture(spec.kineto, torch, on_gpu, trace)
