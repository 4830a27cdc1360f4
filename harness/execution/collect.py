"""The run's tables, rebuilt from the unit folders on disk: ``runs.csv`` (one row per scenario x
variant) here, and ``timings.csv`` (where each worker's wall time went) in
:mod:`harness.execution.walltable`, re-exported.

Everything is read back from the files, never from memory, so a table written after a crash,
a timeout or Ctrl-C holds exactly what is safely on disk.

Speedups and shares of ``ideal`` are paired within timing rounds
(:func:`harness.core.stats.paired_ratio_ci`): a scenario's variants run back to back in each
round, so the host's drift over minutes moves both sides of a round's ratio alike and cancels
there. Beside them, the rounds' spread (``round_spread``, ``unstable``) and the host probes
each worker ran around its window (:mod:`harness.execution.hostprobe`) say whether the host
itself moved. The probe effect (profiled against timed) is not paired: it stays unpaired
(:func:`harness.core.stats.probe_effect_ci`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import pandas as pd

from harness.core import runfolder as rf
from harness.core import schedwait
from harness.core.config import SuiteConfig
from harness.core.runfolder import Status
from harness.core.stats import (
    paired_ratio_ci,
    paired_rounds,
    probe_effect_ci,
    round_spread,
    speedup_ci,
    summarize,
)
from harness.execution import hostprobe
from harness.execution.walltable import (  # noqa: F401 - re-exported: the tables' one module
    IMPORT_PARTS,
    MEASURE_STAMPS,
    RANK_COLUMNS,
    STAMPS,
    TIMING_PARTS,
    WORKER_PARTS,
    build_timings_table,
    first_env,
    read_optional,
    setup_stage_column,
    wall_time_record,
    with_added_rounds,
)
from scenarios import Scenario

#: runs.csv's run-queue columns (:mod:`harness.core.schedwait`): the median over the variant's
#: timing rounds of each process's own value (a distributed one: its rank that waited most).
RUNQUEUE_COLUMNS = (
    "loop_runqueue_wait_ms_per_step",
    "loop_runqueue_wait_share",
    "threads_runqueue_wait_share",
)

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
    "share_of_ideal_ci_low",
    "share_of_ideal_ci_high",
    "share_of_ideal_rounds",
    "paired_rounds",
    "round_spread",
    "unstable",
    "setup_s",
    "profiled",
    "profile_step_ms_mean",
    "probe_effect",
    "probe_effect_ci_low",
    "probe_effect_ci_high",
    "probe_launch_us",
    "probe_python_ms",
    "profile_probe_launch_us",
    "profile_probe_python_ms",
    *RUNQUEUE_COLUMNS,
    "kineto_step_ms_mean",
    "kineto_probe_effect",
    "kineto_probe_effect_ci_low",
    "kineto_probe_effect_ci_high",
    "kineto_traces",
    "step_launches",
    "loop_cpu_ms_per_step",
    "loop_cpu_launches",
    "slice_s",
    "report",
    "error",
]


class Loaded(NamedTuple):
    """A variant's results on disk (:func:`_load_results`)."""

    timings: list[dict[str, Any]]
    profile: dict[str, Any] | None
    kineto: dict[str, Any] | None
    """The PyTorch Profiler's run's result (``kineto.enabled``), if it finished."""
    errors: list[str]
    skipped: str
    oom: bool


def _load_results(run_dir: Path, scenario: str, variant: str) -> Loaded:
    """Timing results, the profile's and the Kineto run's results, error messages, why the
    variant was skipped ('' when it was not), and whether a phase ran out of memory. Phases are
    read in run order, so the skip reason is the first round's."""
    timings, profile, errors = [], None, []
    kineto: dict[str, Any] | None = None
    skipped, oom = "", False
    for phase_dir in rf.phase_dirs(run_dir, scenario, variant):
        status = rf.unit_status(phase_dir)
        if status is None:
            continue
        record = read_optional(phase_dir / rf.STATUS) or {}
        if status == Status.SKIPPED:
            skipped = skipped or str(record.get("error") or "skipped")
            continue
        if status == Status.OOM:
            oom = True
        if status != Status.OK:
            errors.append(f"{phase_dir.name}: {record.get('error') or status.value}")
        res = rf.read_result(phase_dir)
        if res is None:
            continue
        if rf.is_timing(phase_dir.name) and status == Status.OK:
            timings.append({**res, "_round": rf.timing_round(phase_dir.name)})
        elif rf.is_profile(phase_dir.name):
            profile = {**res, "_status": status, "_dir": phase_dir}
        elif rf.is_kineto(phase_dir.name) and status == Status.OK:
            kineto = res
    return Loaded(timings, profile, kineto, errors, skipped, oom)


def build_runs_table(
    run_dir: Path,
    found: dict[str, Scenario],
    cfg: SuiteConfig,
    selected: list[str],
    bootstrap: int = 2000,
    cache: dict[str, tuple[Any, list[dict[str, Any]]]] | None = None,
) -> pd.DataFrame:
    """One row per scenario x variant, from the result files on disk (tidy, units in names).

    ``cache`` (a dict the caller keeps between calls) holds each scenario's rows under the
    state of its files (names, sizes, modification times): a scenario whose files did not
    change since the last call is not read nor bootstrapped again. The runner rebuilds the
    table after every worker, and only the running scenario changes."""
    rows: list[dict[str, Any]] = []
    h = cfg.harness
    for name in selected:
        key = (
            _files_state(run_dir, name, bootstrap, h.seed, h.unstable_spread)
            if cache is not None
            else None
        )
        if cache is not None and name in cache and cache[name][0] == key:
            rows += [dict(r) for r in cache[name][1]]
            continue
        mine = _scenario_rows(run_dir, found[name], cfg, bootstrap)
        if cache is not None:
            cache[name] = (key, [dict(r) for r in mine])
        rows += mine
    frame = pd.DataFrame(rows, columns=COLUMNS)
    for col in ("n_steps", "repeats", "samples_per_step", "paired_rounds",
                "share_of_ideal_rounds", "kineto_traces"):  # fmt: skip
        frame[col] = frame[col].astype("Int64")
    for col in ("profiled", "unstable"):
        frame[col] = frame[col].fillna(False).astype(bool)
    return frame


def _scenario_rows(
    run_dir: Path, scen: Scenario, cfg: SuiteConfig, bootstrap: int
) -> list[dict[str, Any]]:
    """The scenario's runs.csv rows, ratios and their intervals included."""
    steps: dict[str, Rounds] = {}
    mine = []
    for vname in cfg.scenario[scen.name].variants or scen.variant_names:
        row, rounds = _variant_row(run_dir, scen, vname, cfg.scenario[scen.name].severity)
        if rounds:
            steps[vname] = rounds
        _add_spread(row, rounds, cfg.harness.unstable_spread)
        mine.append(row)
    _add_ratios(mine, scen, steps, bootstrap, cfg.harness.seed)
    return mine


def _files_state(run_dir: Path, scenario: str, *settings: Any) -> tuple[Any, ...]:
    """What a scenario's rows are made from: every unit file's name, inode, size and
    modification time (status.json, result.json, the reports; an atomic rewrite is a new
    inode), and the settings of the computation."""
    state = []
    for path in sorted(Path(run_dir, scenario).glob("*/*/*")):
        try:
            st = path.stat()
        except OSError:  # removed meanwhile: the next call sees the new state
            continue
        state.append((str(path), st.st_ino, st.st_size, st.st_mtime_ns))
    return (*settings, tuple(state))


#: A variant's step times in ms per timing round (round number -> that process's steps).
Rounds = dict[int, list[float]]


def _variant_row(
    run_dir: Path, scen: Scenario, vname: str, severity: float
) -> tuple[dict[str, Any], Rounds]:
    """A variant's runs.csv row (without the ratios) and its step times by timing round (the
    speedups pair rounds; the intervals resample rounds, then steps)."""
    name = scen.name
    timings, profile, kineto, errors, skipped, oom = _load_results(run_dir, name, vname)
    skipped_only = bool(skipped) and not (timings or errors)
    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    row.update(
        scenario=name,
        variant=vname,
        kind=scen.variant(vname).kind,
        bottleneck=scen.bottleneck,
        severity=severity,
        repeats=len(timings),
        profiled=False,
        error=skipped if skipped_only else (" | ".join(errors) or None),
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
    row.update(_probe_columns(timings, profile, row["step_ms_mean"]))
    row.update(_runqueue_columns(timings))
    if profile is not None:
        rep = rf.profile_file(run_dir, name, vname, rf.REPORT_SUFFIX)
        row["profiled"] = profile["_status"] == Status.OK
        row["profile_step_ms_mean"] = float(sum(profile["step_ms"]) / len(profile["step_ms"]))
        if row["step_ms_mean"] and profile["step_ms"]:
            pe, lo, hi = probe_effect_ci(profile["step_ms"], [t["step_ms"] for t in timings])
            row.update(probe_effect=pe, probe_effect_ci_low=lo, probe_effect_ci_high=hi)
        row["report"] = str(rep.relative_to(run_dir)) if rep else None
    if kineto is not None:
        row.update(_kineto_columns(run_dir, name, vname, kineto, timings))
    if skipped_only:  # status 'skipped'; the error column holds the reason alone
        row["status"] = Status.SKIPPED.value
    elif oom:
        row["status"] = Status.OOM.value
    else:
        row["status"] = _row_status(errors, bool(timings)).value
    rounds = {int(t["_round"]): list(t["step_ms"]) for t in timings if t["step_ms"]}
    return row, rounds


def _kineto_columns(
    run_dir: Path, scenario: str, variant: str, kineto: dict[str, Any], timings: list[dict]
) -> dict[str, Any]:
    """The PyTorch Profiler's run: its mean step, its probe effect (its mean step over the
    timing processes', unpaired like nsys's ``probe_effect``) with the 95% interval, and how
    many traces (one per rank) it wrote."""
    steps = list(kineto.get("step_ms") or [])
    out: dict[str, Any] = {"kineto_traces": len(rf.kineto_traces(run_dir, scenario, variant))}
    if steps:
        out["kineto_step_ms_mean"] = float(sum(steps) / len(steps))
    if steps and timings:
        pe, lo, hi = probe_effect_ci(steps, [t["step_ms"] for t in timings])
        out.update(kineto_probe_effect=pe, kineto_probe_effect_ci_low=lo,
                   kineto_probe_effect_ci_high=hi)  # fmt: skip
    return out


def _probe_columns(
    timings: list[dict[str, Any]], profile: dict[str, Any] | None, step_ms_mean: float | None
) -> dict[str, Any]:
    """The host probes of a variant's processes (:mod:`harness.execution.hostprobe`): the
    median over its timing rounds, the profiled process's, and the numbers that carry between
    hosts for a host-bound loop (:func:`_host_units`)."""
    out: dict[str, Any] = {
        "probe_launch_us": hostprobe.median_probe(timings, "launch_us"),
        "probe_python_ms": hostprobe.median_probe(timings, "python_ms"),
        "profile_probe_launch_us": None,
        "profile_probe_python_ms": None,
    }
    if profile is not None:
        out["profile_probe_launch_us"] = hostprobe.process_probe(profile, "launch_us")
        out["profile_probe_python_ms"] = hostprobe.process_probe(profile, "python_ms")
    out.update(_host_units(timings))
    return out


def _median(values: list[float | None]) -> float | None:
    found = sorted(v for v in values if v is not None)
    if not found:
        return None
    mid = len(found) // 2
    return found[mid] if len(found) % 2 else (found[mid - 1] + found[mid]) / 2


def _host_units(timings: list[dict[str, Any]]) -> dict[str, float | None]:
    """What does not move with the host's speed, each the median over the timing rounds of
    that round's own value: the mean step in launch-probe units (``step_launches``: the round's
    mean step over its own launch probe), the step loop's CPU time per step
    (``loop_cpu_ms_per_step``) and the same in launch-probe units (``loop_cpu_launches``: the
    host's own work per step), and the planned slice of a sliced round (``slice_s``: well
    above harness.timing.slice_s where one step is longer than a slice)."""
    steps, cpus, cpu_units, cuts = [], [], [], []
    for t in timings:
        probe = hostprobe.process_probe(t, "launch_us")
        step = sum(t["step_ms"]) / len(t["step_ms"]) if t.get("step_ms") else None
        cpu = schedwait.timing_columns(t)["loop_cpu_ms_per_step"]
        cpus.append(cpu)
        if probe:
            steps.append(step * 1e3 / probe if step is not None else None)
            cpu_units.append(cpu * 1e3 / probe if cpu is not None else None)
        plan = (t.get("slices") or {}).get("plan") or {}
        cuts.append(plan.get("slice_s"))
    return {
        "step_launches": _median(steps),
        "loop_cpu_ms_per_step": _median(cpus),
        "loop_cpu_launches": _median(cpu_units),
        "slice_s": _median(cuts),
    }


def _runqueue_columns(timings: list[dict[str, Any]]) -> dict[str, float | None]:
    """:data:`RUNQUEUE_COLUMNS`: the median over the timing rounds (None: no round has them)."""
    per_round = [schedwait.timing_columns(t) for t in timings]
    out: dict[str, float | None] = {}
    for col in RUNQUEUE_COLUMNS:
        values = sorted(v for v in (r[col] for r in per_round) if v is not None)
        mid = len(values) // 2
        median = (values[mid] + values[~mid]) / 2 if values else None
        out[col] = median
    return out


def _add_spread(row: dict[str, Any], rounds: Rounds, threshold: float) -> None:
    """``round_spread`` (max / min - 1 of the rounds' mean step times; blank with fewer than
    two rounds, which show no spread) and ``unstable`` (spread above ``threshold``)."""
    spread = round_spread(rounds) if len(rounds) >= 2 else None
    row["round_spread"] = spread
    row["unstable"] = spread is not None and spread > threshold


def _add_ratios(
    rows: list[dict[str, Any]],
    scen: Scenario,
    steps: dict[str, Rounds],
    bootstrap: int,
    seed: int,
) -> None:
    """Speedup vs the baseline and share of ``ideal``, each paired within the timing rounds
    both sides ran (:func:`harness.core.stats.paired_ratio_ci`), with its interval, in place.
    ``paired_rounds`` counts the speedup's rounds; 0: no round had both (a failed round each),
    and the speedup falls back to the unpaired process bootstrap."""
    base = steps.get(scen.baseline.name)
    ideal = next((v.name for v in scen.variants if v.kind == "ideal"), None)
    for row in rows:
        if row["variant"] not in steps:
            continue
        mine = steps[row["variant"]]
        if base:
            sp, lo, hi, n = _ratio(base, mine, bootstrap, seed)
            row.update(speedup=sp, speedup_ci_low=lo, speedup_ci_high=hi, paired_rounds=n)
        if ideal and ideal in steps:
            sh, lo, hi, n = _ratio(steps[ideal], mine, bootstrap, seed)
            row.update(share_of_ideal=sh, share_of_ideal_ci_low=lo, share_of_ideal_ci_high=hi,
                       share_of_ideal_rounds=n)  # fmt: skip


def _ratio(
    numerator: Rounds, denominator: Rounds, bootstrap: int, seed: int
) -> tuple[float, float, float, int]:
    """mean(numerator) / mean(denominator) paired within rounds, its CI and how many rounds
    were paired; with none paired, the unpaired hierarchical bootstrap over processes."""
    n = len(paired_rounds(numerator, denominator))
    if n:
        point, lo, hi = paired_ratio_ci(numerator, denominator, resamples=bootstrap, seed=seed)
    else:
        point, lo, hi = speedup_ci(
            list(numerator.values()), list(denominator.values()), resamples=bootstrap, seed=seed
        )
    return point, lo, hi, n


def unstable_marks(table: pd.DataFrame) -> list[str]:
    """The end-of-run table's ``unstable`` cells: the round spread (``14%``) of an unstable
    variant, blank for the others (and for a table written before the column existed)."""
    if "unstable" not in table or "round_spread" not in table:
        return [""] * len(table)
    spread = pd.to_numeric(table["round_spread"], errors="coerce")
    flagged = table["unstable"].astype(str).isin(["True", "true", "1"])
    return [f"{v:.0%}" if f and pd.notna(v) else "" for v, f in zip(spread, flagged, strict=True)]


def _row_status(errors: list[str], timed: bool) -> Status:
    """A variant's runs.csv status when it was neither skipped nor out of memory."""
    if errors:
        return Status.FAILED
    return Status.OK if timed else Status.MISSING
