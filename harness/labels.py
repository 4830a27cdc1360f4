"""The wild corpus's labels format (``labels.csv``), defined once.

Standard library only: ``corpus/measure.py`` imports it on the bare GPU machine, and
``harness score`` reads the same file. ``removes`` names, for the label and for each ``also``
class, the script's switch that removes that cause entirely (``class=switch;class=switch``): the
measurement each finding's predicted speedup is checked against.
"""

from __future__ import annotations

__all__ = ["parse_removes"]


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
