"""The committed nsys exports, kept xz-compressed under tests/data to keep the repository small.

``sqlite_fixture(name)`` gives the path of ``tests/data/<name>.sqlite`` decompressed into a
per-user cache under the system temp folder, extracted once and shared by every test process:
the cache entry is keyed by a hash of the ``.xz`` file, so a changed fixture is extracted anew,
and written atomically (temporary file + rename), so two pytest runs at once never read a
half-written export. The cached file is made read-only: tests read it in place and copy it
(``shutil.copyfile``) before anything writes to it.
"""

from __future__ import annotations

import hashlib
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
    """Path of ``<data_dir>/<name>.sqlite.xz`` decompressed (read-only, do not write to it).

    The file keeps the name ``<name>.sqlite`` (tests use its stem and name), inside a folder
    named after the first 16 hex digits of the ``.xz`` file's SHA-256.
    """
    xz = Path(data_dir) / f"{name}.sqlite.xz"
    if not xz.is_file():  # a packed export (analysis/packed_export.py), as the corpus keeps them
        xz = Path(data_dir) / f"{name}{SUFFIX}"
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
