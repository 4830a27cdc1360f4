"""One opener of an nsys report, whatever form it comes in: ``.sqlite``, ``.sqlite.xz``,
``.sqlite.cols.xz`` (:mod:`analysis.packed_export`) or ``.nsys-rep`` (exported with the nsys
found). ``diagnose``, ``score`` and the tools table all open reports through
:func:`open_report`, so a file that cannot be read is one :class:`ExportError` (an
:class:`~harness.core.errors.InputError`: one line naming the report and the problem) however
it fails: missing, empty, truncated, corrupt, not xz, not SQLite, not an nsys export.

A local stand-in for ``analysis.open_export`` (issue 48 item 2): when that lands, the body of
:func:`sqlite_of` becomes a call to it and the error mapping stays here.
"""

from __future__ import annotations

import lzma
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from analysis.trace import Trace, TraceError, open_trace, unxz
from harness.core import nsys as nsys_mod
from harness.core.errors import InputError

__all__ = ["ExportError", "open_report", "sqlite_of"]

#: The suffixes of a compressed export (``unxz`` reads both).
XZ_SUFFIX = ".xz"
REPORT_SUFFIX = ".nsys-rep"
#: How long one ``nsys export`` of a ``.nsys-rep`` may take.
EXPORT_TIMEOUT_S = 900


class ExportError(InputError):
    """A report that cannot be read as an nsys export; ``str()`` is ``REPORT: PROBLEM``."""


def _problem(exc: BaseException, *paths: Path) -> str:
    """The error's text without the file name(s) it starts with (the caller names the report
    the user gave, not a temporary file)."""
    text = str(exc) or type(exc).__name__
    for p in paths:
        text = text.removeprefix(f"{p}: ").removeprefix(f"{p} ")
    return text


def _check_file(path: Path) -> None:
    if not path.exists():
        raise ExportError(path, "no such file")
    if not path.is_file():
        raise ExportError(path, "not a regular file")
    if path.stat().st_size == 0:
        raise ExportError(path, "empty file, not an nsys export")


def _decompress(path: Path, tmp: Path) -> Path:
    """An xz-compressed (or packed) export decompressed into ``tmp``."""
    try:
        return unxz(path, tmp)
    except (lzma.LZMAError, EOFError) as exc:  # EOFError: cut short (a truncated copy)
        why = "truncated" if isinstance(exc, EOFError) else "corrupt or not xz"
        raise ExportError(path, f"not a readable .xz file ({why}: {exc})") from None
    except (ValueError, KeyError, IndexError, TypeError) as exc:  # a packed export's header
        raise ExportError(
            path, f"not a readable packed export ({type(exc).__name__}: {exc})"
        ) from None


def _nsys_export(path: Path, tmp: Path) -> Path:
    """A ``.nsys-rep`` exported to SQLite with the nsys found."""
    found = nsys_mod.find(None)
    if found is None:
        raise ExportError(path, "exporting a .nsys-rep needs nsys, and none was found")
    out = tmp / (path.stem + ".sqlite")
    try:
        proc = subprocess.run(
            nsys_mod.export_command(found, path, out),
            capture_output=True,
            text=True,
            timeout=EXPORT_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ExportError(path, f"nsys export took over {EXPORT_TIMEOUT_S} s") from None
    if proc.returncode != 0 or not out.is_file():
        said = (proc.stdout + proc.stderr).strip()[-400:]
        raise ExportError(path, f"nsys export failed (exit {proc.returncode}): {said}")
    return out


@contextmanager
def sqlite_of(path: Path, tmp: Path) -> Iterator[Path]:
    """The SQLite export of report ``path``: the file itself (unchecked: :func:`open_report`
    checks it), or one decompressed or exported into ``tmp`` (removed on leaving); raises
    :class:`ExportError` when that fails."""
    path = Path(path)
    if path.suffix not in (XZ_SUFFIX, REPORT_SUFFIX):
        yield path  # read as it is: open_trace says what is wrong with it
        return
    _check_file(path)
    db = _decompress(path, tmp) if path.suffix == XZ_SUFFIX else _nsys_export(path, tmp)
    try:
        yield db
    finally:
        db.unlink(missing_ok=True)


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
            raise ExportError(path, _problem(exc, db, path)) from None
