"""What slicing costs, read back from a sliced round's result files (timings.csv's columns).

Two costs, both measured (docs/measurement.md):

- the hand-over (``turn_gap_ms``): from one process's slice end (its GPU work synchronised) to
  the next process's slice start: the parent's stop and continue signals and the socket round
  trip. Wall time of the round, in no step;
- the restart (``slice_first_step_excess_ms``): how much longer a slice's first step takes than
  the slice's other steps: the GPU's queue drained at the last turn and has to fill again, and
  the core's caches hold the other process's data. Inside the measured steps: it is what a
  sliced mean step carries beyond a back-to-back one, per slice.

Slice starts and ends are on ``time.monotonic``, one clock for every process of the machine,
so gaps between processes can be read from their files.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from statistics import median
from typing import Any

__all__ = ["TIMING_COLUMNS", "first_step_excess_ms", "round_gaps", "timing_columns"]

#: timings.csv's slicing columns (blank for a back-to-back worker).
TIMING_COLUMNS = (
    "slices",
    "slice_steps",
    "slice_first_step_excess_ms",
    "turn_gap_ms",
    "turn_gaps_s",
)


def first_step_excess_ms(step_ms: Sequence[float], slice_steps: Sequence[int]) -> float | None:
    """The median over slices of (first step - median of the slice's other steps), ms; None
    where no slice has two steps."""
    out, at = [], 0
    for n in slice_steps:
        part = list(step_ms[at : at + n])
        at += n
        if len(part) >= 2:
            out.append(part[0] - median(part[1:]))
    return median(out) if out else None


def round_gaps(results: Mapping[Any, Mapping[str, Any]]) -> dict[Any, list[float]]:
    """Per process of one round (``results``: key -> its result.json), the gaps (seconds)
    before each of its slices that follow another process's slice."""
    spans = []
    for key, res in results.items():
        cut = res.get("slices") or {}
        for a, b in zip(cut.get("start_s") or [], cut.get("end_s") or [], strict=False):
            spans.append((float(a), float(b), key))
    spans.sort()
    gaps: dict[Any, list[float]] = {key: [] for key in results}
    for (_, end, prev), (start, _, key) in itertools.pairwise(spans):
        if key != prev:
            gaps[key].append(max(0.0, start - end))
    return gaps


def timing_columns(result: Mapping[str, Any], gaps: Iterable[float] = ()) -> dict[str, Any]:
    """A worker's :data:`TIMING_COLUMNS` from its result.json and its turn gaps (seconds)."""
    cut = result.get("slices")
    if not isinstance(cut, Mapping):
        return dict.fromkeys(TIMING_COLUMNS)
    steps = [int(n) for n in cut.get("steps") or []]
    gaps = list(gaps)
    return {
        "slices": len(steps),
        "slice_steps": median(steps) if steps else None,
        "slice_first_step_excess_ms": first_step_excess_ms(result.get("step_ms") or [], steps),
        "turn_gap_ms": 1e3 * median(gaps) if gaps else None,
        "turn_gaps_s": sum(gaps),
    }


def check_run(run_dir: Any) -> dict[str, Any]:
    """A run's sliced rounds at a glance: slices, hand-overs (median, most, summed), the
    median first-step excess, and every pair of slices of one round that overlap (there must
    be none)."""
    from pathlib import Path

    from harness.core import runfolder as rf

    rounds: dict[tuple[str, str], dict[str, Mapping[str, Any]]] = {}
    for path in rf.result_files(Path(run_dir)):
        res = rf.read_json(path) or {}
        if isinstance(res.get("slices"), Mapping):
            key = (str(res.get("scenario")), str(res.get("phase")))
            rounds.setdefault(key, {})[str(res.get("variant"))] = res
    gaps, excess, overlaps, slices = [], [], [], 0
    for key, results in sorted(rounds.items()):
        for variant, got in round_gaps(results).items():
            gaps += got
            cut = results[variant]["slices"]
            slices += len(cut.get("steps") or [])
            e = first_step_excess_ms(results[variant].get("step_ms") or [], cut.get("steps") or [])
            if e is not None:
                excess.append(e)
        spans = sorted((a, b, v) for v, r in results.items()
                       for a, b in zip(r["slices"]["start_s"], r["slices"]["end_s"], strict=False))  # fmt: skip
        overlaps += [(*key, p, n) for (_, end, p), (start, _, n) in itertools.pairwise(spans)
                     if start < end]  # fmt: skip
    return {
        "rounds": len(rounds), "slices": slices,
        "turn_gap_ms_median": 1e3 * median(gaps) if gaps else None,
        "turn_gap_ms_max": 1e3 * max(gaps) if gaps else None,
        "turn_gaps_s": sum(gaps),
        "first_step_excess_ms_median": median(excess) if excess else None,
        "overlaps": overlaps,
    }  # fmt: skip


if __name__ == "__main__":
    import json
    import sys

    print(json.dumps(check_run(sys.argv[1]), indent=2))
