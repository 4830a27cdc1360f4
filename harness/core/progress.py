"""What ``harness run`` shows while it goes: one bar on a terminal, whole lines otherwise.

On a terminal (``harness.progress`` and stderr a TTY) a single tqdm bar counts the worker runs;
its description says which unit runs and how far it got (``setup: compile 22 s``), and every
message goes through the bar (``tqdm.write``), so nothing breaks it. When stderr is a file or a
pipe (a batch job's log, a device call) there is no bar: each worker run is one line with its
own number, in the order of the numbers, ``[12/56] forced_sync/ideal [profile] ok in 14.2 s`` (a
skipped one gets its line too, with its reason instead of a time; a run that ends before an
earlier one waits for it), and whatever takes longer than ``QUIET_S`` is said (a worker's state
and set-up stage, once and then every ``AGAIN_S``; a step between workers once), so the log never
sits silent long enough to look like a hang. ``harness.progress=false`` prints messages only.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, TextIO

from tqdm import tqdm

from harness.core.console import fit_line

#: A worker state or set-up stage running this long is said in the line log (seconds).
QUIET_S = 5.0
SLOW_STAGE_S = QUIET_S  # the name tests and older callers use

#: ... and said again each time it has run this much longer.
AGAIN_S = 20.0

#: What a slow set-up stage of this name usually is (said with it).
STAGE_HINTS = {
    "compile": "torch.compile: a cold compiler cache takes about a minute per variant on a "
    "GPU; later runs reuse harness.cache_dir",
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
        self._said: dict[tuple[str, str | None, str | None], float] = {}
        self._desc = ""
        self._next = 1  # the lowest number not said yet
        self._early: dict[int, str] = {}  # lines of runs that ended before a lower number
        self._reused: set[int] = set()

    @property
    def lines(self) -> bool:
        """Each worker run is said as a numbered line (progress on, no bar)."""
        return self.enabled and not self.tty

    def say(self, msg: str) -> None:
        """One message, whole lines, never inside the bar; on a terminal wrapped to its 100
        columns (continuation lines indented), in a log one line per message (for grep)."""
        if self.terminal:
            msg = "\n".join(fit_line(line) for line in msg.split("\n"))
        if self.bar is not None:
            tqdm.write(msg, file=self.stream)
        else:
            print(msg, file=self.stream, flush=True)

    def start(self, total: int, reused: int | Iterable[int]) -> None:
        """The run's ``total`` worker runs; ``reused``: the numbers (1-based) of those already
        finished (a resume), or how many (the first ones)."""
        numbers = set(range(1, reused + 1)) if isinstance(reused, int) else set(reused)
        self.total, self.done, self._reused = total, len(numbers), numbers
        self._next = 1
        self._skip_said()
        if self.tty:
            self.bar = tqdm(
                total=total, initial=self.done, unit="run", file=self.stream, dynamic_ncols=True
            )

    def _skip_said(self) -> None:
        while self._next in self._reused:
            self._next += 1

    def finished(
        self,
        label: str,
        status: str,
        wall_s: float,
        ran: bool,
        why: str = "",
        number: int | None = None,
    ) -> None:
        """Worker run ``number`` ended (``ran``: a process ran). Every one gets one line, a
        skipped one too (with ``why``, no wall time), in the order of the numbers: a line whose
        number comes before one still running waits for it. A run ended again (a profile
        repeated as its own nsys process) is said when it ends. Without ``number``, the next."""
        self.done += 1
        if self.bar is not None:
            self.bar.update(1)
        if not self.lines:
            return
        n = self._next if number is None else number
        width = len(str(self.total))
        end = f"in {wall_s:.1f} s" if ran else (f"({why})" if why else "")
        line = f"[{n:>{width}}/{self.total}] {label} {status} {end}".rstrip()
        if n < self._next or n in self._early:
            self.say(line)  # a run said before, ended again
            return
        self._early[n] = line
        self._flush()

    def _flush(self) -> None:
        while self._next in self._early:
            self.say(self._early.pop(self._next))
            self._next += 1
            self._skip_said()

    def running(self, label: str, state: str | None, stage: str | None, seconds: float) -> None:
        """Where the current worker is: the bar's description, or, in the line log, one line
        when a state or set-up stage has taken ``QUIET_S``, again every ``AGAIN_S``."""
        where = f"{state}: {stage}" if stage else (state or "starting")
        if self.bar is not None:
            desc = f"{label} {where} {seconds:.0f} s"
            if desc != self._desc:
                self._desc = desc
                self.bar.set_description_str(desc)
            return
        if not self.lines or seconds < QUIET_S:
            return
        key = (label, state, stage)
        last = self._said.get(key)
        if last is not None and seconds < last + AGAIN_S:
            return
        self._said[key] = seconds
        hint = STAGE_HINTS.get(stage or "") if last is None else None
        what = f"set-up stage '{stage}'" if stage else f"'{state or 'starting'}'"
        self.say(
            f"{label}: {what} still running after {seconds:.0f} s" + (f" ({hint})" if hint else "")
        )

    def activity(self, text: str) -> None:
        """A step between workers (exports, servers starting, tables): the bar's description;
        in the line log one line (the same text is said once)."""
        if self.bar is not None:
            self._desc = text
            self.bar.set_description_str(text)
        elif self.lines and text != self._desc:
            self._desc = text
            self.say(text)

    def close(self) -> None:
        """The bar ends; lines still waiting for a lower number (a run stopped) are said."""
        for n in sorted(self._early):
            self.say(self._early[n])
        self._early.clear()
        if self.bar is not None:
            self.bar.set_description_str("worker runs")
            self.bar.close()
            self.bar = None
