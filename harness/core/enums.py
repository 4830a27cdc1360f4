"""The one base of the project's string enums (states, statuses, flags).

A ``(str, Enum)`` member compares equal to its value (``Status.OK == "ok"``), so it can be
written into a table and read back; ``str()`` of it is the value, so an f-string or a CSV
cell shows ``ok``, never ``Status.OK``.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["StrEnum"]


class StrEnum(str, Enum):
    """A string enum whose ``str()`` is its value (``enum.StrEnum`` of Python 3.11, on 3.10)."""

    def __str__(self) -> str:
        return self.value
