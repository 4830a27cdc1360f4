"""The run report's per-variant and per-scenario sections: timings and probe effect, each
scenario's teaching text and timeline (baseline above its fastest fix), and the environment."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from harness.core import runfolder as rf
from harness.report.doc import Badge, Code, Doc, Link, Tip
from harness.report.fmt import (
    DASH,
    VERDICT_KINDS,
    clip,
    g3,
    num,
    ratio_ci,
    rel,
    section,
    share_ci,
    speedup_of,
)
from harness.report.load import TABLES, RunFolder
from harness.report.timelines import Job, Timelines, draw

__all__ = ["environment_section", "scenario_section", "timeline_job", "variants_section"]


def _probe_cell(r: dict[str, Any]) -> Any:
    pe = num(r.get("probe_effect"))
    text = ratio_ci(pe, r.get("probe_effect_ci_low"), r.get("probe_effect_ci_high"))
    if math.isfinite(pe) and abs(pe - 1) > 0.1:
        return Tip(f"{text} ⚠", "nsys changed this variant's mean step time by more than 10%")
    return text


def _variant_row(run: RunFolder, r: dict[str, Any], out_dir: Path) -> list[Any]:
    st = str(r.get("status", ""))
    p10, p90 = num(r.get("step_ms_p10")), num(r.get("step_ms_p90"))
    spread = f"{g3(p10)}-{g3(p90)}" if math.isfinite(p10) and math.isfinite(p90) else DASH
    err = r.get("error")
    err_cell: Any = "–"
    if isinstance(err, str) and err:
        err_cell = Tip(clip(err), err)
    return [
        Link(str(r["scenario"]), f"#scenario-{r['scenario']}"), r["variant"], r.get("kind"),
        Badge(st, st), g3(r.get("step_ms_mean")), g3(r.get("step_ms_median")), spread,
        g3(r.get("throughput_samples_per_s")), speedup_of(r),
        share_ci(r.get("share_of_ideal"), r.get("share_of_ideal_ci_low"), r.get("share_of_ideal_ci_high")),
        _probe_cell(r), profile_links(run, r, out_dir), err_cell,
    ]  # fmt: skip


def variants_section(doc: Doc, run: RunFolder, out_dir: Path) -> None:
    """Every variant's timings, speedup, probe effect and profile links; the probe figure."""
    from analysis.plots.probe import probe_effect_figure

    runs = run.runs
    if runs is None or runs.empty:
        doc.note(run.why_missing("runs.csv"))
        return
    rows = [_variant_row(run, r, out_dir) for r in runs.to_dict("records")]
    doc.table(
        [
            "scenario", "variant", "kind", "status", "mean step ms", "median step ms",
            "p10-p90 step ms", "samples/s", "speedup [95% CI]", "share of ideal [95% CI]",
            "probe effect [95% CI]", "profile (nsys GUI)", "error",
        ],
        rows,
        numeric={4, 5, 6, 7, 8, 9, 10},
    )  # fmt: skip
    doc.p(
        "Step times over every timed step of every round. speedup: the baseline's mean step "
        "time over the variant's, paired within timing rounds (a ratio of means, so it is not "
        "the ratio of the medians beside it); share of ideal: ideal's mean step time over the "
        "variant's.",
        cls="sub",
    )
    doc.p(
        "Probe effect: the profiled run's mean step time over the unprofiled mean (with its 95% "
        "CI where the run recorded one); above 1 nsys slowed the variant down, and far from 1 "
        "(⚠, more than 10%) its timeline is a distorted picture of the unprofiled run. Open a "
        ".nsys-rep with nsys-ui (File > Open).",
        cls="sub",
    )
    pe = pd.to_numeric(runs["probe_effect"], errors="coerce") if "probe_effect" in runs else None
    if pe is None or pe.notna().sum() == 0:
        doc.note(
            "no probe effect: no variant was both profiled and timed (nsys.enabled=false, no nsys "
            "found, or the profiles failed)"
        )
        return
    doc.image(
        "probe_effect",
        probe_effect_figure(runs.assign(probe_effect=pe)),
        "probe effect per variant",
        "Profiled mean step time / unprofiled mean step time per variant; the band marks ±10%.",
        width_px=900,
    )


def profile_links(run: RunFolder, r: dict[str, Any], out_dir: Path) -> list[Any]:
    """Relative links to a variant's .nsys-rep and .sqlite (or why the report is not here)."""
    s, v = str(r["scenario"]), str(r["variant"])
    rep = run.profile_file(s, v, rf.REPORT_SUFFIX)
    named = r.get("report")
    if rep is None and isinstance(named, str) and named and (run.path / named).is_file():
        rep = run.path / named
    parts: list[Any] = []
    if rep is not None:
        parts.append(Link(".nsys-rep", rel(rep, out_dir)))
    elif isinstance(named, str) and named:
        parts.append(Tip("not here", f"runs.csv names {named}, which is not in this folder"))
    db = run.profile_file(s, v, rf.SQLITE_SUFFIX)
    if db is not None:
        parts += [" · ", Link(".sqlite", rel(db, out_dir))]
    return parts or ["–"]


def _scenario_rows(run: RunFolder, scen: str) -> pd.DataFrame:
    runs = run.runs
    return runs[runs["scenario"] == scen] if runs is not None else pd.DataFrame()


def best_pair(run: RunFolder, scen: str) -> tuple[Path | None, Path | None, str, str]:
    """(baseline export, best fix's export, fix name, why something is missing)."""
    rows = _scenario_rows(run, scen)
    base_name = "baseline"
    if not rows.empty and "kind" in rows and (rows["kind"] == "baseline").any():
        base_name = str(rows.loc[rows["kind"] == "baseline", "variant"].iloc[0])
    base = run.profile_file(scen, base_name, rf.SQLITE_SUFFIX)
    cands = []
    for r in rows.to_dict("records"):
        if str(r.get("kind")) == "baseline" or str(r.get("status", rf.Status.OK)) != rf.Status.OK:
            continue
        db = run.profile_file(scen, str(r["variant"]), rf.SQLITE_SUFFIX)
        if db is not None:
            sp = num(r.get("speedup"))
            cands.append(
                (
                    str(r.get("kind")) != "fix",
                    -(sp if math.isfinite(sp) else 0.0),
                    str(r["variant"]),
                    db,
                )
            )
    cands.sort()
    fix_db, fix_name = (cands[0][3], cands[0][2]) if cands else (None, "")
    why = ""
    if base is None and not run.has_exports():
        why = (
            "no SQLite exports in this folder (a folder of tables only, e.g. a reference "
            "result; or the run was not profiled), so there is no timeline to draw"
        )
    elif base is None:
        why = f"the baseline of {scen} has no SQLite export (its profile failed or was not run)"
    elif fix_db is None:
        why = f"no fix or ideal of {scen} has a SQLite export: the baseline is shown alone"
    return base, fix_db, fix_name, why


def _scenario_header(run: RunFolder, scen: str, sc: Any) -> list[Any]:
    rows = _scenario_rows(run, scen)
    sev = num(rows["severity"].iloc[0]) if not rows.empty and "severity" in rows else math.nan
    parts: list[Any] = []
    if sc is not None:
        parts += [Code(sc.bottleneck), " · "]
        if math.isfinite(sev):
            parts += [f"severity {sev:g} {sc.severity.unit} ({sc.severity.meaning})"]
    elif math.isfinite(sev):
        parts += [f"severity {sev:g}"]
    ver = run.tables.get("verdicts.csv")
    if ver is not None and "scenario" in ver and (ver["scenario"] == scen).any():
        v = ver[ver["scenario"] == scen].iloc[0]
        verdict = str(v["verdict"])
        parts += [
            " · verdict ",
            Badge(verdict, VERDICT_KINDS.get(verdict, "")),
            f" — {v.get('reason', '')}",
        ]
    else:
        parts += [" · ", Badge("no verdict", "missing")]
    return parts


def scenario_section(
    doc: Doc,
    run: RunFolder,
    scen: str,
    found: dict[str, Any],
    out_dir: Path,
    steps: int,
    timelines: bool,
    pictures: Timelines | None = None,
) -> None:
    """A scenario's class, severity, verdict, teaching text, timeline and profile links
    (``pictures``: the timelines drawn ahead, else it is drawn here)."""
    sc = found.get(scen)
    doc.p(*_scenario_header(run, scen, sc))
    if sc is not None:
        t = sc.teaching
        items: list[tuple[str, list[Any]]] = [
            ("What the timeline shows", [t.symptom]),
            ("Why", [t.cause]),
            ("What fixes it", [t.fix]),
        ]
        if getattr(sc, "expected_diagnosis", ""):
            items.append(("Expected diagnosis", [sc.expected_diagnosis]))
        if sc.severity.why_default:
            items.append(("Why the default severity", [sc.severity.why_default]))
        doc.deflist(items)
    else:
        doc.note(
            f"no teaching text: scenario {scen!r} is not among the scenarios this checkout knows"
        )
    if not timelines:
        doc.note("timelines left out (--no-timelines)", kind="caveat")
    else:
        section(
            doc, f"{scen} timeline", lambda: _timeline(doc, run, scen, steps, out_dir, pictures)
        )
    rows = _scenario_rows(run, scen)
    if not rows.empty:
        links: list[Any] = ["Profiles for the nsys GUI (nsys-ui FILE): "]
        for i, r in enumerate(rows.to_dict("records")):
            links += [" | " if i else "", f"{r['variant']}: ", *profile_links(run, r, out_dir)]
        doc.p(*links, cls="sub")


def _kept_timeline(doc: Doc, run: RunFolder, scen: str, out_dir: Path) -> bool:
    """In a folder of tables only (a reference result: its exports are not kept), the timeline
    an earlier report drew while the exports were there; True when it was shown."""
    name = f"timeline_{scen}"
    png = out_dir / doc.image_dir / f"{name}.png"
    if run.has_exports() or out_dir.resolve() != run.path.resolve() or not png.is_file():
        return False
    doc.image(
        name,
        png.read_bytes(),
        f"{scen} timeline (drawn while this folder held its exports)",
        "The timeline an earlier report of this run drew from its SQLite exports; the exports "
        "are not kept in this folder, so it is shown as it was drawn.",
    )
    return True


def timeline_job(run: RunFolder, scen: str, steps: int) -> tuple[Job | None, str]:
    """What ``scen``'s timeline draws, or None and why there is none."""
    base, fix, fix_name, why = best_pair(run, scen)
    if base is None:
        return None, why
    rows = _scenario_rows(run, scen)
    sel = rows[rows["variant"] == fix_name] if fix is not None else rows.iloc[0:0]
    speedup = speedup_of(sel.iloc[0].to_dict()) if not sel.empty else ""
    # paths as given: workers share our cwd
    return Job(scen, base, fix, fix_name, why, steps, speedup), why


def _timeline(
    doc: Doc, run: RunFolder, scen: str, steps: int, out_dir: Path, pictures: Timelines | None
) -> None:
    job, why = timeline_job(run, scen, steps)
    if job is None:
        if not _kept_timeline(doc, run, scen, out_dir):
            doc.note(f"no timeline: {why}")
        return
    pic = pictures.picture(job) if pictures is not None else draw(job)
    doc.image(pic.name, pic.png, pic.alt, pic.caption)


_ENV_SHOWN = {
    "gpu", "nsys", "torch", "python", "host", "platform", "git_sha", "created_utc", "run_dir",
    "config", "worker_env", "scenarios",
}  # fmt: skip


def _environment_items(run: RunFolder, m: dict[str, Any]) -> list[tuple[str, list[Any]]]:
    gpu = run.gpu
    nsys = m.get("nsys") or {}
    mem = ", ".join(f"{v} MiB" for v in gpu.get("memory_mib") or []) or "–"
    items: list[tuple[str, list[Any]]] = [
        ("GPU", [run.gpu_name]),
        ("GPU count / memory", [f"{gpu.get('count', '–')} / {mem}"]),
        ("Driver", [str(gpu.get("driver") or "–")]),
        ("nsys", [str(nsys.get("version") or "not found"), " ", Code(str(nsys.get("path") or ""))]),
        ("torch", [str(m.get("torch", "–"))]),
        ("Python", [str(m.get("python", "–"))]),
        ("Host / platform", [f"{m.get('host', '–')} / {m.get('platform', '–')}"]),
        ("git", [Code(str(m.get("git_sha", "–")))]),
        ("Created (UTC)", [str(m.get("created_utc", "–"))]),
        ("Run folder when made", [Code(str(m.get("run_dir", "–")))]),
    ]
    for key in sorted(k for k in m if k not in _ENV_SHOWN):
        val = m[key]
        items.append((key, [json.dumps(val) if isinstance(val, dict | list) else str(val)]))
    we = m.get("worker_env") or {}
    if we:
        items.append(("Worker environment", [", ".join(f"{k}={v}" for k, v in we.items())]))
    return items


def environment_section(doc: Doc, run: RunFolder, out_dir: Path) -> None:
    """The manifest (GPU, driver, nsys, torch, ...), the composed config, links to the tables."""
    m = run.manifest
    if m is None:
        doc.note(run.why_missing(rf.MANIFEST))
    else:
        doc.deflist(_environment_items(run, m))
        if m.get("config") is not None:
            import yaml

            doc.details(
                "Full composed configuration (manifest.json: config)",
                yaml.safe_dump(m["config"], sort_keys=False),
            )
    files: list[Any] = ["Files: "]
    first = [rf.MANIFEST, rf.STATE, *TABLES]
    here = sorted(p.name for p in run.path.glob("*") if p.suffix in (".json", ".csv", ".parquet"))
    for name in [n for n in first if n in here] + [n for n in here if n not in first]:
        files += [Link(name, rel(run.path / name, out_dir)), "  "]
    doc.p(*files, cls="sub")
