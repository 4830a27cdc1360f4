"""The wild corpus's labels format (``labels.csv``), defined once.

Standard library only: ``corpus/measure.py`` and ``corpus/plan.py`` import it on the bare GPU
machine, and ``harness score`` reads the same file. One row is one corpus entry: a script run
one way, timed and profiled under the entry's name (``script``). ``removes`` names, for the label
and for each ``also`` class, the script's switch that removes that cause entirely
(``class=switch;class=switch``): the measurement each finding's predicted speedup is checked
against. ``source`` is the script file the entry runs (``corpus/wild/SOURCE.py``; empty: the
entry's own name), so one script can be two entries, e.g. a pipeline on 2 CPU ranks and the same
file on 2 GPUs; ``device`` is the ``--device`` every run and profile of the entry passes
(``cpu``, ``cuda``, or empty: the script's own ``auto``).
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from pathlib import Path

__all__ = [
    "DEVICES",
    "FILE",
    "REQUIRED",
    "LabelsError",
    "entry_device",
    "entry_source",
    "parse_removes",
    "read_labels",
]

#: The file's name in a corpus folder.
FILE = "labels.csv"
#: The columns every reader needs.
REQUIRED = ("script", "label")
#: ``device`` values; ``auto`` (or empty) passes no ``--device``.
DEVICES = ("auto", "cpu", "cuda")


class LabelsError(ValueError):
    """A labels.csv that cannot be read (``str()``: ``FILE: WHY``, one line)."""


def read_labels(path: str | Path) -> list[dict[str, str]]:
    """The one reader of a labels.csv: its rows in order, every cell a string ("" where
    empty); :class:`LabelsError` naming the file on one that is missing, unreadable, not UTF-8
    CSV, or lacks a :data:`REQUIRED` column or a script name."""
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            rows = [{k: v or "" for k, v in r.items() if k is not None} for r in reader]
            columns = reader.fieldnames or []
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise LabelsError(f"{path}: cannot be read as CSV ({exc})") from None
    missing = [c for c in REQUIRED if c not in columns]
    if missing:
        raise LabelsError(f"{path}: no column {', '.join(missing)} (its columns: "
                          f"{', '.join(columns) or 'none'})")  # fmt: skip
    unnamed = [i + 2 for i, r in enumerate(rows) if not r["script"].strip()]
    if unnamed:
        raise LabelsError(f"{path}: line {unnamed[0]} names no script")
    return rows


def parse_removes(text: str | None) -> dict[str, str]:
    """``removes`` (``class=switch;...``, empty for a clean script) -> {class: switch}; a
    malformed or repeated pair raises ValueError naming it."""
    out: dict[str, str] = {}
    for pair in filter(None, (text or "").split(";")):
        cls, sep, switch = (p.strip() for p in pair.partition("="))
        if not sep or not cls or not switch or cls in out:
            raise ValueError(f"removes: bad pair {pair!r} in {text!r}")
        out[cls] = switch
    return out


def entry_source(row: Mapping[str, str]) -> str:
    """The script file (stem, under corpus/wild/) that an entry runs: ``source``, else the
    entry's name."""
    return (row.get("source") or "").strip() or row["script"]


def entry_device(row: Mapping[str, str]) -> str:
    """The entry's ``device``: ``auto`` (no ``--device`` passed), ``cpu`` or ``cuda``; any other
    value raises ValueError naming the entry."""
    device = (row.get("device") or "").strip() or "auto"
    if device not in DEVICES:
        raise ValueError(f"{row['script']}: device {device!r}, expected one of {DEVICES}")
    return device
