"""The ground truth every tool is scored against, read through one function, :func:`truth_table`,
so that changing what the truth is (the run's measured truth, ``diagnosis.csv``'s
``truth_state``) changes it for every tool at once.

Per report and class a :class:`TruthState`: ``fires`` (the class is there: a tool should flag
it), ``clear`` (it is not: flagging it is a false positive), or a state that is not scored
(``either``: both are right; ``not_taken``/``no_removal``: the measured truth could not decide).
A labelled export without a measured truth (a corpus's ``labels.csv``, an older run's
``expected``): its label ``fires``, the corpus's measured second causes (``also``) are
``either``, an undecided label leaves the whole report ``either``, and every other class is
``clear``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from bottlenecks import CLASSES
from harness.core import runfolder as rf
from harness.judge.score import NA, NONE, Labelled, labelled
from harness.judge.truth import TruthState  # one vocabulary: the measured truth's states

#: truth_table's columns.
TRUTH_COLUMNS = ("report", "class", "truth_state")


def items_of(root: Path) -> list[Labelled]:
    """The labelled reports of a corpus or run folder (what the tools read): its exports, or
    for a run without any (``nsys.enabled=false``) its variants with Kineto traces
    (:func:`kineto_items`)."""
    try:
        return labelled(root)
    except FileNotFoundError:
        if not rf.table_path(root, "runs").is_file():
            raise
        return kineto_items(root)


def kineto_items(root: Path) -> list[Labelled]:
    """A run folder's variants with Kineto traces and no nsys export, labelled by their
    declared role (no export, so no measured truth: harness/judge measures it beside the
    diagnosis): ``bottleneck`` -> its class fires, ``clean`` -> ``none``, ``partial`` -> its
    class ``either`` (an ``also``). Their ``path`` is the kineto unit folder (no export)."""
    from harness.core.config import discover_scenarios

    runs = pd.read_csv(rf.table_path(root, "runs"))
    found = discover_scenarios()
    items = []
    for r in runs.itertuples():
        scenario, variant = str(r.scenario), str(r.variant)
        if not rf.kineto_traces(root, scenario, variant) or scenario not in found:
            continue
        scen = found[scenario]
        role = scen.variant(variant).expectation.role
        truth = scen.bottleneck if role == "bottleneck" else NONE
        also = scen.bottleneck if role == "partial" else ""
        step = pd.to_numeric(getattr(r, "step_ms_mean", None), errors="coerce")
        items.append(Labelled(f"{scenario}/{variant}", truth,
                              rf.kineto_dir(root, scenario, variant), also,
                              step_ms=float(step) if pd.notna(step) and step > 0 else None))  # fmt: skip
    return items


def has_export(item: Labelled) -> bool:
    """Whether the report is an nsys export (a kineto-only item's path is its unit folder)."""
    return item.path.is_file()


def kineto_of(root: Path, item: Labelled) -> tuple[Path, ...]:
    """The Kineto traces of a labelled export: a run's ``<scenario>/<variant>/kineto/`` or a
    corpus's ``kineto/<entry>/`` (``scripts/device/capture-corpus-kineto.sh``)."""
    run = (root / "diagnosis.csv").is_file() or rf.table_path(root, "runs").is_file()
    if "/" in item.name and run:
        scenario, variant = item.name.split("/", 1)
        return rf.kineto_traces(root, scenario, variant)
    folder = root / "kineto" / item.name
    return tuple(sorted(folder.glob(f"*{rf.KINETO_SUFFIX}"))) if folder.is_dir() else ()


#: ``<class>_off_target`` values (harness.judge.truth.OffTargetState) under which another class
#: than the variant's own is not scored: a measured second cause, or nothing to hold it to.
NOT_SCORED_OFF_TARGET = ("second_cause", "unchecked")


def _per_variant(root: Path, diag: pd.DataFrame, report: pd.Series) -> pd.DataFrame:
    """The measured truth as diagnosis.csv writes it (harness/judge, issue 41): one
    ``truth_state`` per variant for its scenario's class (runs.csv's ``bottleneck``; else
    ``expected``, which is ``none`` where the class is clear); any other class is ``clear``,
    except where our detectors fired it as a measured second cause or with nothing to hold it
    to (``<class>_off_target``: ``second_cause``, ``unchecked``), which is ``either``
    (flagging it is no false positive, missing it no miss)."""
    own: dict[str, str] = {}
    runs = rf.table_path(root, "runs")
    if runs.is_file():
        t = pd.read_csv(runs)
        if "bottleneck" in t:
            keys = t["scenario"].astype(str) + "/" + t["variant"].astype(str)
            own = dict(zip(keys, t["bottleneck"].astype(str), strict=True))
    rows = []
    for name, r in zip(report, diag.to_dict("records"), strict=True):
        klass = own.get(name, str(r.get("expected")))
        for k in CLASSES:
            if k == klass:
                state = str(r.get("truth_state") or TruthState.EITHER)
            elif str(r.get(f"{k}_off_target")) in NOT_SCORED_OFF_TARGET:
                state = str(TruthState.EITHER)
            else:
                state = str(TruthState.CLEAR)
            rows.append({"report": name, "class": k, "truth_state": state})
    return pd.DataFrame(rows, columns=list(TRUTH_COLUMNS))


def _measured(root: Path) -> pd.DataFrame | None:
    """diagnosis.csv's measured truth where it has one: per variant (``expected``,
    ``truth_state``: :func:`_per_variant`), long (``class``, ``truth_state``) or wide
    (``truth_state:<class>``), keyed ``scenario/variant``."""
    path = root / "diagnosis.csv"
    if not path.is_file():
        return None
    diag = pd.read_csv(path)
    report = diag["scenario"].astype(str) + "/" + diag["variant"].astype(str)
    if {"expected", "truth_state"} <= set(diag.columns) and "class" not in diag.columns:
        return _per_variant(root, diag, report)
    if {"class", "truth_state"} <= set(diag.columns):
        return pd.DataFrame({"report": report, "class": diag["class"],
                             "truth_state": diag["truth_state"]})  # fmt: skip
    wide = [c for c in diag.columns if c.startswith("truth_state:")]
    if not wide:
        return None
    long = diag.assign(report=report).melt(id_vars="report", value_vars=wide,
                                           var_name="class", value_name="truth_state")  # fmt: skip
    long["class"] = long["class"].str.removeprefix("truth_state:")
    return long


def _from_labels(items: Sequence[Labelled]) -> pd.DataFrame:
    rows = []
    for it in items:
        also = {c for c in str(it.also).split(";") if c}
        for k in CLASSES:
            if it.truth == NA:
                state = TruthState.EITHER
            elif k == it.truth:
                state = TruthState.FIRES
            elif k in also:
                state = TruthState.EITHER
            else:
                state = TruthState.CLEAR
            rows.append({"report": it.name, "class": k, "truth_state": str(state)})
    return pd.DataFrame(rows, columns=list(TRUTH_COLUMNS))


def truth_table(root: Path, items: Sequence[Labelled]) -> pd.DataFrame:
    """The truth for every report of ``items`` and every class: :data:`TRUTH_COLUMNS`, the
    measured truth where the folder has one, else from the labels (see the module's doc)."""
    measured = _measured(root)
    if measured is None:
        return _from_labels(items)
    names = {it.name for it in items}
    table = measured[measured["report"].isin(names)].reset_index(drop=True)
    return table.reindex(columns=list(TRUTH_COLUMNS))
