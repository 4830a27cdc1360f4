"""The one base of the project's string enums (classes, states, statuses, flags).

A ``(str, Enum)`` member compares equal to its value (``State.FIRED == "fired"``), so it can be
written into a table and read back; ``str()`` of it is the value, so an f-string or a CSV cell
shows ``fired``, never ``State.FIRED``. It lives on the ground floor, beside the class
vocabulary (whose ``Klass`` is one), because every package imports ``bottlenecks`` and
``bottlenecks`` imports none of them: ``analysis`` and ``harness`` (``harness.core.enums``) take
it from here.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["StrEnum"]


class StrEnum(str, Enum):
    """A string enum whose ``str()`` is its value (``enum.StrEnum`` of Python 3.11, on 3.10)."""

    def __str__(self) -> str:
        return self.value
