"""The one opener of an nsys export, whatever form it comes in.

An export reaches the suite as a ``.sqlite`` file, xz-compressed (``.sqlite.xz``, as a capture
comes), packed column by column (``.sqlite.cols.xz``, as the corpus and the test fixtures keep
them: :mod:`analysis.packed_export`) or as the report nsys wrote (``.nsys-rep``, exported with nsys
here). :func:`open_export` takes any of them and hands back one read-only
:class:`~analysis.trace_db.Trace`; whatever is wrong with the file is one
:class:`~analysis.trace_db.ExportError` naming it and the problem, never a traceback of the
layer that noticed (lzma, json, numpy, sqlite3, subprocess).
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

__all__ = ["ExportError", "NsysPath", "open_export"]

#: The first bytes of an xz stream and of a SQLite file.
_XZ_MAGIC, _SQLITE_MAGIC = b"\xfd7zXZ\x00", b"SQLite format 3\x00"
#: The suffix of a report nsys writes (exported to SQLite before it is read).
REPORT_SUFFIX = ".nsys-rep"
#: How long an ``nsys export`` of one report may take.
EXPORT_TIMEOUT_S = 900

#: The nsys binary, or a function that finds it (called only when a report must be exported).
NsysPath = str | Path | Callable[[], str | Path | None] | None


@contextmanager
def open_export(path: str | Path, *, nsys: NsysPath = None) -> Iterator[Trace]:
    """The export at ``path`` opened read-only, for the ``with`` block: a SQLite file as it is,
    an xz-compressed or packed one decompressed into a temporary folder, a ``.nsys-rep``
    exported there with ``nsys`` (the binary; a callable returning it, called only then; None:
    ``nsys`` on the PATH). The kind is read from the file's first bytes (a report by its
    suffix). The temporary folder is removed when the block ends; the Trace's ``source`` is
    ``path``, its ``path`` the SQLite file read.

    Raises :class:`ExportError` naming ``path`` and the problem: missing, not a regular file,
    empty, a truncated or corrupt xz stream or packed container, not SQLite, truncated, no nsys
    tables, a report nsys could not export. A query that later finds the file corrupt raises
    :class:`~analysis.trace_db.TraceError`, an ExportError too."""
    src = Path(path)
    head = _head(src)
    is_xz = head.startswith(_XZ_MAGIC)
    if not is_xz and (head.startswith(_SQLITE_MAGIC) or not src.name.endswith(REPORT_SUFFIX)):
        with _opened(src, src) as trace:  # SQLite, or what open_trace says is not
            yield trace
        return
    with tempfile.TemporaryDirectory(prefix="bottleneck-export-") as tmp:
        db = _decompressed(src, Path(tmp)) if is_xz else _exported(src, Path(tmp), nsys)
        with _opened(db, src) as trace:
            yield trace


def _head(path: Path) -> bytes:
    """The file's first bytes, or an ExportError when it cannot be read at all."""
    if not path.exists():
        raise ExportError(path, "no such file")
    if not path.is_file():
        raise ExportError(path, "not a regular file")
    try:
        with path.open("rb") as fh:
            head = fh.read(16)
    except OSError as exc:
        raise ExportError(path, f"cannot be read ({exc.strerror or exc})") from exc
    if not head:
        raise ExportError(path, "empty file, not an nsys export")
    return head


@contextmanager
def _opened(db: Path, src: Path) -> Iterator[Trace]:
    try:
        trace = open_trace(db, source=src)
    except TraceError as exc:
        raise ExportError(src, exc.problem) from exc
    with trace:
        yield trace


def _decompressed(src: Path, into: Path) -> Path:
    """The xz stream at ``src`` (a SQLite file or a packed container inside) as a SQLite file
    in ``into``."""
    try:
        return packed_export.decompress(src, into / _sqlite_name(src))
    except EOFError as exc:
        raise ExportError(src, "truncated xz file (the stream ends before its end marker)") from exc
    except lzma.LZMAError as exc:
        raise ExportError(src, f"corrupt xz data ({exc})") from exc
    except OSError as exc:
        raise ExportError(src, f"cannot be decompressed ({exc.strerror or exc})") from exc
    except Exception as exc:  # a damaged container fails in json, numpy or sqlite3
        problem = f"{type(exc).__name__}: {exc}".splitlines()[0]
        raise ExportError(src, f"a damaged packed export ({problem})") from exc


def _sqlite_name(src: Path) -> str:
    name = sqlite_name(src)
    return name if name.endswith(".sqlite") else name + ".sqlite"


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
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ExportError(src, f"nsys export did not run ({exc})") from exc
    if proc.returncode != 0 or not out.is_file():
        said = " ".join((proc.stdout + proc.stderr).split())[-400:]
        raise ExportError(src, f"nsys export failed (exit {proc.returncode}): {said}")
    return out
