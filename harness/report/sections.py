"""The run report's overview sections: summary, speedup matrix, verdicts and confusion matrix.

Each ``*_section(doc, run, ...)`` appends its blocks to ``doc`` and, where its table is absent or
holds nothing to show, a note saying why; it never raises for an empty or partial run folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from harness.report.doc import Badge, Code, Doc, Link
from harness.report.fmt import VERDICT_KINDS
from harness.report.load import RunFolder, scenario_info

__all__ = ["confusion_section", "matrix_section", "summary_section", "verdicts_section"]


def _summary_items(run: RunFolder) -> list[tuple[str, list[Any]]]:
    m = run.manifest or {}
    driver = f" (driver {run.gpu.get('driver')})" if run.gpu.get("driver") else ""
    state_kind = "ok" if run.complete else "inconclusive"
    items: list[tuple[str, list[Any]]] = [
        ("Run folder", [Code(str(run.path))]),
        ("GPU", [run.gpu_name + driver]),
        ("Size / device", [f"{run.size} / {m.get('device', '?')}"]),
        ("State", [Badge(run.state_name, state_kind)]),
        ("Created (UTC)", [run.created or "–"]),
    ]
    runs = run.runs
    if runs is not None and not runs.empty:
        status = runs["status"].astype(str) if "status" in runs else pd.Series(dtype=str)
        parts: list[Any] = [f"{runs['scenario'].nunique()} scenarios, {len(runs)} variants: "]
        for k, n in status.value_counts().items():
            parts += [Badge(f"{n} {k}", str(k)), " "]
        items.append(("Variants", parts))
    ver = run.tables.get("verdicts.csv")
    if ver is not None and not ver.empty and "verdict" in ver:
        parts = []
        for r in ver.itertuples():
            parts += [Link(str(r.scenario), f"#scenario-{r.scenario}"), " "]
            parts += [Badge(str(r.verdict), str(r.verdict)), "  "]
        items.append(("Verdicts", parts))
    return items


def summary_section(doc: Doc, run: RunFolder, found: dict[str, Any], out_dir: Path) -> None:
    """Where, on what and how far the run got; caveats (CPU run, unfinished run)."""
    doc.deflist(_summary_items(run))
    if (run.manifest or {}).get("device") == "cpu" or run.slug == "cpu":
        doc.note(
            "CPU run: timings are CPU timings and say nothing about GPU speedups, and nsys on a "
            "machine without a GPU records NVTX ranges and OS-runtime calls only (no kernels, "
            "copies or CUDA API calls), so detectors that need CUDA activity cannot judge.",
            kind="caveat",
        )
    if run.state is None:
        doc.note(
            "no state.json: this folder does not say whether the run finished (a folder of "
            "tables only keeps runs.csv and manifest.json)",
            kind="caveat",
        )
    elif not run.complete:
        doc.note(
            f"the run's state is '{run.state_name}': some variants may be missing or failed.",
            kind="caveat",
        )
    if not found:
        _, why = scenario_info()
        doc.note(f"no scenario texts: {why or 'no scenarios found'}", kind="caveat")


def scenario_classes(run: RunFolder, found: dict[str, Any]) -> dict[str, str]:
    """Scenario -> its bottleneck class (from the scenario module, else from runs.csv)."""
    runs = run.runs
    out: dict[str, str] = {}
    if runs is None or runs.empty:
        return out
    for s, g in runs.groupby("scenario", sort=False):
        if s in found:
            out[str(s)] = found[s].bottleneck
        elif "bottleneck" in g and g["bottleneck"].notna().any():
            out[str(s)] = str(g["bottleneck"].dropna().iloc[0])
        else:
            out[str(s)] = ""
    return out


def matrix_section(doc: Doc, run: RunFolder, found: dict[str, Any]) -> None:
    """The speedup matrix (scenarios x fixes and ideal), or why there is none."""
    from analysis.plots.matrix import matrix_table, speedup_matrix

    runs = run.runs
    if runs is None or runs.empty:
        doc.note(run.why_missing("runs.csv"))
        return
    if "speedup" not in runs:
        doc.note("runs.csv has no speedup column: nothing to draw")
        return
    if matrix_table(runs).empty:
        doc.note(
            "no fix or ideal in this run (baselines only): a speedup is a variant's step time "
            "against its baseline's, so there is no matrix to draw; the variants table below "
            "holds the baselines' timings"
        )
        return
    labels = {s: f"{s}\n({k})" if k else s for s, k in scenario_classes(run, found).items()}
    fig = speedup_matrix(runs, labels=labels)
    doc.image(
        "speedup_matrix",
        fig,
        "speedup matrix: scenarios by fixes and ideal",
        "Each cell: the variant's speedup, its scenario's baseline's mean step time over the "
        "variant's, from the same run (= the throughput ratio; above 1x the variant is faster), "
        "with the 95% CI in brackets (hierarchical bootstrap over rounds and steps); a CI that "
        "contains 1x means no measurable change. The same numbers as the variants table below. "
        "Colour: log speedup, red slower, green faster. Grey hatched: 'n/a' where the scenario has no such variant, "
        "else the status of a variant that did not finish (skipped, failed, oom, ...).",
    )
    if int(fig.cells["speedup"].notna().sum()) == 0:
        doc.note("no variant other than the baseline has a speedup in this run", kind="caveat")


def _verdict_placeholders(doc: Doc, run: RunFolder, found: dict[str, Any]) -> None:
    doc.note(run.why_missing("verdicts.csv"))
    rows = []
    for s in run.scenarios():
        sc = found.get(s)
        rows.append([Link(s, f"#scenario-{s}"), sc.title if sc else "–", sc.bottleneck if sc else "–",
                     Badge("no verdict", "missing")])  # fmt: skip
    if rows:
        doc.table(["scenario", "title", "class", "verdict"], rows)


def verdicts_section(doc: Doc, run: RunFolder, found: dict[str, Any]) -> None:
    """One verdict per scenario (verdicts.csv) with its reason and off-target findings."""
    ver = run.tables.get("verdicts.csv")
    if ver is None or ver.empty:
        _verdict_placeholders(doc, run, found)
        return
    rows = []
    for r in ver.to_dict("records"):
        s = str(r.get("scenario"))
        sc = found.get(s)
        v = str(r.get("verdict", ""))
        off = r.get("off_target")
        rows.append([
            Link(s, f"#scenario-{s}"), sc.title if sc else "–",
            str(r.get("bottleneck", sc.bottleneck if sc else "")), Badge(v, VERDICT_KINDS.get(v, "")),
            r.get("reason"), off if isinstance(off, str) else "none",
        ])  # fmt: skip
    doc.table(["scenario", "title", "class", "verdict", "reason", "off-target findings"], rows)
    doc.p(
        "confirmed: every variant's detector agrees with its measured truth (the timed saving "
        "of removing the cause against the detector's own bar: fires or clear; a saving that "
        "straddles the bar is either, and one whose gap is its loop's extra wait for a core "
        "(a loaded CPU host) is oversubscribed: neither refutes), nothing else fires beyond the "
        "measured gap, and the best fix's speedup CI lower bound is at least 1.1x; refuted or "
        "inconclusive otherwise, with the reason (measured saving next to predicted).",
        cls="sub",
    )


def confusion_section(doc: Doc, run: RunFolder) -> None:
    """The confusion matrix (expected class by primary finding) as a picture and a table."""
    from analysis.plots.diagnosis import confusion_figure

    conf = run.tables.get("confusion.csv")
    if conf is None or conf.empty:
        doc.note(run.why_missing("confusion.csv"))
        return
    idx = "injected" if "injected" in conf else conf.columns[0]
    mat = conf.set_index(idx).apply(pd.to_numeric, errors="coerce").fillna(0).astype(int)
    if mat.empty or mat.shape[1] == 0:
        doc.note("confusion.csv holds no counts", kind="caveat")
        return
    doc.image(
        "confusion",
        confusion_figure(mat),
        "confusion matrix: expected class by primary finding",
        "Rows: what each variant should show by its measured truth (diagnosis.csv's expected: "
        "the scenario's class where removing its cause saved at least the class's bar, "
        "'none' where it saved less); columns: the detectors' primary finding on "
        "its export. Counts on the diagonal (outlined) are right. Only variants whose "
        "expectation could be judged are counted.",
        width_px=620,
    )
    doc.table(
        ["expected \\ primary", *map(str, mat.columns)],
        ([str(i), *map(int, row)] for i, row in zip(mat.index, mat.to_numpy(), strict=True)),
        numeric=range(1, len(mat.columns) + 1),
    )
    _left_out_note(doc, run)


def _left_out_note(doc: Doc, run: RunFolder) -> None:
    """Which profiled variants the matrix leaves out: their expectation could not be judged."""
    diag = run.tables.get("diagnosis.csv")
    if diag is None or diag.empty or "match" not in diag:
        return
    left = diag[diag["match"].isna()]
    if left.empty:
        return
    names = ", ".join(f"{r.scenario}/{r.variant}" for r in left.itertuples())
    doc.note(
        f"{len(left)} of {len(diag)} profiled variants are left out of the matrix and the scores: "
        f"the detectors could not judge what they should show there ({names}); see Detector "
        "findings for each reason",
        kind="caveat",
    )
