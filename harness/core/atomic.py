"""Atomic writes: a finished result is either fully on disk or not there at all.

Everything the harness writes goes to a temporary file in the same folder and is renamed into
place, so a crash, a Ctrl-C or a full disk never leaves a half-written table behind. The file
gets the mode any new file gets under the process's umask (0644 usually), as ``open()`` would
give it: ``tempfile.mkstemp`` makes its file 0600, which left the run's CSVs unreadable to
other users beside a 0644 report.html.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


class ResultWriteError(OSError):
    """Writing a result failed (disk full, read-only folder); earlier results are intact."""


def umask() -> int:
    """The process's umask, read without changing it (``/proc/self/status`` on Linux; elsewhere
    ``os.umask`` set and restored, once: another thread creating a file in between would get
    the wrong mode)."""
    global _UMASK
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    if _UMASK is None:
        _UMASK = os.umask(0o022)
        os.umask(_UMASK)
    return _UMASK


_UMASK: int | None = None


def _write(path: Path, writer: Callable[[Path], None]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~umask())
    finally:
        os.close(fd)
    try:
        writer(Path(tmp))
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise ResultWriteError(
            exc.errno, f"could not write {path}: {exc.strerror or exc}; earlier results are intact"
        ) from exc
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: Path | str, text: str) -> None:
    """Write ``text`` to ``path`` atomically."""

    def w(tmp: Path) -> None:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())

    _write(Path(path), w)


def write_bytes(path: Path | str, data: bytes, *, shared: bool = True) -> None:
    """Write ``data`` to ``path`` atomically (``shared``: kept for its callers; every file now
    gets the umask's mode)."""
    del shared

    def w(tmp: Path) -> None:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())

    _write(Path(path), w)


def write_json(path: Path | str, data: Any) -> None:
    """Write ``data`` as indented JSON atomically."""
    write_text(path, json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def write_frame(path: Path | str, frame: Any) -> None:
    """Write a DataFrame as CSV or Parquet (by suffix) atomically."""
    path = Path(path)
    if path.suffix == ".csv":
        _write(path, lambda tmp: frame.to_csv(tmp, index=False))
    elif path.suffix == ".parquet":
        _write(path, lambda tmp: frame.to_parquet(tmp, index=False))
    else:
        raise ValueError(f"unsupported table format: {path.suffix}")
