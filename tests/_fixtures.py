"""The committed nsys exports, kept packed under tests/data to keep the repository small
(``<name>.sqlite.cols.xz``: :mod:`analysis.packed_export`, lossless).

``sqlite_fixture(name)`` gives the path of ``tests/data/<name>.sqlite`` decompressed into a
per-user cache under the system temp folder, extracted once and shared by every test process:
the cache entry is keyed by a hash of the ``.xz`` file, so a changed fixture is extracted anew,
and written atomically (temporary file + rename), so two pytest runs at once never read a
half-written export. The cached file is made read-only: tests read it in place and copy it
(``shutil.copyfile``) before anything writes to it. ``xz_fixture(name)`` gives the same export
as nsys and ``xz -9e`` would have left it (``<name>.sqlite.xz``, a plain SQLite file inside),
for the tests of that form, cached the same way.
"""

from __future__ import annotations

import hashlib
import lzma
import os
import stat
import tempfile
from pathlib import Path

from analysis.packed_export import SUFFIX
from analysis.trace_db import unxz

DATA = Path(__file__).resolve().parent / "data"

#: Where decompressed fixtures live: per user, so nobody else's files are ever opened.
CACHE = Path(tempfile.gettempdir()) / f"bottleneck-suite-fixtures-{os.getuid()}"


def _cache_dir() -> Path:
    """The cache folder, created private; refuse one that another user made in a shared /tmp."""
    CACHE.mkdir(mode=0o700, exist_ok=True)
    st = CACHE.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise RuntimeError(f"{CACHE}: not a folder owned by this user; remove it and rerun")
    return CACHE


def sqlite_fixture(name: str, data_dir: Path = DATA) -> Path:
    """Path of ``<data_dir>/<name>.sqlite.cols.xz`` (or a plain ``.sqlite.xz``) decompressed
    (read-only, do not write to it).

    The file keeps the name ``<name>.sqlite`` (tests use its stem and name), inside a folder
    named after the first 16 hex digits of the compressed file's SHA-256.
    """
    xz = Path(data_dir) / f"{name}{SUFFIX}"
    if not xz.is_file():  # a plain xz-compressed SQLite file
        xz = Path(data_dir) / f"{name}.sqlite.xz"
    if not xz.is_file():
        raise FileNotFoundError(f"{xz}: no such fixture")
    packed = xz.read_bytes()
    digest = hashlib.sha256(packed).hexdigest()[:16]
    out = _cache_dir() / digest / f"{name}.sqlite"
    if not out.is_file():  # built beside the cache, then moved in whole (os.replace)
        with tempfile.TemporaryDirectory(dir=_cache_dir()) as tmp:
            built = unxz(xz, Path(tmp))  # either kind, as every reader of the exports does
            out.parent.mkdir(parents=True, exist_ok=True)
            os.replace(built, out)
        out.chmod(0o444)
    return out


def xz_fixture(name: str, data_dir: Path = DATA) -> Path:
    """The fixture ``name`` as a plain ``<name>.sqlite.xz`` (its SQLite file, ``xz -9e``), as
    an nsys capture reaches the suite: read-only, cached beside :func:`sqlite_fixture`'s."""
    db = sqlite_fixture(name, data_dir)
    out = db.parent / f"{Path(name).name}.sqlite.xz"
    if not out.is_file():
        tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        tmp.write_bytes(lzma.compress(db.read_bytes(), preset=9 | lzma.PRESET_EXTREME))
        tmp.chmod(0o444)
        os.replace(tmp, out)
    return out
