"""What a detector returns: one :class:`Finding` per bottleneck class and report."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

#: The bottleneck classes the suite injects, one detector each (analysis/detect/<class>.py).
CLASSES: tuple[str, ...] = (
    "data_stall",
    "pageable_copy",
    "launch_bound",
    "host_sync",
    "exposed_comm",
)


@dataclass
class Finding:
    """One detector's verdict on one report.

    ``impact`` is the share (0..1) of step time (NVTX steps) or of the steady-state window (no
    NVTX) that the bottleneck explains; ``metrics`` carry their unit in the name (``_share``,
    ``_us``, ``_per_step``, ``_per_s``, ``_bytes``); ``evidence`` holds a few concrete examples
    with timestamps (ns on the trace's clock, plus ms from the window start); ``reason`` says in
    one sentence why it fired or not (e.g. which table is missing).
    """

    klass: str
    fired: bool
    impact: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)
    evidence: list[dict[str, Any]] = field(default_factory=list)
    reason: str = ""

    def __post_init__(self) -> None:
        if self.klass not in CLASSES:
            raise ValueError(f"unknown bottleneck class {self.klass!r}; known: {CLASSES}")
        self.impact = float(min(1.0, max(0.0, self.impact)))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, with ``class`` as the key (issue 4's JSON shape)."""
        d = asdict(self)
        d["class"] = d.pop("klass")
        return d
