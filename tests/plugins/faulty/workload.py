"""faulty's workloads (torch).

Imported only where a variant runs (its worker, or the fork server that preloads what workers
need): the package's ``__init__`` holds the metadata the harness reads without torch.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from bottlenecks import phase
from harness.core.atomic import write_text
from scenarios import (
    RunContext,
    Workload,
)

from . import (
    FaultyConfig,
    FaultySize,
)


class Fine(Workload):
    def __init__(
        self, size: FaultySize, ctx: RunContext, delay_s: float, hold: Path | None = None
    ) -> None:
        self.size, self.ctx, self.delay_s, self.hold = size, ctx, delay_s, hold
        self.in_window = False

    def setup(self) -> None:
        self.a = torch.randn(self.size.work, self.size.work, device=self.ctx.device)
        if self.hold is not None and os.environ.get("FAULTY_LEAVE") == "1":
            _leave_behind()

    def start_window(self) -> None:
        self.in_window = True

    def step(self, index: int) -> None:
        with phase("forward"):
            self.a = torch.tanh(self.a @ self.a)
            time.sleep(self.delay_s)
            while self.in_window and self.hold is not None and not self.hold.exists():
                time.sleep(0.05)  # held by the test until it has seen what it waits for


def _leave_behind() -> None:
    """A ``pymp-*`` folder in the temporary folder, and a daemon: a grandchild in a session of
    its own whose parent has exited, re-parented to PID 1 (``nsys --start-agent``'s shape)."""
    import multiprocessing.util

    multiprocessing.util.get_temp_dir()
    code = "import os, time\nif os.fork():\n    os._exit(0)\nos.setsid()\ntime.sleep(3600)\n"
    subprocess.run([sys.executable, "-c", code], check=True, stdin=subprocess.DEVNULL)


def _holds() -> bool:
    """Whether 'slow' holds here: always, or with FAULTY_HOLD_PROFILED=1 only under nsys
    (its NVTX injection is in the environment, also of a worker forked from a traced server)."""
    return os.environ.get("FAULTY_HOLD_PROFILED") != "1" or "NVTX_INJECTION64_PATH" in os.environ


class Crash(Fine):
    def step(self, index: int) -> None:
        raise RuntimeError("deliberate failure in the faulty scenario's crash variant")


class Hang(Fine):
    """Starts two children, then never returns: one in its process group (as a loader worker),
    one in a session of its own (as torchrun starts each rank).

    The children sleep for an hour and never notice their parent dying, so only the harness
    killing the worker's group and its descendants ends them.
    """

    def setup(self) -> None:
        super().setup()
        sleeper = [sys.executable, "-c", "import time; time.sleep(3600)"]
        self.children = [
            subprocess.Popen(sleeper),
            subprocess.Popen(sleeper, start_new_session=True),
        ]
        pid_file = os.environ.get("FAULTY_PID_FILE")
        if pid_file:
            write_text(pid_file, "".join(f"{c.pid}\n" for c in self.children))

    def step(self, index: int) -> None:
        time.sleep(3600)


class Oom(Fine):
    """Asks for 20 GiB in one tensor: beyond any sensible harness.memory_cap_gb in the tests."""

    def step(self, index: int) -> None:
        self.big = torch.empty(20 * 2**30, dtype=torch.uint8, device=self.ctx.device)


class Orphan(Fine):
    """Kills the traced fork server it was forked from (nsys.profile_server: a fork server whose
    parent is nsys), as a server that ends under a running worker would, then finishes
    normally; started any other way it only finishes."""

    def setup(self) -> None:
        super().setup()
        parent = os.getppid()
        if b"harness.execution.forkserver" in _cmdline(parent) and b"nsys" in _cmdline(
            _ppid(parent)
        ):
            os.kill(parent, signal.SIGKILL)


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _ppid(pid: int) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return next(
        (int(line.split()[1]) for line in status.splitlines() if line.startswith("PPid:")), 0
    )


def build(cfg: FaultyConfig, size: FaultySize, variant: str, ctx: RunContext) -> Workload:
    if variant == "orphan":
        return Orphan(size, ctx, 0.0)
    if variant == "crash":
        return Crash(size, ctx, 0.0)
    if variant == "hang":
        return Hang(size, ctx, 0.0)
    if variant == "oom":
        return Oom(size, ctx, 0.0)
    if variant == "slow":
        hold = os.environ.get("FAULTY_HOLD_FILE")
        delay_s = float(os.environ.get("FAULTY_SLOW_S", "1.5"))
        return Fine(size, ctx, delay_s, Path(hold) if hold and _holds() else None)
    return Fine(size, ctx, 0.02 if variant == "baseline" else 0.0)
