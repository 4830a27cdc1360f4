"""The run's tables, rebuilt from the unit folders on disk: ``runs.csv`` (one row per scenario x
variant) and ``timings.csv`` (where each worker's wall time went).

Everything is read back from the files, never from memory, so a table written after a crash,
a timeout or Ctrl-C holds exactly what is safely on disk.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import pandas as pd

from harness import runfolder as rf
from harness.config import SuiteConfig
from harness.runfolder import Status, Unit
from harness.stats import probe_effect_ci, speedup_ci, summarize
from scenarios import Scenario

#: Where a worker's wall time goes (timings.csv columns, seconds).
TIMING_PARTS = (
    "startup_s",
    "import_s",
    "cuda_init_s",
    "setup_s",
    "warmup_s",
    "window_s",
    "teardown_s",
    "finalize_s",
    "export_s",
)


def build_timings_table(run_dir: Path, units: list[Unit]) -> pd.DataFrame:
    """One row per worker process: its wall time split into start-up (interpreter and wrappers
    such as nsys or torchrun), imports, set-up, warm-up, the measured window, tear-down (the
    rest, including nsys writing its report when it is waited for in line), nsys writing its
    report in the background (``finalize_s``, not part of ``wall_s``) and the SQLite export;
    then the scenario's named set-up stages (``setup_<name>_s``, parts of ``setup_s``)."""
    rows: list[dict[str, Any]] = []
    stages: dict[str, None] = {}
    for unit in units:
        row = _timing_row(run_dir, unit)
        if row is not None:
            rows.append(row)
            stages.update(dict.fromkeys(k for k in row if _is_stage_column(k)))
    columns = ["scenario", "variant", "phase", "status", "wall_s", *TIMING_PARTS]
    columns += [*IMPORT_PARTS, *stages]
    return pd.DataFrame(rows, columns=columns)


#: Parts of ``import_s`` (torch and its kin; then the scenarios and the harness), seconds.
IMPORT_PARTS = ("import_torch_s", "import_scenarios_s")

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


def _timing_row(run_dir: Path, unit: Unit) -> dict[str, Any] | None:
    """A unit's timings.csv row; None when it has no status (not run, or interrupted)."""
    out_dir = unit.dir(run_dir)
    status = _read_optional(out_dir / rf.STATUS)
    if status is None:
        return None
    row: dict[str, Any] = {**asdict(unit), "status": status.get("status")}
    wall = float(status.get("wall_s") or 0.0)
    row["wall_s"] = wall
    result = _read_optional(out_dir / rf.RESULT) or {}
    timing = result.get("timing") or {}
    known = 0.0
    for key in TIMING_PARTS[:-3]:  # the worker's own parts, up to its measured window
        value = timing.get("launch_to_main_s" if key == "startup_s" else key)
        row[key] = value
        known += float(value or 0.0)
    row["teardown_s"] = max(0.0, wall - known) if timing else None
    row["finalize_s"] = status.get("finalize_s")
    row["export_s"] = status.get("export_s")
    row.update({key: timing.get(key) for key in IMPORT_PARTS})
    for name, seconds in (timing.get("setup_stages_s") or {}).items():
        row[setup_stage_column(str(name))] = seconds
    return row


def _read_optional(path: Path) -> dict[str, Any] | None:
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
        data = _read_optional(res)
        if data is not None:
            return data.get("env", {})
    return {}


COLUMNS = [
    "scenario",
    "variant",
    "kind",
    "bottleneck",
    "size",
    "device",
    "severity",
    "status",
    "n_steps",
    "repeats",
    "step_ms_median",
    "step_ms_p10",
    "step_ms_p90",
    "step_ms_mean",
    "throughput_samples_per_s",
    "samples_per_step",
    "speedup",
    "speedup_ci_low",
    "speedup_ci_high",
    "share_of_ideal",
    "setup_s",
    "profiled",
    "profile_step_ms_mean",
    "probe_effect",
    "probe_effect_ci_low",
    "probe_effect_ci_high",
    "report",
    "error",
]


def _load_results(
    run_dir: Path, scenario: str, variant: str
) -> tuple[list[dict[str, Any]], dict[str, Any] | None, list[str], bool]:
    """Timing results, the profile result, error messages, and whether a phase ran out of memory."""
    timings, profile, errors = [], None, []
    skipped, oom = "", False
    for phase_dir in rf.phase_dirs(run_dir, scenario, variant):
        status = rf.unit_status(phase_dir)
        if status is None:
            continue
        record = _read_optional(phase_dir / rf.STATUS) or {}
        if status == Status.SKIPPED:
            skipped = record["error"]
            continue
        if status == Status.OOM:
            oom = True
        if status != Status.OK:
            errors.append(f"{phase_dir.name}: {record.get('error') or status.value}")
        res = rf.read_result(phase_dir)
        if res is None:
            continue
        if rf.is_timing(phase_dir.name) and status == Status.OK:
            timings.append(res)
        elif rf.is_profile(phase_dir.name):
            profile = {**res, "_status": status, "_dir": phase_dir}
    if skipped and not (timings or errors):
        errors = [f"skipped: {skipped}"]
    return timings, profile, errors, oom


def build_runs_table(
    run_dir: Path,
    found: dict[str, Scenario],
    cfg: SuiteConfig,
    selected: list[str],
    bootstrap: int = 2000,
) -> pd.DataFrame:
    """One row per scenario x variant, from the result files on disk (tidy, units in names)."""
    rows: list[dict[str, Any]] = []
    for name in selected:
        scen = found[name]
        steps: dict[str, list[list[float]]] = {}
        mine = []
        for vname in cfg.scenario[name].variants or scen.variant_names:
            row, pooled = _variant_row(run_dir, scen, vname, cfg.scenario[name].severity)
            if pooled:
                steps[vname] = pooled
            mine.append(row)
        _add_ratios(mine, scen, steps, bootstrap, cfg.harness.seed)
        rows += mine
    frame = pd.DataFrame(rows, columns=COLUMNS)
    for col in ("n_steps", "repeats", "samples_per_step"):
        frame[col] = frame[col].astype("Int64")
    frame["profiled"] = frame["profiled"].astype(bool)
    return frame


def _variant_row(
    run_dir: Path, scen: Scenario, vname: str, severity: float
) -> tuple[dict[str, Any], list[list[float]]]:
    """A variant's runs.csv row (without the ratios) and its step times, one list per timing
    process (the intervals resample processes, then steps)."""
    name = scen.name
    timings, profile, errors, oom = _load_results(run_dir, name, vname)
    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    row.update(
        scenario=name,
        variant=vname,
        kind=scen.variant(vname).kind,
        bottleneck=scen.bottleneck,
        severity=severity,
        repeats=len(timings),
        profiled=False,
        error=" | ".join(errors) or None,
    )
    pooled = [ms for t in timings for ms in t["step_ms"]]
    if timings:
        row.update(summarize(pooled))
        window = sum(t["window_s"] for t in timings)
        row.update(
            size=timings[0]["size"],
            device=timings[0]["device"],
            n_steps=len(pooled),
            samples_per_step=timings[0]["samples_per_step"],
            throughput_samples_per_s=timings[0]["samples_per_step"] * len(pooled) / window,
            setup_s=float(sum(t["setup_s"] for t in timings) / len(timings)),
        )
    if profile is not None:
        rep = rf.profile_file(run_dir, name, vname, rf.REPORT_SUFFIX)
        row["profiled"] = profile["_status"] == Status.OK
        row["profile_step_ms_mean"] = float(sum(profile["step_ms"]) / len(profile["step_ms"]))
        if row["step_ms_mean"] and profile["step_ms"]:
            pe, lo, hi = probe_effect_ci(profile["step_ms"], [t["step_ms"] for t in timings])
            row.update(probe_effect=pe, probe_effect_ci_low=lo, probe_effect_ci_high=hi)
        row["report"] = str(rep.relative_to(run_dir)) if rep else None
    if errors and errors[0].startswith("skipped: "):
        row["status"] = Status.SKIPPED.value
    elif oom:
        row["status"] = Status.OOM.value
    else:
        row["status"] = _row_status(errors, bool(timings)).value
    return row, [list(t["step_ms"]) for t in timings if t["step_ms"]]


def _add_ratios(
    rows: list[dict[str, Any]],
    scen: Scenario,
    steps: dict[str, list[list[float]]],
    bootstrap: int,
    seed: int,
) -> None:
    """Speedup vs the baseline (with its bootstrap CI) and share of ``ideal``, in place."""
    base = steps.get(scen.baseline.name)
    ideal = next((v.name for v in scen.variants if v.kind == "ideal"), None)
    for row in rows:
        if row["variant"] not in steps:
            continue
        mine = steps[row["variant"]]
        if base:
            sp, lo, hi = speedup_ci(base, mine, resamples=bootstrap, seed=seed)
            row.update(speedup=sp, speedup_ci_low=lo, speedup_ci_high=hi)
        if ideal and ideal in steps:
            row["share_of_ideal"] = _mean(steps[ideal]) / _mean(mine)


def _mean(per_process: list[list[float]]) -> float:
    """Mean step time over every step of every process (the pooled mean)."""
    flat = [ms for proc in per_process for ms in proc]
    return sum(flat) / len(flat)


def print_summary(table: pd.DataFrame, run_dir: Path) -> None:
    """A compact table on stdout: the numbers a performance engineer reads first."""
    if table.empty:
        print(f"no results in {run_dir}")
        return
    view = table[
        [
            "scenario",
            "variant",
            "status",
            "step_ms_median",
            "throughput_samples_per_s",
            "speedup",
            "speedup_ci_low",
            "speedup_ci_high",
            "share_of_ideal",
            "probe_effect",
        ]
    ].rename(
        columns={
            "step_ms_median": "step_ms",
            "throughput_samples_per_s": "samples/s",
            "speedup_ci_low": "ci_low",
            "speedup_ci_high": "ci_high",
            "share_of_ideal": "of_ideal",
            "probe_effect": "probe",
        }
    )
    with pd.option_context("display.width", 160, "display.max_columns", 20):
        print(view.to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    print(f"\nrun folder: {run_dir}")


def _row_status(errors: list[str], timed: bool) -> Status:
    """A variant's runs.csv status when it was neither skipped nor out of memory."""
    if errors:
        return Status.FAILED
    return Status.OK if timed else Status.MISSING
