"""The harness's side of opening an nsys report: :func:`analysis.export.sqlite_export` does the
opening (``.sqlite``, ``.sqlite.xz``, ``.sqlite.cols.xz``, ``.nsys-rep``); here nsys is the one
:mod:`harness.core.nsys` finds, and whatever is wrong with a report is one :class:`ExportError`
(an :class:`~harness.core.errors.InputError`: one line naming the report and the problem, exit 2)
however it fails. ``diagnose``, ``score`` and the tools table all open reports through here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from analysis import export as analysis_export
from analysis.trace import Trace, TraceError, open_trace
from harness.core import nsys as nsys_mod
from harness.core.errors import InputError

__all__ = ["ExportError", "open_report", "sqlite_of"]


class ExportError(InputError):
    """A report that cannot be read as an nsys export; ``str()`` is ``REPORT: PROBLEM``."""


def _nsys() -> str | None:
    """The nsys that exports a ``.nsys-rep`` (looked for only then)."""
    found = nsys_mod.find(None)
    return None if found is None else found.path


@contextmanager
def sqlite_of(path: Path, tmp: Path) -> Iterator[Path]:
    """The SQLite export of report ``path``: the file itself (unchecked: :func:`open_report`
    checks it), or one decompressed or exported into ``tmp`` (removed on leaving); raises
    :class:`ExportError` when that fails."""
    path = Path(path)
    with ExitStack() as stack:
        try:
            db = stack.enter_context(analysis_export.sqlite_export(path, tmp, nsys=_nsys))
        except analysis_export.ExportError as exc:
            raise ExportError(path, exc.problem) from None
        yield db


@contextmanager
def open_report(path: Path, tmp: Path) -> Iterator[tuple[Path, Trace]]:
    """(its SQLite file, the open trace) of report ``path``: a :class:`TraceError` raised while
    opening or inside the block (a corrupt page met by a query) becomes :class:`ExportError`
    naming ``path``."""
    path = Path(path)
    with sqlite_of(path, tmp) as db:
        try:
            with open_trace(db) as trace:
                yield db, trace
        except TraceError as exc:
            raise ExportError(path, exc.problem or type(exc).__name__) from None
