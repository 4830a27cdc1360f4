"""The one opener of an nsys export, whatever form it comes in.

An export reaches the suite as a ``.sqlite`` file, xz-compressed (``.sqlite.xz``, as a capture
comes), packed column by column (``.sqlite.cols.xz``, as the corpus and the test fixtures keep
them: :mod:`analysis.packed_export`) or as the report nsys wrote (``.nsys-rep``, exported with nsys
here). :func:`sqlite_export` turns any of them into a SQLite file and :func:`open_export` into one
read-only :class:`~analysis.trace_db.Trace`; whatever is wrong with the file is one
:class:`~analysis.trace_db.ExportError` naming it and the problem in one line, never a traceback
of the layer that noticed (lzma, json, numpy, sqlite3, subprocess). The harness's commands open
exports through here too (``harness.judge.export``), so every command says a problem the same way.
"""

from __future__ import annotations

import lzma
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from analysis import packed_export
from analysis.trace_db import ExportError, Trace, TraceError, open_trace, sqlite_name

__all__ = ["ExportError", "NsysPath", "open_export", "sqlite_export"]

#: The suffix of a compressed export (a plain xz file or a packed one): decompressed first.
XZ_SUFFIX = ".xz"
#: The suffix of a report nsys writes (exported to SQLite before it is read).
REPORT_SUFFIX = ".nsys-rep"
#: How long an ``nsys export`` of one report may take.
EXPORT_TIMEOUT_S = 900

#: The nsys binary, or a function that finds it (called only when a report must be exported).
NsysPath = str | Path | Callable[[], str | Path | None] | None


@contextmanager
def open_export(path: str | Path, *, nsys: NsysPath = None) -> Iterator[Trace]:
    """The export at ``path`` opened read-only, for the ``with`` block (:func:`sqlite_export`
    says how each form is read; its temporary folder is removed when the block ends). The
    Trace's ``source`` is ``path``, its ``path`` the SQLite file read.

    Raises :class:`ExportError` naming ``path`` and the problem: missing, not a regular file,
    empty, a truncated or corrupt xz stream or packed container, not SQLite, truncated, no nsys
    tables, a report nsys could not export. A query that later finds the file corrupt raises
    :class:`~analysis.trace_db.TraceError`, an ExportError too."""
    src = Path(path)
    with (
        tempfile.TemporaryDirectory(prefix="bottleneck-export-") as tmp,
        sqlite_export(src, Path(tmp), nsys=nsys) as db,
    ):
        try:
            trace = open_trace(db, source=src)
        except TraceError as exc:
            raise ExportError(src, exc.problem) from exc
        with trace:
            yield trace


@contextmanager
def sqlite_export(path: str | Path, into: Path, *, nsys: NsysPath = None) -> Iterator[Path]:
    """The SQLite file of the export at ``path``: the file itself when its name ends neither in
    ``.xz`` nor ``.nsys-rep`` (unchecked: :func:`~analysis.trace_db.open_trace` says what is
    wrong with it), else one decompressed, or exported with ``nsys`` (the binary; a callable
    returning it, called only then; None: ``nsys`` on the PATH), into ``into`` and removed on
    leaving. Raises :class:`ExportError` naming ``path`` when that fails."""
    src = Path(path)
    if src.suffix not in (XZ_SUFFIX, REPORT_SUFFIX):
        yield src
        return
    _check_file(src)
    db = _decompressed(src, into) if src.suffix == XZ_SUFFIX else _exported(src, into, nsys)
    try:
        yield db
    finally:
        db.unlink(missing_ok=True)


def _check_file(path: Path) -> None:
    if not path.exists():
        raise ExportError(path, "no such file")
    if not path.is_file():
        raise ExportError(path, "not a regular file")
    if path.stat().st_size == 0:
        raise ExportError(path, "empty file, not an nsys export")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _decompressed(src: Path, into: Path) -> Path:
    """The xz stream at ``src`` (a SQLite file or a packed container inside) as a SQLite file
    in ``into``."""
    try:
        return packed_export.decompress(src, into / sqlite_name(src))
    except (lzma.LZMAError, EOFError) as exc:  # EOFError: cut short (a truncated copy)
        why = "truncated" if isinstance(exc, EOFError) else "corrupt or not xz"
        raise ExportError(src, _one_line(f"not a readable .xz file ({why}: {exc})")) from None
    except OSError as exc:
        raise ExportError(src, f"cannot be decompressed ({exc.strerror or exc})") from None
    except Exception as exc:  # a damaged container fails in json, numpy or sqlite3
        problem = _one_line(f"{type(exc).__name__}: {exc}")
        raise ExportError(src, f"not a readable packed export ({problem})") from None


def _exported(src: Path, into: Path, nsys: NsysPath) -> Path:
    """The report at ``src`` exported to SQLite in ``into`` by nsys."""
    binary = nsys() if callable(nsys) else nsys
    binary = binary or shutil.which("nsys")
    if not binary:
        raise ExportError(src, "exporting a .nsys-rep needs nsys, and none was found")
    out = into / (src.name.removesuffix(REPORT_SUFFIX) + ".sqlite")
    cmd = [str(binary), "export", "--type=sqlite", f"--output={out}", "--force-overwrite=true"]
    cmd += ["--quiet=true", str(src)]
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=EXPORT_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise ExportError(src, f"nsys export took over {EXPORT_TIMEOUT_S} s") from None
    except OSError as exc:
        raise ExportError(src, f"nsys export did not run ({exc})") from None
    if proc.returncode != 0 or not out.is_file():
        said = _one_line((proc.stdout + proc.stderr).strip()[-400:])
        raise ExportError(src, f"nsys export failed (exit {proc.returncode}): {said}")
    return out
