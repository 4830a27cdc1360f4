"""timings.csv (where each worker's wall time went) and wall_time.json's numbers, rebuilt from the
unit folders on disk.

Everything is read back from the files, never from memory, so a table written after a crash,
a timeout or Ctrl-C holds exactly what is safely on disk. A sliced round's hand-overs and
restarts (:mod:`harness.execution.slicecost`) are read across its processes' result files.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import pandas as pd

from harness.core import runfolder as rf
from harness.core import schedwait
from harness.core.runfolder import Unit
from harness.execution import hostprobe, slicecost

__all__ = [
    "IMPORT_PARTS",
    "MEASURE_STAMPS",
    "RANK_COLUMNS",
    "STAMPS",
    "TIMING_PARTS",
    "WORKER_PARTS",
    "build_timings_table",
    "first_env",
    "read_optional",
    "setup_stage_column",
    "wall_time_record",
    "with_added_rounds",
]


#: The parts of a worker's wall time it measures itself (timings.csv columns, seconds), in
#: the order it passes them: start-up (interpreter and wrappers: nsys, torchrun), imports, the
#: CUDA context, set-up, waiting at its gate before the warm-up (``hold_s``: the previous
#: worker was still tearing down), warm-up, the measured window, the time
#: cudaProfilerStop took (``capture_stop_s``: nsys taking the capture, profiled GPU runs), and
#: the host probes before and after the window (``probe_s``: harness.execution.hostprobe);
#: a kineto unit's PyTorch Profiler start with its lead steps (``kineto_start_s``) and its
#: stop, post-processing and trace writing (``kineto_write_s``), both outside the window.
WORKER_PARTS = (
    "startup_s",
    "import_s",
    "cuda_init_s",
    "setup_s",
    "hold_s",
    "warmup_s",
    "window_s",
    "capture_stop_s",
    "probe_s",
    "kineto_start_s",
    "kineto_write_s",
)

#: Where a worker's wall time goes (timings.csv columns, seconds): its own parts, tear-down
#: (the rest of ``wall_s``), nsys finishing its report in the background (``finalize_s``, not
#: part of ``wall_s``) and the SQLite export.
TIMING_PARTS = (*WORKER_PARTS, "teardown_s", "finalize_s", "export_s")

#: When the worker was launched and when it ended (epoch seconds): what ran beside what.
STAMPS = ("launched_at", "ended_at")

#: When it was set up (then held at its gate), began its warm-up and ended its window (epoch
#: seconds, the worker's own clock): the run's critical path is these windows and the gaps
#: between them.
MEASURE_STAMPS = ("setup_ended_at", "warmup_started_at", "window_ended_at")


def build_timings_table(run_dir: Path, units: list[Unit]) -> pd.DataFrame:
    """One row per worker process: its wall time split into :data:`TIMING_PARTS`, its launch
    and end (:data:`STAMPS`), the parts of its imports, then the scenario's named set-up
    stages (``setup_<name>_s``, parts of ``setup_s``)."""
    rows: list[dict[str, Any]] = []
    stages: dict[str, None] = {}
    results: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
    for unit in with_added_rounds(run_dir, units):
        found = _timing_row(run_dir, unit)
        if found is not None:
            row, result = found
            results.setdefault((unit.scenario, unit.phase), {})[len(rows)] = result
            rows.append(row)
            stages.update(dict.fromkeys(k for k in row if _is_stage_column(k)))
    for in_round in results.values():  # a sliced round's hand-overs are between its processes
        gaps = slicecost.round_gaps(in_round)
        for i, result in in_round.items():
            rows[i].update(slicecost.timing_columns(result, gaps[i]))
    columns = ["scenario", "variant", "phase", "status", "wall_s", *TIMING_PARTS, *STAMPS]
    columns += list(MEASURE_STAMPS)
    columns += [*IMPORT_PARTS, *RANK_COLUMNS, *hostprobe.TIMING_COLUMNS]
    columns += [*schedwait.TIMING_COLUMNS, *slicecost.TIMING_COLUMNS, *stages]
    return pd.DataFrame(rows, columns=columns)


def with_added_rounds(run_dir: Path, units: list[Unit]) -> list[Unit]:
    """``units`` and, after each scenario's last planned timing round, the timing rounds the
    run added on disk (harness.execution.rounds: rounds where the noise is)."""
    planned = set(units)
    out: list[Unit] = []
    for i, unit in enumerate(units):
        out.append(unit)
        nxt = units[i + 1] if i + 1 < len(units) else None
        if not rf.is_timing(unit.phase) or (
            nxt is not None and nxt.scenario == unit.scenario and rf.is_timing(nxt.phase)
        ):
            continue
        names = list(dict.fromkeys(u.variant for u in units if u.scenario == unit.scenario))
        added = [
            Unit(unit.scenario, v, p.name)
            for v in names
            for p in rf.phase_dirs(run_dir, unit.scenario, v)
            if rf.is_timing(p.name) and Unit(unit.scenario, v, p.name) not in planned
        ]
        out += sorted(added, key=lambda u: rf.timing_round(u.phase) or 0)
    return out


#: Parts of ``import_s`` (torch and its kin; the preload modules, e.g. ``torch._dynamo`` in a
#: profiled worker; then the scenarios and the harness), seconds.
IMPORT_PARTS = ("import_torch_s", "import_preload_s", "import_scenarios_s")

#: The ranks of a distributed worker (``timing.ranks`` in rank 0's result.json): how many, and
#: the longest start-up and imports of any of them (seconds; under torchrun each rank is a
#: fresh interpreter, forked ranks import nothing). A single-process worker is one rank.
RANK_COLUMNS = ("ranks", "ranks_startup_max_s", "ranks_import_max_s")

#: timings.csv's columns of the scenario's named set-up stages: ``setup_<name>_s``.
SETUP_STAGE_PREFIX = "setup_"


def setup_stage_column(name: str) -> str:
    """The timings.csv column of set-up stage ``name`` (seconds)."""
    return f"{SETUP_STAGE_PREFIX}{name}_s"


def _is_stage_column(column: str) -> bool:
    return (
        column.startswith(SETUP_STAGE_PREFIX)
        and column.endswith("_s")
        and column not in TIMING_PARTS
    )


def _timing_row(run_dir: Path, unit: Unit) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """A unit's timings.csv row and its result.json ({} where there is none); None when it
    has no status (not run, or interrupted)."""
    out_dir = unit.dir(run_dir)
    status = read_optional(out_dir / rf.STATUS)
    if status is None:
        return None
    row: dict[str, Any] = {**asdict(unit), "status": status.get("status")}
    wall = float(status.get("wall_s") or 0.0)
    row["wall_s"] = wall
    result = read_optional(out_dir / rf.RESULT) or {}
    timing = result.get("timing") or {}
    known = 0.0
    for key in WORKER_PARTS:
        value = timing.get("launch_to_main_s" if key == "startup_s" else key)
        row[key] = value
        known += float(value or 0.0)
    row["teardown_s"] = max(0.0, wall - known) if timing else None
    row["finalize_s"] = status.get("finalize_s")
    row["export_s"] = status.get("export_s")
    row.update({key: status.get(key) for key in STAMPS})
    row.update({key: timing.get(key) for key in MEASURE_STAMPS})
    row.update({key: timing.get(key) for key in IMPORT_PARTS})
    row.update(_rank_columns(timing.get("ranks") or []))
    row.update(hostprobe.timing_columns(result))
    row.update(schedwait.timing_columns(result))
    for name, seconds in (timing.get("setup_stages_s") or {}).items():
        row[setup_stage_column(str(name))] = seconds
    return row, result


def _rank_columns(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """:data:`RANK_COLUMNS` from the per-rank records (empty: an older result, left blank)."""
    if not ranks:
        return {}

    def most(key: str) -> float | None:
        values = [float(r[key]) for r in ranks if r.get(key) is not None]
        return max(values) if values else None

    return {
        "ranks": len(ranks),
        "ranks_startup_max_s": most("launch_to_main_s"),
        "ranks_import_max_s": most("import_s"),
    }


def wall_time_record(
    table: pd.DataFrame, walls: dict[str, float], total_s: float
) -> dict[str, Any]:
    """wall_time.json's numbers from timings.csv: the run's phases (``walls``), every part
    summed over the worker processes (all, and timing runs, nsys profiles and Kineto runs
    apart: ``worker_parts_by_phase_s``), and what ran
    beside what: ``workers_busy_s`` is the time at least one worker ran (the union of their
    launch-to-end intervals), ``workers_overlap_s`` the worker time that ran beside another
    worker (the sum of their walls minus that union)."""
    parts = [c for c in TIMING_PARTS if c in table]
    record: dict[str, Any] = {"total_s": total_s, **walls}
    record["worker_parts_s"] = {c: float(table[c].sum()) for c in parts}
    kinds = table["phase"].map(lambda ph: rf.phase_kind(str(ph)))
    record["worker_parts_by_phase_s"] = {
        kind: {"processes": len(group), "wall_s": float(group["wall_s"].sum()),
               **{c: float(group[c].sum()) for c in parts}}
        for kind, group in table.groupby(kinds)
    }  # fmt: skip
    stamped = table.dropna(subset=list(STAMPS)) if set(STAMPS) <= set(table) else table.iloc[:0]
    busy = _union_length(stamped["launched_at"], stamped["ended_at"]) if len(stamped) else 0.0
    record["workers_busy_s"] = busy
    overlap = float(stamped["wall_s"].sum()) - busy if len(stamped) else 0.0
    record["workers_overlap_s"] = max(0.0, overlap)  # walls and stamps differ by rounding
    record.update(_measuring(table))
    if "slices" in table and pd.to_numeric(table["slices"], errors="coerce").notna().any():
        record["slicing"] = {
            "slices": int(pd.to_numeric(table["slices"], errors="coerce").sum()),
            "turn_gaps_s": float(pd.to_numeric(table["turn_gaps_s"], errors="coerce").sum()),
        }
    return record


def _measuring(table: pd.DataFrame) -> dict[str, float]:
    """``measuring_s``: the time some worker warmed up or measured (the union of its spans);
    ``between_measurements_s``: the rest of the time from the first warm-up to the last window's
    end, when the GPU waited on set-ups, gates and tear-downs."""
    cols = ["warmup_started_at", "window_ended_at"]
    if not set(cols) <= set(table):
        return {}
    spans = table.dropna(subset=cols)
    if spans.empty:
        return {}
    measuring = _union_length(spans[cols[0]], spans[cols[1]])
    reach = float(spans[cols[1]].max()) - float(spans[cols[0]].min())
    return {"measuring_s": measuring, "between_measurements_s": max(0.0, reach - measuring)}


def _union_length(starts: Any, ends: Any) -> float:
    """Length of the union of the intervals [start, end]."""
    total, reach = 0.0, float("-inf")
    pairs = zip((float(x) for x in starts), (float(x) for x in ends), strict=True)
    for start, end in sorted(pairs):
        if end <= reach:
            continue
        total += end - max(start, reach)
        reach = end
    return total


def read_optional(path: Path) -> dict[str, Any] | None:
    """A status or result record; None when missing or unreadable (the row is then skipped
    or partial rather than the whole table lost)."""
    try:
        data = rf.read_json(path)
    except rf.CorruptFileError:
        return None
    return data if isinstance(data, dict) else None


def first_env(run_dir: Path) -> dict[str, Any]:
    """The environment a worker recorded (torch, GPU, host): the first readable result's."""
    for res in rf.result_files(run_dir):
        data = read_optional(res)
        if data is not None:
            return data.get("env", {})
    return {}
