"""A worker's waits on the parent and on its peer ranks: the file gate before the warm-up, the
ranks' set-up markers, and the rendezvous store of ranks the harness forked.

Files and a TCP store, never a collective: an NCCL barrier would spin on the GPU beside another
worker's window. ``spec`` is the worker's :class:`harness.execution.worker.WorkerSpec`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.core import runfolder as rf
from harness.core.atomic import write_json

#: Set by the parent for forked ranks: the file in which rank 0 says the port of the store it
#: hosts (:func:`forked_rendezvous`).
RDZV_FILE_ENV = "BOTTLENECK_RDZV_FILE"

#: How often a worker held at the gate looks for ``.go`` (seconds).
GATE_POLL_S = 0.005


def wait_at_gate(spec: Any, rank: int, say: Callable[[rf.WorkerState], None]) -> float:
    """Rank 0 says 'held' (``say``); every rank waits until the parent creates ``.go``; the
    seconds waited. Raises RuntimeError when the parent is gone or ``gate_timeout_s`` has
    passed."""
    go = Path(spec.out_dir) / rf.GO
    if rank == 0:
        say(rf.WorkerState.HELD)
    t0 = time.perf_counter()
    _wait_for(spec, go.exists, "held before the warm-up", GATE_POLL_S)
    return time.perf_counter() - t0


def ranks_ready(spec: Any, rank: int, world: int) -> None:
    """A rank of a gated distributed worker has set up: it says so with a file, and rank 0
    waits until every rank has (a file poll, not a collective: nothing runs on the GPU while
    the unit waits), so that 'held' means the whole unit has set up."""
    folder = Path(spec.out_dir)
    (folder / rf.ready_marker(rank)).touch()
    if rank == 0:
        names = [folder / rf.ready_marker(r) for r in range(world)]
        every = lambda: all(p.exists() for p in names)  # noqa: E731
        _wait_for(spec, every, "waiting for the other ranks' set-up", GATE_POLL_S)


def _wait_for(spec: Any, done: Any, what: str, poll_s: float) -> None:
    """Poll ``done()`` until true; RuntimeError once the harness is gone or after
    ``gate_timeout_s``."""
    t0 = checked = time.perf_counter()
    while not done():
        now = time.perf_counter()
        if now - t0 > spec.gate_timeout_s:
            raise RuntimeError(f"{what} for {spec.gate_timeout_s:g} s: no go")
        if now - checked > 1.0:
            checked = now
            if spec.parent_pid is not None and not rf.pid_alive(spec.parent_pid):
                raise RuntimeError("the harness that held this worker is gone")
        time.sleep(poll_s)


def forked_rendezvous(spec: Any, dist: Any, rank: int, world: int) -> Any:
    """For ranks the harness forked (``BOTTLENECK_RDZV_FILE`` set): rank 0 starts the TCP store
    torchrun's agent would host, on a port the kernel picks, and writes that port to the file;
    the others wait for it. Sets ``MASTER_PORT``; returns this rank's handle on the store (rank
    0: the server, kept alive until :func:`leave_rendezvous`), or None under torchrun (no file:
    nothing to do)."""
    path = os.environ.get(RDZV_FILE_ENV)
    if not path:
        return None
    timeout = dt.timedelta(seconds=spec.gate_timeout_s)
    host = os.environ.get("MASTER_ADDR", "127.0.0.1")
    if rank == 0:
        store = dist.TCPStore(
            host, 0, world, is_master=True, timeout=timeout, wait_for_workers=False
        )
        port = int(store.port)
        write_json(Path(path), {"port": port, "pid": os.getpid()})
    else:
        found: dict[str, Any] = {}

        def published() -> bool:
            with contextlib.suppress(OSError, ValueError):
                found.update(rf.read_json(path) or {})
            return "port" in found

        _wait_for(spec, published, "waiting for rank 0's rendezvous store", GATE_POLL_S)
        port = int(found["port"])
        store = dist.TCPStore(host, port, world, is_master=False, timeout=timeout)
    os.environ["MASTER_PORT"] = str(port)
    return store


#: The forked ranks' store key counting the ranks done with their process group.
DONE_KEY = "harness/ranks_done"
#: The longest rank 0 keeps its store up for the other ranks once done itself (seconds).
LEAVE_WAIT_S = 60.0


def leave_rendezvous(store: Any, rank: int, world: int) -> None:
    """Forked ranks, their process group destroyed: each counts itself in the store, and rank
    0, which hosts it, leaves once every rank has (at most ``LEAVE_WAIT_S``), so the store
    outlives every rank's use of it, as torchrun's agent's does. None (torchrun): nothing."""
    if store is None:
        return
    with contextlib.suppress(RuntimeError):  # the store gone: the harness stops the unit
        store.add(DONE_KEY, 1)
        deadline = time.monotonic() + LEAVE_WAIT_S
        while rank == 0 and store.add(DONE_KEY, 0) < world and time.monotonic() < deadline:
            time.sleep(GATE_POLL_S)
