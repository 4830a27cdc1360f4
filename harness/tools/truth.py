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
from harness.core.folder import RunFolder
from harness.core.runfolder import OffTargetState, TruthState
from harness.judge.labels import FILE as LABELS_FILE
from harness.judge.score import NA, NONE, Labelled, labelled

#: truth_table's columns.
TRUTH_COLUMNS = ("report", "class", "truth_state")


def items_of(root: Path) -> list[Labelled]:
    """The labelled reports of a corpus or run folder (what the tools read): its exports, or
    for a run without any (``nsys.enabled=false``) its variants with Kineto traces
    (:func:`kineto_items`)."""
    run = RunFolder(root)
    corpus = any((root / name).is_file() for name in (LABELS_FILE, "labels.yaml"))
    if not corpus and not run.has("diagnosis") and run.has("runs"):
        return kineto_items(root)
    return labelled(root)


def kineto_items(root: Path) -> list[Labelled]:
    """A run folder's variants with Kineto traces and no nsys export, labelled by their
    declared role (no export, so no measured truth: harness/judge measures it beside the
    diagnosis): ``bottleneck`` -> its class fires, ``clean`` -> ``none``, ``partial`` -> its
    class ``either`` (an ``also``). Their ``path`` is the kineto unit folder (no export)."""
    from harness.core.config import discover_scenarios

    run = RunFolder(root)
    found = discover_scenarios()
    items = []
    for r in run.runs():
        if not run.kineto_traces(r.scenario, r.variant) or r.scenario not in found:
            continue
        scen = found[r.scenario]
        role = scen.variant(r.variant).expectation.role
        truth = scen.bottleneck if role == "bottleneck" else NONE
        also = scen.bottleneck if role == "partial" else ""
        step = r.step_ms_mean if r.step_ms_mean is not None and r.step_ms_mean > 0 else None
        items.append(Labelled(r.name, truth, rf.kineto_dir(root, r.scenario, r.variant), also,
                              step_ms=step))  # fmt: skip
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


#: ``<class>_off_target`` values under which another class than the variant's own is not
#: scored: a measured second cause, or nothing to hold it to.
NOT_SCORED_OFF_TARGET = (OffTargetState.SECOND_CAUSE, OffTargetState.UNCHECKED)


def _per_variant(run: RunFolder) -> pd.DataFrame:
    """The measured truth as diagnosis.csv writes it (harness/judge, issue 41): one
    ``truth_state`` per variant for its scenario's class (runs.csv's ``bottleneck``; else
    ``expected``, which is ``none`` where the class is clear); any other class is ``clear``,
    except where our detectors fired it as a measured second cause or with nothing to hold it
    to (``<class>_off_target``: ``second_cause``, ``unchecked``), which is ``either``
    (flagging it is no false positive, missing it no miss)."""
    own = {r.name: r.bottleneck for r in run.runs() if "bottleneck" in r.cells}
    rows = []
    for r in run.diagnosis():
        klass = own.get(r.name, r.expected)
        for k in CLASSES:
            if k == klass:
                state = r.truth_state or TruthState.EITHER
            elif r.off_target.get(k) in NOT_SCORED_OFF_TARGET:
                state = TruthState.EITHER
            else:
                state = TruthState.CLEAR
            rows.append({"report": r.name, "class": k, "truth_state": state})
    return pd.DataFrame(rows, columns=list(TRUTH_COLUMNS))


def _measured(root: Path) -> pd.DataFrame | None:
    """diagnosis.csv's measured truth where it has one: per variant (``expected``,
    ``truth_state``: :func:`_per_variant`), long (``class``, ``truth_state``) or wide
    (``truth_state:<class>``), keyed ``scenario/variant``."""
    run = RunFolder(root)
    diag = run.table("diagnosis", columns=("scenario", "variant"))
    if diag is None:
        return None
    report = diag["scenario"].astype(str) + "/" + diag["variant"].astype(str)
    if {"expected", "truth_state"} <= set(diag.columns) and "class" not in diag.columns:
        return _per_variant(run)
    if {"class", "truth_state"} <= set(diag.columns):
        return pd.DataFrame({"report": report, "class": diag["class"],
                             "truth_state": diag["truth_state"].map(_state)})  # fmt: skip
    wide = [c for c in diag.columns if c.startswith("truth_state:")]
    if not wide:
        return None
    long = diag.assign(report=report).melt(id_vars="report", value_vars=wide,
                                           var_name="class", value_name="truth_state")  # fmt: skip
    long["class"] = long["class"].str.removeprefix("truth_state:")
    long["truth_state"] = long["truth_state"].map(_state)
    return long


def _state(value: object) -> TruthState:
    """A truth_state cell as its state; an empty or unknown one is ``either`` (not scored)."""
    try:
        return TruthState(str(value))
    except ValueError:
        return TruthState.EITHER


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
            rows.append({"report": it.name, "class": k, "truth_state": state})
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
