"""Host memory as the kernel counts it: how much is left, and how many processes its OOM killer
has killed so far.

A worker the kernel kills for memory dies of SIGKILL and says nothing: no Python exception,
no marker on stderr. What tells it from any other SIGKILL is the OOM killer's own count, read
when the worker is launched and again when it has ended: ``oom_kill`` in ``/proc/vmstat``
(the whole host) and, where the run is inside a memory cgroup (a container, a job's slice),
that cgroup's count (``memory.events`` under cgroup v2, ``memory.oom_control`` under v1),
which also rises when the cgroup's own limit is what ran out. Every one of these files is
``key value`` lines, so one reader serves all of them.

Read from ``/proc`` and ``/sys`` only; where they are missing (not Linux) nothing is known and
nothing is claimed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

#: Environment variable: the counter files to read instead of the default ones (separated by
#: ``os.pathsep``), so a test can make the count rise without an OOM kill.
OOM_COUNTERS_ENV = "BOTTLENECK_OOM_COUNTERS"

#: Environment variable: a file in ``/proc/meminfo``'s format to read instead of it (tests).
MEMINFO_ENV = "BOTTLENECK_MEMINFO"

_CGROUP = Path("/sys/fs/cgroup")

#: Where a cgroup's OOM-kill count is, under cgroup v2 and under v1's memory controller.
_CGROUP_COUNTERS = ("memory.events", "memory/memory.oom_control")

#: Exit codes of a process that SIGKILL ended: -9 from ``Popen`` and the fork server, 137
#: (128 + 9) from a wrapper that reports its child's death as a shell would.
SIGKILL_CODES = (-9, 128 + 9)


def _own_cgroup() -> str:
    """This process's cgroup path ('' where unknown): the v2 line ``0::/path``, else v1's
    memory controller's line."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return ""
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3 and (parts[0] == "0" or "memory" in parts[1].split(",")):
            return parts[2].strip("/")
    return ""


def counter_files() -> list[Path]:
    """The OOM-kill counters to read: ``$BOTTLENECK_OOM_COUNTERS`` where set, else
    ``/proc/vmstat`` and the cgroup files that exist (the cgroup mount's root, which inside a
    container is the container's own cgroup, and this process's cgroup below it)."""
    given = os.environ.get(OOM_COUNTERS_ENV)
    if given is not None:
        return [Path(p) for p in given.split(os.pathsep) if p]
    files = [Path("/proc/vmstat")]
    own = _own_cgroup()
    for name in _CGROUP_COUNTERS:
        head, _, tail = name.rpartition("/")
        root = _CGROUP / head if head else _CGROUP
        for folder in dict.fromkeys([root, root / own if own else root]):
            path = folder / tail
            if path.is_file() and path not in files:
                files.append(path)
    return files


def _field(path: Path, key: str) -> int | None:
    """The integer after ``key`` in a file of ``key value`` lines (None: unreadable, absent)."""
    try:
        text = path.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].rstrip(":") == key:
            try:
                return int(parts[1])
            except ValueError:
                return None
    return None


def oom_kills() -> tuple[int | None, ...]:
    """The OOM-kill count of each file of :func:`counter_files` (None where unreadable)."""
    return tuple(_field(path, "oom_kill") for path in counter_files())


def rose(before: tuple[int | None, ...] | None, after: tuple[int | None, ...]) -> bool:
    """Whether any count read both times is higher the second time."""
    if not before or len(before) != len(after):
        return False
    return any(
        b is not None and a is not None and a > b for b, a in zip(before, after, strict=True)
    )


def _meminfo_kib(key: str) -> int | None:
    return _field(Path(os.environ.get(MEMINFO_ENV) or "/proc/meminfo"), key)


def _cgroup_room() -> int | None:
    """Bytes the memory cgroup still lets this process's cgroup take (limit less usage), or
    None where no limit is set or none can be read."""
    own = _own_cgroup()
    pairs = (
        ("memory.max", "memory.current"),
        ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes"),
    )
    for limit_name, usage_name in pairs:
        for folder in dict.fromkeys([_CGROUP, _CGROUP / own if own else _CGROUP]):
            try:
                limit = (folder / limit_name).read_text().strip()
                usage = int((folder / usage_name).read_text().strip())
            except (OSError, ValueError):
                continue
            if limit.isdigit() and int(limit) < 2**60:  # v1 writes "no limit" as ~2**63
                return max(0, int(limit) - usage)
    return None


@dataclass(frozen=True)
class HostMemory:
    """The host's memory as the kernel reports it (bytes; None: not known here)."""

    total: int | None
    """MemTotal."""
    available: int | None
    """MemAvailable, or less where a memory cgroup's limit leaves less."""

    @classmethod
    def now(cls) -> HostMemory:
        total = _meminfo_kib("MemTotal")
        avail = _meminfo_kib("MemAvailable")
        room = _cgroup_room()
        available = avail * 1024 if avail is not None else None
        if room is not None:
            available = room if available is None else min(available, room)
        return cls(total * 1024 if total is not None else None, available)

    def said(self) -> str:
        """``125.8 GiB of host memory, 120.1 GiB available`` (what is known of it)."""
        parts = []
        if self.total is not None:
            parts.append(f"{gib(self.total)} of host memory")
        if self.available is not None:
            parts.append(f"{gib(self.available)} available")
        return ", ".join(parts) or "host memory unknown"


def gib(n: float) -> str:
    """Bytes as ``12.3 GiB`` (``0.01 GiB`` at the least, so a small size never reads 0)."""
    return f"{max(n / 2**30, 0.01):.3g} GiB" if n < 100 * 2**30 else f"{n / 2**30:,.0f} GiB"


@dataclass(frozen=True)
class OomWatch:
    """What is known of a worker's memory when it is launched, to say afterwards whether the
    kernel's OOM killer ended it."""

    before: tuple[int | None, ...]
    """The OOM-kill counts at the launch."""
    memory: HostMemory
    """The host's memory at the launch."""
    size: str = ""
    """The size it ran at, as a user sets it (``size=full``), with its estimate where known."""

    @classmethod
    def start(cls, size: str = "") -> OomWatch:
        return cls(oom_kills(), HostMemory.now(), size)

    def killed(self, rc: int) -> str:
        """Why the worker ended, when a SIGKILL came while the OOM-kill count rose (the
        kernel's OOM killer), else ''."""
        if rc not in SIGKILL_CODES:
            return ""
        after = oom_kills()
        if not rose(self.before, after):
            return ""
        counts = ", ".join(f"{b} -> {a}" for b, a in zip(self.before, after, strict=True) if b != a)
        at = f" at {self.size}" if self.size else ""
        return (
            f"the kernel's OOM killer ended it (SIGKILL while the OOM-kill count rose, "
            f"{counts}): host memory ran out{at} ({self.memory.said()} at its launch)"
        )
