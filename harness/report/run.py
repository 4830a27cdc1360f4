"""One run folder's report: the sections in order, each guarded so a failure shows as a note."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypedDict, Unpack

from harness.report.diagnosis import detectors_section, fix_effect_section, main_metrics
from harness.report.doc import Doc, Link
from harness.report.fmt import BY_REPORT, figure_context, section, written
from harness.report.hostspeed import host_speed_section
from harness.report.kernels import kernels_section
from harness.report.load import RunFolder, scenario_info
from harness.report.prediction import prediction_section
from harness.report.sections import (
    confusion_section,
    matrix_section,
    scenario_classes,
    summary_section,
    verdicts_section,
)
from harness.report.timelines import Job, Timelines
from harness.report.tools import tools_section
from harness.report.variants import (
    environment_section,
    scenario_section,
    timeline_job,
    variants_section,
)
from harness.report.write import write_doc

__all__ = ["RunReportOptions", "build_run_report", "write_run_report"]


def tolerance(run: RunFolder) -> float:
    """The run's own ``diagnosis.predict.tolerance_share`` (manifest.json), else the default."""
    cfg = ((run.manifest or {}).get("config") or {}).get("diagnosis") or {}
    try:
        return float(cfg["predict"]["tolerance_share"])
    except (KeyError, TypeError, ValueError):
        from analysis.detect import load_thresholds

        return load_thresholds().predict.tolerance_share


def _timeline_jobs(run: RunFolder, scen: list[str], steps: int) -> list[Job]:
    """The timelines the scenario sections will draw (a scenario whose pair cannot be found is
    left to its section, which says why)."""
    jobs = []
    for s in scen:
        try:
            job, _ = timeline_job(run, s, steps)
        except Exception:
            continue
        if job is not None:
            jobs.append(job)
    return jobs


def build_run_report(
    run: RunFolder,
    out_dir: Path,
    *,
    steps: int = 2,
    timelines: bool = True,
    found: dict[str, Any] | None = None,
    main_metric: Mapping[str, str] | None = None,
    writer: str = BY_REPORT,
    workers: int | None = None,
) -> Doc:
    """The report of one run folder as a :class:`Doc` (render with ``write_doc``).

    ``main_metric`` maps each bottleneck class to the findings.csv metric its fixes are judged
    by (default: the run's own ``diagnosis.main_metric`` from manifest.json, else the config's).
    ``writer``: the command the subtitle names as the report's author. ``workers``: processes
    that draw the timelines meanwhile (default one per CPU, at most one per timeline; 1: each
    is drawn in its section, in this process).
    """
    figure_context()
    jobs = _timeline_jobs(run, run.scenarios(), steps) if timelines else []
    # The timelines take most of the report's time: workers draw them from here on, while this
    # process reads the scenarios and builds the other sections.
    with Timelines(jobs, workers) as pictures:
        return _build(
            run,
            out_dir,
            pictures,
            steps=steps,
            timelines=timelines,
            found=found,
            main_metric=main_metric,
            writer=writer,
        )


def _build(
    run: RunFolder,
    out_dir: Path,
    pictures: Timelines,
    *,
    steps: int,
    timelines: bool,
    found: dict[str, Any] | None,
    main_metric: Mapping[str, str] | None,
    writer: str,
) -> Doc:
    """:func:`build_run_report`'s document, its timelines taken from ``pictures``."""
    if found is None:
        found, _ = scenario_info()
    name = run.path.name
    doc = Doc(f"bottleneck-suite report: {name}")
    doc.h(1, f"bottleneck-suite report: {name}", "top")
    doc.p(
        f"{run.gpu_name} · size {run.size} · state {run.state_name} · {written(writer)}",
        cls="sub",
    )
    scen = run.scenarios()
    classes = scenario_classes(run, found)
    sections: list[tuple[str, str, Any]] = [
        ("Summary", "summary", lambda: summary_section(doc, run, found, out_dir)),
        ("Speedup matrix", "matrix", lambda: matrix_section(doc, run, found)),
        ("Verdicts", "verdicts", lambda: verdicts_section(doc, run, found)),
        ("Detector findings", "detectors", lambda: detectors_section(doc, run)),
        ("What each fix removed", "fix-effect",
         lambda: fix_effect_section(doc, run, classes, main_metrics(run, main_metric))),
        ("Confusion matrix", "confusion", lambda: confusion_section(doc, run)),
        ("Predicted against measured", "predictions",
         lambda: prediction_section(doc, run, tolerance(run))),
        ("Tools against the ground truth", "tools", lambda: tools_section(doc, run)),
        ("Kernels (Nsight Compute)", "kernels", lambda: kernels_section(doc, run)),
        ("Variants: timings, probe effect, profiles", "variants",
         lambda: variants_section(doc, run, out_dir)),
        ("Host speed", "host-speed", lambda: host_speed_section(doc, run, out_dir)),
    ]  # fmt: skip
    nav: list[Any] = []
    short = {"detectors": "Detectors", "fix-effect": "Fix effect", "confusion": "Confusion",
             "predictions": "Predictions", "tools": "Tools", "kernels": "Kernels",
             "variants": "Variants"}  # fmt: skip
    for title, anchor, _ in sections:
        nav += [Link(short.get(anchor, title), f"#{anchor}"), " · "]
    for s in scen:
        nav += [Link(s, f"#scenario-{s}"), " · "]
    nav += [Link("Environment", "#environment")]
    doc.p(*nav, cls="nav")
    for title, anchor, build in sections:
        doc.h(2, title, anchor)
        section(doc, anchor, build)
        pictures.poll()  # an idle worker gets the next timeline
    if not scen:
        doc.h(2, "Scenarios", "scenarios")
        doc.note(run.why_missing("runs.csv"))
    for s in scen:
        doc.h(2, f"{s}: {found[s].title if s in found else s}", f"scenario-{s}")
        section(
            doc,
            s,
            lambda s=s: scenario_section(doc, run, s, found, out_dir, steps, timelines, pictures),
        )
    doc.h(2, "Environment", "environment")
    section(doc, "environment", lambda: environment_section(doc, run, out_dir))
    return doc


class RunReportOptions(TypedDict, total=False):
    """:func:`build_run_report`'s keyword arguments, which :func:`write_run_report` passes on."""

    steps: int
    timelines: bool
    found: dict[str, Any] | None
    main_metric: Mapping[str, str] | None
    writer: str
    workers: int | None


def write_run_report(
    run_dir: Path, out_dir: Path | None = None, **options: Unpack[RunReportOptions]
) -> tuple[Path, Path]:
    """Write ``report.html``, ``report.md`` and ``report/*.png`` for one run folder (into
    ``out_dir``, default the run folder); ``options`` as :func:`build_run_report`'s."""
    run = RunFolder.load(Path(run_dir))
    out = Path(out_dir) if out_dir is not None else run.path
    return write_doc(build_run_report(run, out, **options), out)
