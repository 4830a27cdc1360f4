"""The run report's "Host speed" section: the host probes of every worker, per variant and over
run time, and the variants whose timing rounds spread (``unstable``) with their probes beside.

Why: a host's speed can change between runs and within one, and a host-bound variant's step
time moves with it while a GPU-bound one's does not (docs/reports.md, "Host speed", has the
measurement). Every timing and profiled worker probes the host right before and right after
its window (timings.csv's ``probe_launch_us_before`` ...
``probe_python_ms_after``); this section lays them out so a reader can tell a host that
drifted from a variant that changed. The values are read from the tables, never recomputed.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from harness.core import runfolder as rf
from harness.report.doc import Badge, Doc, Link
from harness.report.fmt import g3, share
from harness.report.load import RunFolder, truthy

__all__ = ["host_speed_section", "probe_points", "read_timings", "variant_probes"]

#: The probes' keys (result.json's ``host_probe.before`` / ``.after``) and their units.
KEYS = {"launch_us": "µs", "python_ms": "ms"}
WHEN = ("before", "after")


def read_timings(run: RunFolder) -> pd.DataFrame | None:
    """The run's timings.csv, or None where it is absent or unreadable."""
    return run.read("timings", text=("scenario", "variant", "phase"))


def _has_probes(timings: pd.DataFrame | None) -> bool:
    cols = [f"probe_{k}_{w}" for k in KEYS for w in WHEN]
    return timings is not None and set(cols) <= set(timings) and timings[cols].notna().any().any()


def probe_points(timings: pd.DataFrame) -> pd.DataFrame:
    """One row per probe: scenario, variant, phase, kind (timing, profile or kineto), when, ``t_s`` (from
    the first worker's launch: the before-probe at the window's start, the after-probe at its
    end; the launch where the worker did not say), ``launch_us``, ``python_ms``."""
    t = timings.copy()

    def col(name: str) -> pd.Series:
        if name not in t:
            return pd.Series(math.nan, index=t.index)
        return pd.to_numeric(t[name], errors="coerce")

    launched, end, window = col("launched_at"), col("window_ended_at"), col("window_s")
    at = {"before": (end - window).fillna(launched), "after": end.fillna(launched)}
    origin = float(launched.min()) if launched.notna().any() else 0.0
    parts = []
    for when in WHEN:
        part = t[["scenario", "variant", "phase"]].assign(
            kind=t["phase"].map(rf.phase_kind),
            when=when,
            t_s=at[when] - origin,
            **{k: pd.to_numeric(t[f"probe_{k}_{when}"], errors="coerce") for k in KEYS},
        )
        parts.append(part)
    out = pd.concat(parts, ignore_index=True)
    return out.dropna(subset=list(KEYS), how="all").sort_values("t_s", kind="stable")


def variant_probes(timings: pd.DataFrame) -> pd.DataFrame:
    """Per variant, in the order it first ran: each timing process's probes (the mean of
    before and after) in run order, and the profiled process's (NaN where none)."""
    pts = probe_points(timings)
    per_proc = pts.groupby(["scenario", "variant", "phase", "kind"], sort=False)[list(KEYS)].mean()
    per_proc = per_proc.reset_index()
    rows = []
    for (scen, var), g in per_proc.groupby(["scenario", "variant"], sort=False):
        timed = g[g["kind"] == "timing"]
        prof = g[g["kind"] == "profile"]
        row: dict[str, Any] = {"scenario": scen, "variant": var}
        for k in KEYS:
            row[f"timing_{k}"] = [float(v) for v in timed[k] if pd.notna(v)]
            row[f"profile_{k}"] = float(prof[k].iloc[0]) if len(prof) else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def _series(values: list[float]) -> str:
    return " · ".join(g3(v) for v in values) if values else "–"


def _runs_row(run: RunFolder, scen: str, var: str) -> dict[str, Any]:
    runs = run.runs
    if runs is None or runs.empty:
        return {}
    sel = runs[(runs["scenario"] == scen) & (runs["variant"] == var)]
    return sel.iloc[0].to_dict() if not sel.empty else {}


def _spread_cells(r: dict[str, Any]) -> list[Any]:
    return [
        share(r.get("round_spread")),
        Badge("unstable", "inconclusive") if truthy(r.get("unstable")) else "",
    ]


def host_speed_section(doc: Doc, run: RunFolder, out_dir: Path) -> None:
    """Per variant its processes' probes and round spread; the run-wide range; the unstable
    variants named; the probes over run time."""
    timings = read_timings(run)
    if not _has_probes(timings):
        doc.note(
            "no host probes: this run's timings.csv has no probe_* columns (a run made before "
            "the workers probed the host, or with harness.host_probe.enabled=false)"
        )
        return
    assert timings is not None
    per = variant_probes(timings)
    rows = []
    for p in per.to_dict("records"):
        r = _runs_row(run, p["scenario"], p["variant"])
        rows.append(
            [Link(p["scenario"], f"#scenario-{p['scenario']}"), p["variant"],
             _series(p["timing_launch_us"]), _series(p["timing_python_ms"]),
             g3(p["profile_launch_us"]), g3(p["profile_python_ms"]),
             *_spread_cells(r)]
        )  # fmt: skip
    doc.table(
        ["scenario", "variant", "launch µs per timing round (mean of before and after)",
         "Python loop ms per round (mean)", "launch µs, profiled (mean)",
         "Python loop ms, profiled (mean)", "round spread (max / min - 1)", ""],
        rows,
        numeric={4, 5, 6},
    )  # fmt: skip
    _run_range(doc, probe_points(timings))
    _unstable(doc, run, per)
    _figure(doc, probe_points(timings))


def _run_range(doc: Doc, pts: pd.DataFrame) -> None:
    """One sentence: how far each probe moved over the whole run."""
    parts = []
    for k, unit in KEYS.items():
        v = pts[k].dropna()
        if v.empty:
            continue
        name = "launch probe" if k == "launch_us" else "Python loop"
        parts.append(
            f"the {name} read {g3(v.min())}–{g3(v.max())} {unit} (median {g3(v.median())}, "
            f"max / min {v.max() / v.min():.2f})"
        )
    doc.p(
        f"Over the run's {len(pts)} probes, " + "; ".join(parts) + ". Each value is one "
        "worker's probe right before or right after its window (each cell above: the mean of "
        "the two); a host-bound variant's step time moves with them, a device-bound one "
        "does not.",
        cls="sub",
    )


def _unstable(doc: Doc, run: RunFolder, per: pd.DataFrame) -> None:
    """The unstable variants by name, with their round spread and their rounds' probes."""
    runs = run.runs
    if runs is None or runs.empty or "unstable" not in runs:
        return
    flagged = runs[runs["unstable"].map(truthy)]
    if flagged.empty:
        doc.p("No variant is unstable: every variant's rounds agree within the bar.", cls="sub")
        return
    probes = per.set_index(["scenario", "variant"])
    for r in flagged.to_dict("records"):
        key = (str(r["scenario"]), str(r["variant"]))
        p = probes.loc[key] if key in probes.index else None
        said = ""
        if p is not None:
            said = (
                f"; its rounds' launch probe {_series(p['timing_launch_us'])} µs, Python loop "
                f"{_series(p['timing_python_ms'])} ms"
            )
        doc.note(
            f"{key[0]}/{key[1]} is unstable: its timing rounds' mean step times spread by "
            f"{share(r.get('round_spread'))}{said}. Its speedups are paired within "
            "rounds, but its step time moved by that much within this run.",
            kind="caveat",
        )


def _figure(doc: Doc, pts: pd.DataFrame) -> None:
    from analysis.plots.hostprobe import host_probe_figure

    doc.image(
        "host_probes",
        host_probe_figure(pts),
        "host probes over run time",
        "Each worker's launch probe (host µs per asynchronous launch of a 1-element add) and "
        "Python loop probe, right before and right after its window, against run time.",
        width_px=900,
    )
