"""The process's allocator set for reading a big export: temporaries reused, not mapped afresh.

Why: a diagnosis of a 1 GB export makes hundreds of numpy temporaries of tens of MB. With
glibc's defaults each one above the (dynamic) mmap threshold is a fresh anonymous map that the
kernel zeroes page by page and that is unmapped when freed. Kept in the heap (:func:`tune`),
a freed temporary is handed to the next one as it is. Nothing read changes,
only where the memory comes from; ``harness diagnose --heap default`` leaves the allocator as
it is.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from dataclasses import dataclass

__all__ = ["HeapSettings", "tune"]

# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3


@dataclass(frozen=True, kw_only=True)
class HeapSettings:
    """What :func:`tune` sets."""

    #: Blocks below this come from the heap (glibc's largest: 32 MiB on 64-bit); setting it
    #: also stops glibc from moving it.
    mmap_threshold_bytes: int = 32 << 20
    #: Free memory at the heap's top kept rather than returned to the kernel (mallopt takes
    #: a C int: at most 2 GiB - 1).
    trim_threshold_bytes: int = 2**31 - 1
    #: Extra heap asked for at each growth, so that a run of growing temporaries grows it
    #: seldom.
    top_pad_bytes: int = 256 << 20
    #: Whether numpy advises big arrays onto transparent huge pages; None leaves numpy's own
    #: choice (on), which was the faster on this project's box (docs/detectors.md, Speed).
    hugepages: bool | None = None

    def __post_init__(self) -> None:
        if not 0 < self.mmap_threshold_bytes <= 32 << 20:
            raise ValueError("mmap_threshold_bytes must be in (0, 32 MiB]")
        for name in ("trim_threshold_bytes", "top_pad_bytes"):
            if not 0 <= getattr(self, name) < 2**31:
                raise ValueError(f"{name} must be in [0, 2 GiB)")


def tune(settings: HeapSettings | None = None) -> dict[str, bool]:
    """Apply ``settings`` to this process; which parts took (no glibc: the malloc ones do not;
    a numpy without the switch: the huge-page one does not)."""
    s = settings or HeapSettings()
    done = {"malloc": False, "hugepages": False}
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        mallopt = getattr(libc, "mallopt", None)
    except OSError:
        mallopt = None
    if mallopt is not None:
        done["malloc"] = all(
            mallopt(param, value) == 1
            for param, value in (
                (_M_MMAP_THRESHOLD, s.mmap_threshold_bytes),
                (_M_TRIM_THRESHOLD, s.trim_threshold_bytes),
                (_M_TOP_PAD, s.top_pad_bytes),
            )
        )
    if s.hugepages is None:
        return done
    try:
        from numpy._core.multiarray import _set_madvise_hugepage
    except ImportError:
        return done
    _set_madvise_hugepage(s.hugepages)
    done["hugepages"] = True
    return done
