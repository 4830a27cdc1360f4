"""Every tool on every labelled report, and one table: per class and tool, precision, recall and
F1 against the same truth (:func:`harness.tools.truth.truth_table`).

``tools_calls.csv`` (long: report, tool, class, flag, evidence) holds what each tool said;
``tools_scores.csv`` (tool, class, tp, fp, fn, judged_reports, na_reports, precision, recall,
f1) how it scored. A report counts for a tool and class only where the truth is ``fires`` or
``clear`` and the tool's call is not ``n/a``; a class no report could be judged on scores
``n/a`` (NaN), never 0.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pandas as pd

from bottlenecks import CLASSES
from harness.core.metrics import prf
from harness.judge.export import ExportError, sqlite_of
from harness.judge.score import Labelled
from harness.tools.base import Adapter, Context, Flag, Traces, adapters, all_na, checked
from harness.tools.truth import TruthState, has_export, kineto_of

#: tools_calls.csv's columns.
CALL_COLUMNS = ("report", "tool", "class", "flag", "evidence")
#: tools_scores.csv's columns.
SCORE_COLUMNS = ("tool", "class", "tp", "fp", "fn", "judged_reports", "na_reports", "precision",
                 "recall", "f1")  # fmt: skip

#: ``--tool`` names that are a command template for the keyword adapter, not an adapter.
KEYWORD = "keyword"


def resolve(names: Sequence[str]) -> list[tuple[str, Adapter, str]]:
    """(column name, adapter, command) per ``--tool``: an adapter's name, or any other text as a
    command for the keyword adapter (``tool1``, ``tool2``, ... as before)."""
    found = adapters()
    out, n = [], 0
    for name in names:
        if name in found:
            out.append((name, found[name], ""))
        else:
            n += 1
            out.append((f"tool{n}", found[KEYWORD], name))
    return out


def tool_calls(
    root: Path,
    items: Sequence[Labelled],
    names: Sequence[str],
    ctx: Context,
    extra: Mapping[str, Mapping[str, object]] | None = None,
) -> pd.DataFrame:
    """What each tool said on each report, per class (:data:`CALL_COLUMNS`). ``extra``: per
    key, per report, what goes into that report's ``Traces.extra`` (e.g. the expert rules a
    run already ran on it)."""
    tools = resolve(names)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bottleneck-tools-") as tmp:
        for it in items:
            with _export_of(it, Path(tmp)) as (db, unreadable):
                traces = Traces(it.name, sqlite=db, kineto=kineto_of(root, it),
                                step_ms=it.step_ms)  # fmt: skip
                for column, adapter, command in tools:
                    more = {k: v[it.name] for k, v in (extra or {}).items() if it.name in v}
                    t = Traces(**{**traces.__dict__, "extra": {"command": command, **more}})
                    rows += _calls_rows(it.name, column, adapter, t, ctx, unreadable)
    return pd.DataFrame(rows, columns=list(CALL_COLUMNS))


@contextmanager
def _export_of(item: Labelled, tmp: Path) -> Iterator[tuple[Path | None, str]]:
    """(the item's SQLite export or None, why it cannot be read or ""): a kineto-only item
    has no export; an export that cannot be read leaves every tool that needs it n/a."""
    if not has_export(item):
        yield None, ""
        return
    with ExitStack() as stack:
        try:
            db = stack.enter_context(sqlite_of(item.path, tmp))
        except ExportError as exc:
            yield None, str(exc)
            return
        yield db, ""


def _calls_rows(
    report: str, column: str, adapter: Adapter, traces: Traces, ctx: Context, unreadable: str
) -> list[dict[str, str]]:
    """One tool's rows (:data:`CALL_COLUMNS`) on one report."""
    if unreadable and adapter.reads == "sqlite":
        calls = all_na(f"unreadable export: {unreadable}")
    else:
        try:
            calls = checked(adapter.name, adapter.judge(traces, ctx))
        except Exception as exc:  # one tool failing leaves its cells n/a, says why
            calls = all_na(f"{adapter.name} failed: {type(exc).__name__}: {exc}")
    return [{"report": report, "tool": column, "class": k, "flag": str(c.flag),
             "evidence": c.evidence} for k, c in calls.items()]  # fmt: skip


def tool_scores(calls: pd.DataFrame, truth: pd.DataFrame) -> pd.DataFrame:
    """Per tool and class: counts and precision, recall, F1 (:data:`SCORE_COLUMNS`)."""
    both = calls.merge(truth, on=["report", "class"], how="left")
    both["truth_state"] = both["truth_state"].fillna(str(TruthState.EITHER))
    scored = both["truth_state"].isin([str(TruthState.FIRES), str(TruthState.CLEAR)])
    rows = []
    for tool in dict.fromkeys(calls["tool"]):
        for k in CLASSES:
            g = both[(both["tool"] == tool) & (both["class"] == k) & scored]
            na = g["flag"] == str(Flag.NA)
            use = g[~na]
            pos = use["truth_state"] == str(TruthState.FIRES)
            hit = use["flag"] == str(Flag.FLAGGED)
            tp, fp, fn = int((pos & hit).sum()), int((~pos & hit).sum()), int((pos & ~hit).sum())
            rows.append({"tool": tool, "class": k, "tp": tp, "fp": fp, "fn": fn,
                         "judged_reports": len(use), "na_reports": int(na.sum()), **prf(tp, fp, fn)})  # fmt: skip
    return pd.DataFrame(rows, columns=list(SCORE_COLUMNS))


def f1_grid(scores: pd.DataFrame, *, every_class: bool = True) -> pd.DataFrame:
    """class x tool F1 (NaN: n/a), in the suite's class order and the tools' order
    (tools_f1.csv, the report's heatmap); ``every_class=False``: only the classes scored."""
    grid = scores.pivot(index="class", columns="tool", values="f1")
    classes = [k for k in CLASSES if every_class or k in grid.index]
    return grid.reindex(index=classes, columns=list(dict.fromkeys(scores["tool"])))


def table_view(scores: pd.DataFrame) -> pd.DataFrame:
    """One row per class, one column per tool: ``P/R/F1`` (``n/a`` where undefined)."""

    def cell(r: pd.Series) -> str:
        if not r["judged_reports"] or pd.isna(r["f1"]):
            return "n/a"
        return "/".join("n/a" if pd.isna(r[c]) else f"{r[c]:.2f}"
                        for c in ("precision", "recall", "f1"))  # fmt: skip

    view = scores.assign(cell=scores.apply(cell, axis=1))
    table = view.pivot(index="class", columns="tool", values="cell")
    table = table.reindex(index=list(CLASSES), columns=list(dict.fromkeys(scores["tool"])))
    return table.reset_index()


def verdict_view(calls: pd.DataFrame) -> pd.DataFrame:
    """Per report and tool, the classes it flagged (``-``: none; ``n/a``: it could judge none)."""
    out = []
    for (report, tool), g in calls.groupby(["report", "tool"], sort=False):
        flagged = g.loc[g["flag"] == str(Flag.FLAGGED), "class"].tolist()
        all_na_ = bool((g["flag"] == str(Flag.NA)).all())
        out.append({"report": report, "tool": tool,
                    "flagged": "n/a" if all_na_ else (";".join(flagged) or "-")})  # fmt: skip
    wide = pd.DataFrame(out, columns=["report", "tool", "flagged"])
    if wide.empty:
        return wide
    table = wide.pivot(index="report", columns="tool", values="flagged")
    return table.reindex(index=list(dict.fromkeys(wide["report"])),
                         columns=list(dict.fromkeys(wide["tool"]))).reset_index()  # fmt: skip
