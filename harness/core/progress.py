"""What ``harness run`` shows while it goes: one bar on a terminal, whole lines otherwise.

On a terminal (``harness.progress`` and stderr a TTY) a single tqdm bar counts the worker runs;
its description says which unit runs and how far it got (``setup: compile 22 s``), and every
message goes through the bar (``tqdm.write``), so nothing breaks it. When stderr is a file or a
pipe (a batch job's log, a device call) there is no bar: each finished worker run is one line,
``[12/56] forced_sync/ideal [profile] ok in 14.2 s`` (a skipped one gets its number too, with
its reason instead of a time), and a set-up stage that takes long is said once, so a cold
torch.compile does not look like a hang. ``harness.progress=false`` prints messages only.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from tqdm import tqdm

from harness.core.console import WIDTH, wrap

#: A set-up stage running this long is said once in the line log (seconds).
SLOW_STAGE_S = 15.0

#: What a slow set-up stage of this name usually is (said with it).
STAGE_HINTS = {
    "compile": "torch.compile: a cold compiler cache takes about a minute per variant on the "
    "H100; later runs reuse harness.cache_dir",
    "data": "generating the data set once; later runs reuse harness.cache_dir",
}


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Progress:
    """The run's progress output on ``stream`` (stderr by default)."""

    def __init__(self, enabled: bool, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.tty = enabled and _isatty(self.stream)
        self.terminal = _isatty(self.stream)  # messages wrapped to WIDTH, bar or not
        self.bar: Any = None
        self.total = 0
        self.done = 0
        self._said: set[tuple[str, str]] = set()
        self._desc = ""

    def say(self, msg: str) -> None:
        """One message, whole lines, never inside the bar; on a terminal wrapped to its 100
        columns (continuation lines indented), in a log one line per message (for grep)."""
        if self.terminal:
            msg = "\n".join(_wrapped(line) for line in msg.split("\n"))
        if self.bar is not None:
            tqdm.write(msg, file=self.stream)
        else:
            print(msg, file=self.stream, flush=True)

    def start(self, total: int, reused: int) -> None:
        """The run's ``total`` worker runs, ``reused`` of them already finished (a resume)."""
        self.total, self.done = total, reused
        if self.tty:
            self.bar = tqdm(
                total=total, initial=reused, unit="run", file=self.stream, dynamic_ncols=True
            )

    def finished(self, label: str, status: str, wall_s: float, ran: bool, why: str = "") -> None:
        """A worker run ended (``ran``: a process ran). Every one gets its number, a skipped
        one too (with ``why``, and no wall time), so the line log counts 1..total unbroken."""
        self.done += 1
        if self.bar is not None:
            self.bar.update(1)
        elif self.enabled:
            width = len(str(self.total))
            end = f"in {wall_s:.1f} s" if ran else (f"({why})" if why else "")
            self.say(f"[{self.done:>{width}}/{self.total}] {label} {status} {end}".rstrip())

    def running(self, label: str, state: str | None, stage: str | None, seconds: float) -> None:
        """Where the current worker is: the bar's description, or, in the line log, one line
        when a set-up stage has taken ``SLOW_STAGE_S`` (once per unit and stage)."""
        if self.bar is not None:
            where = f"{state}: {stage}" if stage else (state or "starting")
            desc = f"{label} {where} {seconds:.0f} s"
            if desc != self._desc:
                self._desc = desc
                self.bar.set_description_str(desc)
            return
        if not (self.enabled and stage and seconds >= SLOW_STAGE_S):
            return
        if (label, stage) in self._said:
            return
        self._said.add((label, stage))
        hint = STAGE_HINTS.get(stage)
        self.say(
            f"{label}: set-up stage '{stage}' still running after {seconds:.0f} s"
            + (f" ({hint})" if hint else "")
        )

    def activity(self, text: str) -> None:
        """A step between workers (exports): the bar's description; the caller says it too."""
        if self.bar is not None:
            self._desc = text
            self.bar.set_description_str(text)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.set_description_str("worker runs")
            self.bar.close()
            self.bar = None


def _wrapped(line: str) -> str:
    """One line of a message within WIDTH columns, keeping its own indent; what it wraps onto
    further lines is indented two more."""
    if len(line) <= WIDTH:
        return line
    indent = line[: len(line) - len(line.lstrip(" "))]
    first, *more = wrap(line[len(indent) :], WIDTH - len(indent))
    tail = wrap(" ".join(more), WIDTH - len(indent) - 2) if more else []
    return "\n".join([indent + first, *(indent + "  " + t for t in tail)])
