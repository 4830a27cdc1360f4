"""The project's string enum base, as ``harness`` imports it: :class:`bottlenecks.enums.StrEnum`
(defined once, on the ground floor, so that ``analysis`` shares it)."""

from __future__ import annotations

from bottlenecks.enums import StrEnum

__all__ = ["StrEnum"]
