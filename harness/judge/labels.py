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

from collections.abc import Mapping

__all__ = ["DEVICES", "entry_device", "entry_source", "parse_removes"]

#: ``device`` values; ``auto`` (or empty) passes no ``--device``.
DEVICES = ("auto", "cpu", "cuda")


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
