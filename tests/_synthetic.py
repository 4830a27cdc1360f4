"""Small nsys-shaped exports of a training loop written step by step, with known answers.

``Loop`` plays one host thread and one GPU stream forward in time the way CUDA does: a launch
call takes its time on the host and its kernel starts after the launch latency, once the stream
is free; a blocking call (a sync, a device-to-host read) returns when the GPU work it waits for
is done; a pageable host-to-device copy holds the host until the copy has run. It records what
nsys would: CUDA API rows, kernel and memcpy rows (correlated), OS-runtime file reads for input
work, in the 2025 export's table and column names. Tests write loops whose step times follow
from the numbers given, and compare what the detectors and the time model say with them.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

PID, TID = 4242, 4242
GTID = (1 << 56) | (PID << 24) | TID
LAUNCH = "cudaLaunchKernel_v7000"
SYNC = "cudaStreamSynchronize_v3020"
MEMCPY = "cudaMemcpyAsync_v3020"
READ = "read"


@dataclass
class Loop:
    """One host thread driving one stream; times in ns."""

    latency_ns: int = 3_000
    """Launch call start to kernel start when the stream is free."""
    t: int = 1_000_000
    gpu_free: int = 0
    api: list[tuple[int, int, str, int]] = field(default_factory=list)
    kernels: list[tuple[int, int, str, int]] = field(default_factory=list)
    copies: list[tuple[int, int, int, int, int, int]] = field(default_factory=list)
    osrt: list[tuple[int, int, str]] = field(default_factory=list)
    short: dict[str, str] = field(default_factory=dict)
    """A kernel's short name by its full one (default: the full name), as CUPTI shortens
    template instances (``vectorized_elementwise_kernel``)."""
    _corr: int = 0

    def _next(self) -> int:
        self._corr += 1
        return self._corr

    def host(self, ns: int, *, reads: bool = False) -> None:
        """Host work without CUDA calls (``reads``: an input read, seen as an OS-runtime read)."""
        if reads:
            self.osrt.append((self.t, self.t + ns, READ))
        self.t += ns

    def launch(self, kernel_ns: int, name: str = "k", call_ns: int = 10_000) -> None:
        c = self._next()
        start = max(self.t + self.latency_ns, self.gpu_free)
        self.kernels.append((start, start + kernel_ns, name, c))
        self.gpu_free = start + kernel_ns
        self.api.append((self.t, self.t + call_ns, LAUNCH, c))
        self.t += call_ns

    def h2d(self, nbytes: int, copy_ns: int, *, pageable: bool, call_ns: int = 10_000) -> None:
        """A host-to-device copy; a pageable one keeps the host in the call until it is done."""
        c = self._next()
        start = max(self.t + self.latency_ns, self.gpu_free)
        end = start + copy_ns
        self.copies.append((start, end, nbytes, 1, 0 if pageable else 1, c))
        self.gpu_free = end
        done = max(self.t + call_ns, end + 1_000) if pageable else self.t + call_ns
        self.api.append((self.t, done, MEMCPY, c))
        self.t = done

    def sync(self, call_ns: int = 2_000, post_ns: int = 1_000) -> None:
        """cudaStreamSynchronize: returns ``post_ns`` after the stream runs dry."""
        end = max(self.t + call_ns, self.gpu_free + post_ns)
        self.api.append((self.t, end, SYNC, self._next()))
        self.t = end

    def write(self, path: Path) -> Path:
        """The export at ``path``."""
        db = sqlite3.connect(path)
        names = sorted(
            {a[2] for a in self.api}
            | {k[2] for k in self.kernels}
            | {READ}
            | set(self.short.values())
        )
        ids = {n: i for i, n in enumerate(names, 1)}
        db.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
        db.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, n) for n, i in ids.items()])
        _enums(db)
        db.execute(
            "CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT"
            " NULL, eventClass INTEGER NOT NULL, globalTid INTEGER, correlationId INTEGER,"
            " nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL, callchainId INTEGER)"
        )
        db.executemany(
            "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 0, ?, ?, ?, 0, NULL)",
            [(s, e, GTID, c, ids[n]) for s, e, n, c in self.api],
        )
        db.execute(
            "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT"
            " NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT"
            " NULL, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER NOT NULL,"
            " shortName INTEGER NOT NULL)"
        )
        db.executemany(
            "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, 1, 7, ?, ?, ?, ?)",
            [
                (s, e, c, GTID & ~0xFFFFFF, ids[n], ids[self.short.get(n, n)])
                for s, e, n, c in self.kernels
            ],
        )
        db.execute(
            "CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT"
            " NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT"
            " NULL, correlationId INTEGER, globalPid INTEGER, bytes INTEGER NOT NULL, copyKind"
            " INTEGER NOT NULL, srcKind INTEGER, dstKind INTEGER)"
        )
        db.executemany(
            "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?, ?, 0, 1, 7, ?, ?, ?, ?, ?, 2)",
            [(s, e, c, GTID & ~0xFFFFFF, b, k, src) for s, e, b, k, src, c in self.copies],
        )
        db.execute(
            "CREATE TABLE OSRT_API (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass"
            " INTEGER NOT NULL, globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT"
            " NULL, returnValue INTEGER NOT NULL, nestingLevel INTEGER, callchainId INTEGER)"
        )
        db.executemany(
            "INSERT INTO OSRT_API VALUES (?, ?, 27, ?, 0, ?, 0, 0, NULL)",
            [(s, e, GTID, ids[n]) for s, e, n in self.osrt],
        )
        db.commit()
        db.close()
        return path


def _enums(db: sqlite3.Connection) -> None:
    db.execute("CREATE TABLE ENUM_CUDA_MEMCPY_OPER (id INTEGER PRIMARY KEY, name TEXT, label TEXT)")
    db.executemany(
        "INSERT INTO ENUM_CUDA_MEMCPY_OPER VALUES (?, ?, ?)",
        [(1, "CUDA_MEMCPY_KIND_HTOD", "Host-to-Device"), (2, "CUDA_MEMCPY_KIND_DTOH", "")],
    )
    db.execute("CREATE TABLE ENUM_CUDA_MEM_KIND (id INTEGER PRIMARY KEY, name TEXT, label TEXT)")
    db.executemany(
        "INSERT INTO ENUM_CUDA_MEM_KIND VALUES (?, ?, ?)",
        [
            (0, "CUDA_MEMOPR_MEMORY_KIND_PAGEABLE", "Pageable"),
            (1, "CUDA_MEMOPR_MEMORY_KIND_PINNED", "Pinned"),
            (2, "CUDA_MEMOPR_MEMORY_KIND_DEVICE", "Device"),
        ],
    )
