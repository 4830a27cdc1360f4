"""Pictures of the detectors' outcomes: the confusion matrix and expected-vs-observed per variant.

:func:`expectation_figure` takes the long table the report builds from ``diagnosis.csv``
(``harness.report.diagnosis.expectation_table``): one row per variant with ``scenario``,
``variant``, ``truth`` (what the variant should show, as the report's tables write it),
``role`` (the declared clean / bottleneck / partial), ``outcome`` (match / mismatch /
notjudged: the judge's own ``match``) and per class its state (``<class>``: fired / clear /
not_judged, "" where unknown) and its outcome (``<class>:outcome``). The picture draws those
outcomes as given and judges nothing itself, so no cell can say other than the tables.
"""

from __future__ import annotations

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from analysis.findings import CLASSES, State

__all__ = ["OUTCOME_COLORS", "confusion_figure", "expectation_figure"]

OUTCOME_COLORS = {"match": "#9fd8ad", "mismatch": "#f0a19b", "notjudged": "#dfe3e8"}
_PARTIAL = "#c9a227"
_CLEAR_OK = "#e6f5ea"


def confusion_figure(mat: pd.DataFrame) -> Figure:
    """Heatmap of counts, expected class (rows) by primary finding (columns); diagonal outlined."""
    import seaborn as sns

    fig = Figure(figsize=(6.6, 4.6), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    sns.heatmap(
        mat, ax=ax, annot=True, fmt="d", cmap="Blues", cbar=False, linewidths=1,
        linecolor="white", vmin=0, vmax=max(1, int(mat.to_numpy().max())),
        annot_kws={"fontsize": 10},
    )  # fmt: skip
    cols = list(mat.columns)
    for i, r in enumerate(mat.index):
        if r in cols:
            ax.add_patch(
                Rectangle((cols.index(r), i), 1, 1, fill=False, edgecolor="#2b8a3e", lw=2.2)
            )
    ax.set_xlabel("primary finding (detectors)")
    ax.set_ylabel("expected (ground truth)")
    ax.tick_params(length=0)
    ax.set_xticklabels(ax.get_xticklabels(), rotation=30, ha="right")
    ax.set_yticklabels(ax.get_yticklabels(), rotation=0)
    ax.set_title("Confusion matrix", loc="left", fontsize=11)
    return fig


def _class_text(state: str) -> str:
    """A detector's cell text: its state as the tables word it ("n/j": not judged; "–": a
    class the table predates)."""
    if state == State.NOT_JUDGED:
        return "n/j"
    return state if state in (State.FIRED, State.CLEAR) else "–"


def _cell(ax: Axes, col: int, row: int, kind: str, text: str, partial: bool) -> None:
    """One coloured cell; a clear detector that is right is a paler green than a fired one."""
    face = _CLEAR_OK if (kind == "match" and text == "clear") else OUTCOME_COLORS[kind]
    ax.add_patch(
        Rectangle(
            (col, row),
            1,
            1,
            facecolor=face,
            lw=2 if not partial else 1,
            edgecolor=_PARTIAL if partial else "white",
            hatch="///" if partial else None,
        )
    )
    box = {"boxstyle": "round,pad=0.1", "fc": face, "ec": "none"} if partial else None
    ax.text(col + 0.5, row + 0.5, text, ha="center", va="center", fontsize=8.5, bbox=box,
            color="#777777" if kind == "notjudged" or text == "clear" else "#222222",
            weight="bold" if text not in ("clear", "n/j", "–") else "normal")  # fmt: skip


def expectation_figure(table: pd.DataFrame, classes: list[str] | None = None) -> Figure:
    """Rows: variants; columns: each class's detector, then the variant's overall outcome.

    A cell's colour is its ``<class>:outcome`` (green match, red mismatch, grey not judged), the
    overall column the row's ``outcome``; a declared partial fix's fired class is hatched. The
    figure gets ``outcomes`` (the colour kind of every cell, rows x columns, as a DataFrame).
    """
    classes = list(classes or CLASSES)
    n = len(table)
    cols = [*classes, "overall"]
    fig = Figure(
        figsize=(1.35 * len(cols) + 3.2, max(2.2, 0.36 * n + 1.6)), dpi=100, layout="constrained"
    )
    ax = fig.add_subplot()
    kinds = pd.DataFrame("", index=range(n), columns=cols)
    for i, r in enumerate(table.to_dict("records")):
        partial = r.get("role") == "partial"
        for j, k in enumerate(classes):
            kind = str(r.get(f"{k}:outcome") or "notjudged")
            kinds.iloc[i, j] = kind
            _cell(
                ax,
                j,
                i,
                kind,
                _class_text(str(r.get(k, "") or "")),
                partial and k == r.get("expected"),
            )
        outcome = str(r.get("outcome"))
        kinds.iloc[i, len(classes)] = outcome
        word = {"match": "match", "mismatch": "mismatch", "notjudged": "not judged"}[outcome]
        _cell(ax, len(classes), i, outcome, word + (" (partial)" if partial else ""), partial)
    ax.axvline(len(classes), color="#333333", lw=1.5)
    ax.set_xlim(0, len(cols))
    ax.set_ylim(max(n, 1), 0)
    ax.set_xticks([j + 0.5 for j in range(len(cols))])
    ax.set_xticklabels(cols, rotation=20, ha="left", fontsize=9)
    ax.xaxis.tick_top()
    ax.set_yticks([i + 0.5 for i in range(n)])
    ax.set_yticklabels([f"{r['scenario']} · {r['variant']}  [{r['truth']}]"
                        for r in table.to_dict("records")], fontsize=8.5)  # fmt: skip
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    handles = [
        Patch(facecolor=OUTCOME_COLORS["match"], label="fired, as expected"),
        Patch(facecolor=_CLEAR_OK, label="clear, as expected"),
        Patch(facecolor=OUTCOME_COLORS["mismatch"], label="not as expected (miss / false alarm)"),
        Patch(facecolor=OUTCOME_COLORS["notjudged"], label="not judged"),
        Patch(facecolor="white", edgecolor=_PARTIAL, hatch="///", label="partial fix"),
    ]
    fig.legend(handles=handles, loc="outside lower left", ncols=5, fontsize=8.5, frameon=False)
    fig.suptitle(
        "Detectors against the measured truth, per variant", x=0.01, ha="left", fontsize=11
    )
    if n == 0:
        ax.text(
            len(cols) / 2, 0.5, "no diagnosed variant", ha="center", va="center", color="#777777"
        )
    fig.outcomes = kinds
    return fig
