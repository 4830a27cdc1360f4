"""The errors a command answers in one line and exit 2, and the one place that prints them.

Why one place: every command (``run``'s own checks, ``diagnose``, ``score``, ``report``,
``compare``, ``list``) meets the same bad inputs (a missing, empty, truncated or corrupt file, a
file of the wrong kind, an unknown name or override). Each raises :class:`UsageError` (a
mistake in the command line) or :class:`InputError` (an input that cannot be read), naming the
input and the problem; :func:`say` prints the line. Standard library only: the CLI imports it
before anything heavy.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import NoReturn, TextIO

__all__ = [
    "EXIT_BAD_INPUT",
    "InputError",
    "OneLineParser",
    "UsageError",
    "check_out",
    "one_line",
    "say",
]

#: The exit code of every command given a bad input (README, docs/reliability.md).
EXIT_BAD_INPUT = 2


class UsageError(ValueError):
    """A command-line mistake the user can fix; printed in one line, without a traceback."""


class InputError(UsageError):
    """An input (a file, a folder, a table) that cannot be used: ``str()`` is ``INPUT: PROBLEM``,
    one line."""

    def __init__(self, what: str | Path, problem: str) -> None:
        self.input = str(what)
        self.problem = " ".join(str(problem).split())
        super().__init__(f"{self.input}: {self.problem}")


def one_line(text: object) -> str:
    """``text`` with its whitespace (newlines included) collapsed: what a one-line message holds."""
    return " ".join(str(text).split())


def say(exc: BaseException | str, *, prefix: str = "error", out: TextIO | None = None) -> int:
    """Print ``PREFIX: MESSAGE`` (one line) on stderr; returns :data:`EXIT_BAD_INPUT`."""
    print(f"{prefix}: {one_line(exc)}", file=out or sys.stderr)
    return EXIT_BAD_INPUT


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (``PROG: error: WHY (PROG --help says
    more)``) and exit 2, as every other bad input's."""

    def error(self, message: str) -> NoReturn:
        self.exit(
            EXIT_BAD_INPUT,
            f"{self.prog}: error: {one_line(message)} ({self.prog} --help says more)\n",
        )


def check_out(out: Path | None) -> None:
    """``--out`` is a folder that can be made and written, checked before any work (else an
    :class:`InputError` naming it); None: the command's default folder."""
    if out is None:
        return
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(
            f"--out {out}", f"cannot make the folder ({exc.strerror or exc})"
        ) from None
    if not os.access(out, os.W_OK):
        raise InputError(f"--out {out}", "the folder is not writable")
