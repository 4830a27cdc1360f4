"""Host-speed probes a worker runs right before and right after its measured window.

Why: a lent guest's speed is a state that changes within seconds (docs/measurement.md has the
numbers), host-bound variants move with it while GPU-bound ones do not, and a run that does
not measure it cannot tell a slower host from a slower variant. Two probes, each tens of
milliseconds, bracket every timing and profiled window (outside it and outside nsys's capture
range, so they are neither timed nor traced as part of the window):

- ``launch_us``: asynchronous launches of a trivial op (``x.add_(1)`` on a 1-element tensor on
  the worker's device), timed on the host from the first call to the return of the last, the
  device synchronized only before and after: the CUDA launch cost on a GPU, torch's dispatch
  cost on the CPU;
- ``python_ms``: a fixed pure-Python summing loop: the interpreter's speed, which bounds a
  host-bound step (kernel_flood's and gil_contention's baselines).

result.json holds them as ``host_probe: {"before": {"launch_us", "python_ms"}, "after": {...}}``
(:data:`PROBE_KEYS`; the shape other readers rely on).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

#: The keys of one probe's record, in result.json's ``host_probe.before`` and ``.after``.
PROBE_KEYS = ("launch_us", "python_ms")
#: When a probe ran, relative to the measured window (``host_probe``'s keys).
WHEN = ("before", "after")


def launch_probe(torch: Any, device: Any, launches: int) -> float:
    """Microseconds per asynchronous launch of ``x.add_(1)`` on a 1-element tensor.

    One launch first (its tensor allocated, the op's dispatch warmed up), then ``launches``
    more, timed from the first call to the return of the last; the device is synchronized
    before and after the timed span only, so the number is the host's cost of issuing a
    launch, not the kernel's run time."""
    if launches < 1:
        raise ValueError(f"a launch probe needs at least one launch, got {launches}")
    on_gpu = device.type == "cuda"
    x = torch.zeros(1, device=device)
    x.add_(1)
    if on_gpu:
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for _ in range(launches):
        x.add_(1)
    elapsed = time.perf_counter() - t0
    if on_gpu:
        torch.cuda.synchronize(device)
    return elapsed * 1e6 / launches


def python_probe(iterations: int) -> float:
    """Milliseconds of a pure-Python loop summing ``range(iterations)`` one by one (the
    interpreter's speed: no C fast path such as ``sum``)."""
    if iterations < 1:
        raise ValueError(f"a Python loop probe needs at least one iteration, got {iterations}")
    t0 = time.perf_counter()
    total = 0
    for i in range(iterations):
        total += i
    elapsed = time.perf_counter() - t0
    if total != iterations * (iterations - 1) // 2:  # keeps the loop from being cut short
        raise RuntimeError("the Python loop probe summed wrongly")
    return elapsed * 1e3


def host_probe(torch: Any, device: Any, launches: int, python_loop: int) -> dict[str, float]:
    """One probe: ``{"launch_us": .., "python_ms": ..}`` (:data:`PROBE_KEYS`)."""
    return {
        "launch_us": launch_probe(torch, device, launches),
        "python_ms": python_probe(python_loop),
    }


#: A slice probe's Python loop and its copy between two host buffers: a millisecond or two
#: together, short beside a 0.1 s slice (what they read: docs/measurement.md).
SLICE_LOOP = 10_000
SLICE_COPY_BYTES = 8 << 20
#: The keys of one slice probe (result.json ``slices.probes[i].before`` and ``.after``).
SLICE_PROBE_KEYS = ("python_ms", "copy_ms", "helper_python_ms", "launch_us")
#: A slice probe's launches (:func:`launch_probe`): about 1-2 ms of a GPU host.
SLICE_LAUNCHES = 200


class SliceProbe:
    """The host's speed right before and right after one slice of a sliced round: the Python
    loop on the calling thread (the loop's core), a copy of :data:`SLICE_COPY_BYTES` between
    two host buffers (memory bandwidth: what a pageable copy's staging pays), and the loop on
    a short-lived thread pinned to ``helper_cpu`` (where a GIL-holding thread or a loader
    worker runs; left out where nothing is pinned), and ``launch()`` where given (the worker's
    :func:`launch_probe`, :data:`SLICE_LAUNCHES` launches). Why per slice: the host's speed modes
    change within a second, and a pair of neighbouring slices is what meets one of them."""

    def __init__(
        self, helper_cpu: int | None = None, launch: Callable[[], float] | None = None
    ) -> None:
        import numpy as np  # here: a worker without slice probes imports it with torch

        self.helper_cpu, self.launch, self._copyto = helper_cpu, launch, np.copyto
        self._src = np.ones(SLICE_COPY_BYTES // 8)
        self._dst = np.empty_like(self._src)
        np.copyto(self._dst, self._src)  # both buffers' pages touched before the first probe

    def __call__(self) -> dict[str, float]:
        out = {"python_ms": python_probe(SLICE_LOOP)}
        t0 = time.perf_counter()
        self._copyto(self._dst, self._src)
        out["copy_ms"] = (time.perf_counter() - t0) * 1e3
        if self.helper_cpu is not None:
            out["helper_python_ms"] = self._on_helper(self.helper_cpu)
        if self.launch is not None:
            out["launch_us"] = self.launch()
        return out

    @staticmethod
    def _on_helper(cpu: int) -> float:
        got: list[float] = []

        def run() -> None:
            os.sched_setaffinity(0, {cpu})  # this thread only
            got.append(python_probe(SLICE_LOOP))

        thread = threading.Thread(target=run, name="slice-probe", daemon=True)
        thread.start()
        thread.join()
        return got[0]


def probe_record(before: dict[str, float] | None, after: dict[str, float] | None) -> Any:
    """result.json's ``host_probe``: ``{"before": .., "after": ..}``, or None when the probes
    were off (``harness.host_probe.enabled=false``)."""
    if before is None and after is None:
        return None
    return {"before": before, "after": after}


def probe_value(record: Any, when: str, key: str) -> float | None:
    """One number of a result's ``host_probe`` (``when``: 'before' or 'after'; ``key``: one of
    :data:`PROBE_KEYS`); None where the result has none (probes off, an older result)."""
    if not isinstance(record, dict):
        return None
    part = record.get(when)
    if not isinstance(part, dict) or part.get(key) is None:
        return None
    return float(part[key])


# -- the tables' columns (harness.execution.collect) ---------------------------------------------

#: timings.csv's probe columns: ``probe_<key>_<when>`` for each key and when.
TIMING_COLUMNS = tuple(f"probe_{key}_{when}" for key in PROBE_KEYS for when in WHEN)


def timing_columns(result: dict[str, Any]) -> dict[str, float | None]:
    """A worker's timings.csv probe columns (:data:`TIMING_COLUMNS`) from its result.json."""
    record = result.get("host_probe")
    return {
        f"probe_{key}_{when}": probe_value(record, when, key) for key in PROBE_KEYS for when in WHEN
    }


def process_probe(result: dict[str, Any], key: str) -> float | None:
    """One process's probe ``key``: the mean of its before and after values (either alone when
    the other is missing); None when it has neither."""
    record = result.get("host_probe")
    values = [v for v in (probe_value(record, w, key) for w in WHEN) if v is not None]
    return sum(values) / len(values) if values else None


def median_probe(results: list[dict[str, Any]], key: str) -> float | None:
    """The median over processes of :func:`process_probe` (a variant's timing rounds): one
    slow round does not move it."""
    values = sorted(v for v in (process_probe(r, key) for r in results) if v is not None)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2
