"""The run report's "Tools against the ground truth" section: every profiler tool of the run's
tools step (``tools.run``: our detectors, nsys's expert rules, HTA, nsys-ai, the TensorBoard
plugin's rule) scored against the same truth, as a class x tool heatmap of F1 (``n/a`` shown
as such, never as 0), the precision/recall/F1 table, and per variant what each tool said with
its own evidence.

Read from ``tools_scores.csv`` and ``tools_calls.csv`` (written by ``harness/tools/step.py``),
never recomputed here: the report only imports ``harness.core``.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from bottlenecks import CLASSES
from harness.report.diagnosis import truth_text
from harness.report.doc import Doc, Tip
from harness.report.load import RunFolder

__all__ = ["f1_grid", "tools_heatmap", "tools_section", "variant_calls"]

#: tools_calls.csv's flag values (harness.tools.base.Flag).
FLAGGED, NA = "flagged", "n/a"


def f1_grid(scores: pd.DataFrame) -> pd.DataFrame:
    """class x tool F1 (NaN: n/a) in the suite's class order and the tools' own order."""
    grid = scores.pivot(index="class", columns="tool", values="f1")
    classes = [k for k in CLASSES if k in grid.index]
    return grid.reindex(index=classes, columns=list(dict.fromkeys(scores["tool"])))


def tools_heatmap(grid: pd.DataFrame) -> Figure:
    """The F1 grid as a seaborn heatmap: a colour from 0 to 1 where a tool was scored, a grey
    hatched ``n/a`` cell where it could not judge the class (never drawn as 0)."""
    import seaborn as sns
    from matplotlib.patches import Rectangle

    values = grid.astype(float)
    fig = Figure(figsize=(1.4 + 1.1 * max(1, values.shape[1]), 0.8 + 0.45 * len(values)))
    ax = fig.add_subplot()
    shown = values.fillna(0.0) if values.isna().all().all() else values
    sns.heatmap(shown, mask=values.isna(), vmin=0, vmax=1, cmap="viridis", annot=True, fmt=".2f",
                cbar_kws={"label": "F1"}, linewidths=0.5, ax=ax)  # fmt: skip
    for i, row in enumerate(values.index):
        for j, tool in enumerate(values.columns):
            if math.isnan(float(values.loc[row, tool])):
                ax.add_patch(Rectangle((j, i), 1, 1, facecolor="#dddddd", hatch="//",
                                       edgecolor="#bbbbbb", lw=0))  # fmt: skip
                ax.text(j + 0.5, i + 0.5, "n/a", ha="center", va="center", color="#555555")
    ax.set_xlabel("tool")
    ax.set_ylabel("class")
    ax.set_title("F1 against the run's truth")
    fig.tight_layout()
    return fig


def _prf_cell(r: pd.Series) -> str:
    if not r.get("judged_reports") or pd.isna(r.get("f1")):
        return NA
    return "/".join(NA if pd.isna(r[c]) else f"{r[c]:.2f}" for c in ("precision", "recall", "f1"))


def variant_calls(calls: pd.DataFrame) -> pd.DataFrame:
    """Per report and tool: ``said`` (the classes it flagged, ``-`` none, ``n/a`` none
    judged) and ``evidence`` (each flagged class with the tool's own evidence, or why it
    could judge nothing)."""
    rows = []
    for (report, tool), g in calls.groupby(["report", "tool"], sort=False):
        hit = g[g["flag"] == FLAGGED]
        if (g["flag"] == NA).all():
            said, why = NA, "; ".join(dict.fromkeys(g["evidence"]))
        else:
            said = ", ".join(hit["class"]) or "-"
            why = "; ".join(f"{k}: {e}" for k, e in zip(hit["class"], hit["evidence"], strict=True))
        rows.append({"report": report, "tool": tool, "said": said, "evidence": why})
    return pd.DataFrame(rows, columns=["report", "tool", "said", "evidence"])


def _truth_of(run: RunFolder, report: str) -> str:
    """diagnosis.csv's measured truth for the variant (``host_sync fires``), as the detector
    table writes it, or ''."""
    scenario, _, variant = report.partition("/")
    row = run.diag_row(scenario, variant) if variant else None
    return truth_text(row) if row else ""


def tools_section(doc: Doc, run: RunFolder) -> None:
    """The section (see the module's doc)."""
    text = ("report", "tool", "class", "flag", "evidence")
    scores = run.read("tools_scores", text=text, literal_na=True)
    calls = run.read("tools_calls", text=text, literal_na=True)
    if scores is None or calls is None or scores.empty:
        missing = [f"{n}.csv" for n, t in (("tools_scores", scores), ("tools_calls", calls))
                   if t is None or t.empty]  # fmt: skip
        doc.note(
            f"no {' and no '.join(missing)}: the run's tools step did not run or was kept in "
            "part (a run written before it, or tools.run=[]); `python -m harness score RUN "
            "--tool hta --tool nsys-ai` scores the tools on the run's exports and Kineto traces"
        )
        return
    tools = list(dict.fromkeys(scores["tool"]))
    doc.p(
        f"Each tool ({', '.join(tools)}) read every variant's traces (nsys exports; Kineto traces "
        "where the run has them: kineto.enabled=true) and was scored against the same truth as "
        "our detectors. A cell is n/a where the tool cannot judge the class or could not read "
        "the traces (the reason is in the table below): it is left out of the score, never "
        "counted as a miss."
    )
    doc.image("tools_f1", tools_heatmap(f1_grid(scores)), "F1 per class and tool",
              "F1 per class (rows) and tool (columns); grey: n/a")  # fmt: skip
    view = scores.assign(cell=scores.apply(_prf_cell, axis=1))
    table = view.pivot(index="class", columns="tool", values="cell")
    table = table.reindex(index=[k for k in CLASSES if k in table.index], columns=tools)
    doc.table(["class", *tools], [[k, *table.loc[k].tolist()] for k in table.index],
              caption="precision / recall / F1 per class and tool (n/a: nothing judged)")  # fmt: skip
    _per_variant(doc, run, calls, tools)


def _per_variant(doc: Doc, run: RunFolder, calls: pd.DataFrame, tools: list[str]) -> None:
    """One row per variant: its truth, then what each tool flagged (the evidence on hover in
    HTML, and in full in a details block for Markdown readers)."""
    said = variant_calls(calls)
    reports = list(dict.fromkeys(said["report"]))
    cells: dict[tuple[str, str], Any] = {
        (r.report, r.tool): Tip(r.said, r.evidence) if r.evidence else r.said
        for r in said.itertuples()
    }
    rows = [[rep, _truth_of(run, rep), *[cells.get((rep, t), "") for t in tools]]
            for rep in reports]  # fmt: skip
    doc.table(["variant", "truth", *tools], rows,
              caption="the classes each tool flagged per variant (-: none; n/a: it could "
              "judge none); hover for its evidence")  # fmt: skip
    lines = [f"{r.report} · {r.tool}: {r.said}" + (f" ({r.evidence})" if r.evidence else "")
             for r in said.itertuples()]  # fmt: skip
    doc.details("every tool's evidence per variant", "\n".join(lines))
