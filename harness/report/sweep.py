"""The report over several run folders: a table of the runs and, for every scenario run at two or
more severities on one GPU and size, its dose-response (the fixes' speedups and the scenario's
detector metric against severity, and where the detector starts to fire).

The metric comes from each run's ``findings.csv`` and whether the detector fired from its
``diagnosis.csv`` (``<class>_state``); the exports are never reopened.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypedDict, Unpack

import pandas as pd

from analysis.findings import State
from harness.core.runfolder import Status
from harness.report.diagnosis import MAIN_METRIC, main_metrics
from harness.report.doc import Badge, Doc, Link, Tip
from harness.report.fmt import (
    BY_REPORT,
    figure_context,
    g3,
    metric_value,
    num,
    rel,
    section,
    speedup_ci,
    written,
)
from harness.report.load import RunFolder, class_state, scenario_info, warn
from harness.report.write import write_doc

__all__ = ["SweepReportOptions", "build_sweep_report", "dose_data", "write_sweep_report"]

_SPEED_COLS = ["severity", "run", "variant", "kind", "speedup", "ci_low", "ci_high", "status", "step_ms_mean"]  # fmt: skip
_DETECT_COLS = ["severity", "run", "variant", "kind", "value", "fired", "reason", "source"]


def _thresholds() -> dict[str, Any]:
    try:
        from analysis.detect import load_thresholds
        from analysis.detect.config import diagnosis_dict

        return diagnosis_dict(load_thresholds())
    except Exception as exc:
        warn(f"detector thresholds unavailable: {exc}")
        return {}


def _detector_point(
    run: RunFolder, scen: str, variant: str, klass: str, metric: str
) -> dict[str, Any]:
    """The main metric of ``klass`` on one variant (findings.csv) and its state (diagnosis.csv)."""
    row = run.diag_row(scen, variant)
    state = class_state(row, klass)
    value = run.metric(scen, variant, klass, metric) if metric else math.nan
    return {
        "value": value,
        "fired": pd.NA if state in (None, State.NOT_JUDGED) else state is State.FIRED,
        "reason": str((row or {}).get(f"{klass}_reason", "") or ""),
        "source": "findings.csv" if math.isfinite(value) else "",
    }


def _by_severity(runs: list[RunFolder], scen: str, notes: list[str]) -> dict[float, RunFolder]:
    by_sev: dict[float, RunFolder] = {}
    for run in sorted(runs, key=lambda r: r.created):
        rows = run.runs[run.runs["scenario"] == scen]
        sev = num(rows["severity"].iloc[0]) if "severity" in rows and not rows.empty else math.nan
        if not math.isfinite(sev):
            notes.append(f"{run.path.name}: no severity in runs.csv; left out")
            continue
        if sev in by_sev:
            notes.append(
                f"severity {sev:g} was run twice ({by_sev[sev].path.name}, {run.path.name}); "
                "the later run is shown"
            )
        by_sev[sev] = run
    return by_sev


def dose_data(
    runs: list[RunFolder], scen: str, klass: str, metric: str | None = None
) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """(speed, detect, notes) for one scenario over runs at different severities (one GPU/size)."""
    metric = MAIN_METRIC.get(klass, "") if metric is None else metric
    notes: list[str] = []
    speed, detect = [], []
    for sev, run in sorted(_by_severity(runs, scen, notes).items()):
        for r in run.runs[run.runs["scenario"] == scen].to_dict("records"):
            v, kind = str(r["variant"]), str(r.get("kind", "fix"))
            status = str(r.get("status", ""))
            speed.append({
                "severity": sev, "run": run.path.name, "variant": v, "kind": kind,
                "speedup": num(r.get("speedup")) if kind != "baseline" else 1.0,
                "ci_low": num(r.get("speedup_ci_low")), "ci_high": num(r.get("speedup_ci_high")),
                "status": status, "step_ms_mean": num(r.get("step_ms_mean")),
            })  # fmt: skip
            if status == Status.OK:
                p = _detector_point(run, scen, v, klass, metric)
                detect.append(
                    {"severity": sev, "run": run.path.name, "variant": v, "kind": kind, **p}
                )
    return (
        pd.DataFrame(speed, columns=_SPEED_COLS),
        pd.DataFrame(detect, columns=_DETECT_COLS),
        notes,
    )


def _group_runs(runs: list[RunFolder]) -> dict[tuple[str, str, str], list[RunFolder]]:
    groups: dict[tuple[str, str, str], list[RunFolder]] = {}
    for run in runs:
        if run.runs is None or run.runs.empty:
            continue
        for scen in dict.fromkeys(run.runs["scenario"]):
            groups.setdefault((scen, run.slug, run.size), []).append(run)
    return groups


def _no_metric_why(group: list[RunFolder], det: pd.DataFrame, klass: str) -> str:
    missing = [r for r in group if r.tables.get("findings.csv") is None]
    if missing:
        return missing[0].why_missing("findings.csv")
    unjudged = det[det["fired"].isna()] if not det.empty else det
    if not unjudged.empty:
        reason = next((x for x in unjudged["reason"] if x), "")
        return f"the {klass} detector could not judge these exports" + (
            f": {reason}" if reason else ""
        )
    return "findings.csv holds no value of this metric for these runs"


def _dose_summary(det: pd.DataFrame, klass: str, unit: str, why: str) -> str:
    from analysis.plots.dose import firing_onset

    base = det[det["kind"] == "baseline"] if not det.empty else det
    onset = firing_onset(base["severity"], base["fired"]) if not base.empty else None
    if onset is not None:
        return f"The {klass} detector fires on the baseline from severity {onset:g} {unit} on."
    if not base.empty and base["fired"].notna().any():
        return (
            f"The {klass} detector does not fire on the baseline at every severity from some "
            "point on (see the table)."
        )
    return f"The {klass} detector could not judge these exports ({why})."


def _fired_cell(d: dict[str, Any], kind: str) -> Any:
    fired = d.get("fired", pd.NA)
    if d and pd.isna(fired):
        return Tip("not judged", str(d.get("reason", "")))
    if pd.isna(fired):
        return "–"
    return Badge("fired", "fired-good" if kind == "baseline" else "fired-bad") if fired else "clear"


def _dose_table(doc: Doc, speed: pd.DataFrame, det: pd.DataFrame, metric: str) -> None:
    dmap = (
        {(d["severity"], d["variant"]): d for d in det.to_dict("records")} if not det.empty else {}
    )
    rows = []
    for r in speed.to_dict("records"):
        d = dmap.get((r["severity"], r["variant"]), {})
        val = d.get("value", math.nan)
        shown = metric_value(val, metric)
        sp = "1 (reference)" if r["kind"] == "baseline" else speedup_ci(
            r["speedup"], r["ci_low"], r["ci_high"])  # fmt: skip
        rows.append([f"{r['severity']:g}", r["run"], r["variant"], Badge(r["status"], r["status"]),
                     g3(r["step_ms_mean"]), sp, shown, _fired_cell(d, r["kind"])])  # fmt: skip
    header = ["severity", "run", "variant", "status", "mean step ms", "speedup [95% CI]"]
    doc.table([*header, metric or "metric", "fired"], rows, numeric={0, 4, 5, 6})


def _dose_section(
    doc: Doc,
    key: tuple[str, str, str],
    group: list[RunFolder],
    found: dict[str, Any],
    main_metric: Mapping[str, str] | None,
) -> None:
    from analysis.plots.dose import plot_dose

    scen, slug, size = key
    sc = found.get(scen)
    first = group[0].runs
    klass = (
        sc.bottleneck
        if sc is not None
        else str(first.loc[first["scenario"] == scen, "bottleneck"].iloc[0])
    )
    metric = main_metrics(group[-1], main_metric).get(klass, "")
    sevs = sorted(
        {num(r.runs.loc[r.runs["scenario"] == scen, "severity"].iloc[0]) for r in group}
        - {math.nan}
    )
    doc.h(3, f"{scen} on {slug} ({size}): {len(sevs)} severit{'y' if len(sevs) == 1 else 'ies'}")
    if len(sevs) < 2:
        doc.note(
            f"{scen} was run at one severity only ({', '.join(f'{s:g}' for s in sevs) or 'unknown'}) "
            f"on {slug} at size {size}: no dose-response. Sweep it with `python -m harness run -m "
            f"+scenario={scen} scenario.{scen}.severity=A,B,C`."
        )
        return
    speed, det, notes = dose_data(group, scen, klass, metric)
    threshold = _thresholds().get(klass, {}).get(f"min_{metric}") if metric else None
    why = _no_metric_why(group, det, klass)
    unit = sc.severity.unit if sc is not None else ""
    fig = plot_dose(
        speed, det, scenario=scen, unit=unit, meaning=sc.severity.meaning if sc is not None else "",
        klass=klass, metric=metric, threshold=threshold, note="\n".join(textwrap.wrap(why, 90)),
        title=f"{scen} on {slug} ({size}): speedup and the {klass} detector against severity",
    )  # fmt: skip
    doc.image(
        f"dose_{scen}_{slug}_{size}",
        fig,
        f"{scen} dose-response on {slug}",
        f"{_dose_summary(det, klass, unit, why)} Top: speedup of each fix (and ideal) over the "
        f"baseline of the same run, 95% CI. Bottom: the detector's {metric or 'metric'} on every "
        "variant's export (findings.csv; filled: the detector fired, per diagnosis.csv); dashed: "
        "its threshold; shaded: severities from which it fires on the baseline.",
    )
    for n in notes:
        doc.note(n, kind="caveat")
    if det.empty or det["value"].isna().all():
        doc.note(f"no {metric or 'detector metric'}: {why}")
    _dose_table(doc, speed, det, metric)


def _runs_table(doc: Doc, runs: list[RunFolder], out_dir: Path) -> None:
    rows = []
    for run in sorted(runs, key=lambda r: r.created):
        target = run.path / "report.html"
        link = Link(run.path.name, rel(target if target.is_file() else run.path, out_dir))
        scen: list[str] = []
        if run.runs is not None and not run.runs.empty:
            for s, g in run.runs.groupby("scenario", sort=False):
                sev = num(g["severity"].iloc[0]) if "severity" in g else math.nan
                scen.append(f"{s}" + (f" @ {sev:g}" if math.isfinite(sev) else ""))
        ver = run.tables.get("verdicts.csv")
        vparts: list[Any] = ["–"]
        if ver is not None and not ver.empty and "verdict" in ver:
            vparts = [Badge(f"{r.scenario}: {r.verdict}", str(r.verdict)) for r in ver.itertuples()]
        state = Badge(run.state_name, "ok" if run.complete else "inconclusive")
        rows.append(
            [
                link,
                run.gpu_name,
                run.size,
                state,
                run.created or "–",
                "; ".join(scen) or "–",
                vparts,
            ]
        )
    header = ["run (its report)", "GPU", "size", "state", "created (UTC)", "scenarios @ severity"]
    doc.table([*header, "verdicts"], rows)


def build_sweep_report(
    runs: list[RunFolder],
    out_dir: Path,
    *,
    title: str = "",
    main_metric: Mapping[str, str] | None = None,
    writer: str = BY_REPORT,
) -> Doc:
    """The report over several run folders: the runs, and dose-response where severities differ
    (``writer``: the command named in the subtitle)."""
    figure_context()
    found, _ = scenario_info()
    name = title or out_dir.name
    doc = Doc(f"bottleneck-suite sweep report: {name}")
    doc.h(1, f"bottleneck-suite sweep report: {name}", "top")
    doc.p(
        f"{len(runs)} run folders · {written(writer)}",
        cls="sub",
    )
    doc.h(2, "Runs", "runs")
    section(doc, "runs", lambda: _runs_table(doc, runs, out_dir))
    doc.h(2, "Dose-response", "dose")
    doc.p(
        "For each scenario run at several severities on one GPU and size: the fixes' speedups and "
        "the scenario's detector against the severity, and where the detector starts to fire.",
        cls="sub",
    )
    groups = _group_runs(runs)
    if not groups:
        doc.note("none of these folders holds a runs.csv, so there is nothing to plot")
    for key, group in groups.items():
        section(doc, f"{key[0]} dose-response",
                lambda key=key, group=group: _dose_section(doc, key, group, found, main_metric))  # fmt: skip
    return doc


class SweepReportOptions(TypedDict, total=False):
    """:func:`build_sweep_report`'s keyword arguments, which :func:`write_sweep_report` passes on."""

    title: str
    main_metric: Mapping[str, str] | None
    writer: str


def write_sweep_report(
    run_dirs: list[Path], out_dir: Path, **options: Unpack[SweepReportOptions]
) -> tuple[Path, Path]:
    """Write the sweep's report.html, report.md and report/*.png into ``out_dir``."""
    runs = [RunFolder.load(p) for p in run_dirs]
    return write_doc(build_sweep_report(runs, Path(out_dir), **options), Path(out_dir))
