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
from enum import Enum
from pathlib import Path

import pandas as pd

from bottlenecks import CLASSES
from harness.core import runfolder as rf
from harness.judge.score import NA, Labelled, labelled


class TruthState(str, Enum):
    """What the truth says about one class on one report (the measured truth's vocabulary)."""

    FIRES = "fires"
    CLEAR = "clear"
    EITHER = "either"
    NOT_TAKEN = "not_taken"
    NO_REMOVAL = "no_removal"

    def __str__(self) -> str:
        return self.value

    @property
    def scored(self) -> bool:
        """Whether a tool's call on it counts (fires or clear)."""
        return self in (TruthState.FIRES, TruthState.CLEAR)


#: truth_table's columns.
TRUTH_COLUMNS = ("report", "class", "truth_state")


def items_of(root: Path) -> list[Labelled]:
    """The labelled exports of a corpus or run folder (what the tools read)."""
    return labelled(root)


def kineto_of(root: Path, item: Labelled) -> tuple[Path, ...]:
    """The Kineto traces of a labelled export: a run's ``<scenario>/<variant>/kineto/`` or a
    corpus's ``kineto/<entry>/`` (``scripts/device/capture-corpus-kineto.sh``)."""
    if "/" in item.name and (root / "diagnosis.csv").is_file():
        scenario, variant = item.name.split("/", 1)
        return rf.kineto_traces(root, scenario, variant)
    folder = root / "kineto" / item.name
    return tuple(sorted(folder.glob(f"*{rf.KINETO_SUFFIX}"))) if folder.is_dir() else ()


def _measured(root: Path) -> pd.DataFrame | None:
    """diagnosis.csv's measured truth where it has one: long (``class``, ``truth_state``) or
    wide (``truth_state:<class>``), keyed ``scenario/variant``."""
    path = root / "diagnosis.csv"
    if not path.is_file():
        return None
    diag = pd.read_csv(path)
    report = diag["scenario"].astype(str) + "/" + diag["variant"].astype(str)
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
