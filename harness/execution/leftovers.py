"""Nothing a run starts outlives it: a temporary folder of its own, and a mark on its processes.

Why: a stopped or killed process cannot clean up after itself. torch's DataLoader workers
leave ``pymp-*`` folders, ``torch.distributed.run`` a ``torchelastic_*`` folder per launch
(even when it ends well), nsys its ``nvidia/`` and injection files; and the agent
``nsys --start-agent`` that ``nsys profile`` starts is a daemon (its parent is PID 1), out of
reach of the worker's process group and of its descendants, so an interrupt could leave it
running. :func:`contained` points ``TMPDIR`` (which Python's :mod:`tempfile`, torch and nsys
all follow) at a folder of the run's own, sets :data:`MARK_ENV` in the environment every
process of the run inherits, and on the way out stops whatever still carries the mark and
removes the folder.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import re
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from harness.core import signals

#: The environment variable each process of a run inherits: how a straggler is told apart.
MARK_ENV = "BOTTLENECK_RUN_MARK"
#: The run folder's name before its random part: short, since the sockets inside (the fork
#: server's, the gate's, nsys's) must fit a Unix socket path (108 bytes).
PREFIX = "bns-"
#: Seconds a straggler gets to end on SIGTERM before SIGKILL.
GRACE_S = 3.0


def marked(mark: str, key: str = MARK_ENV) -> list[int]:
    """The live processes (not this one) whose environment holds ``key=mark``, from /proc
    (none where there is no /proc, or for processes not ours to read)."""
    needle = f"{key}={mark}".encode()
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        if int(proc.name) == os.getpid():
            continue
        try:
            if needle in (proc / "environ").read_bytes().split(b"\0") and not _zombie(proc):
                found.append(int(proc.name))
        except OSError:  # gone meanwhile, or another user's
            continue
    return found


def _zombie(proc: Path) -> bool:
    """An ended process its parent has not reaped yet: nothing left to stop."""
    try:
        return proc.joinpath("stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def stop_marked(mark: str, grace_s: float = GRACE_S) -> list[int]:
    """SIGTERM (and SIGCONT, for a paused one) every process carrying ``mark``, SIGKILL those
    left after ``grace_s``; returns the pids found."""
    found = marked(mark)
    for sig in (signal.SIGTERM, signal.SIGCONT):
        for pid in found:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
    deadline = time.monotonic() + grace_s
    while (left := marked(mark)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return found


#: Where Inductor keeps its compiled kernels: by default under the temporary folder, which a
#: run's own folder would make a cold cache every run (and remove at its end).
INDUCTOR_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"


def inductor_cache_dir() -> str:
    """Inductor's default cache folder for this user under the temporary folder in effect now
    (as torch names it, without importing torch: the parent never does)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid_{os.getuid()}"
    return os.path.join(
        tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user)
    )


@contextlib.contextmanager
def contained(say: Callable[[str], None] | None = None) -> Iterator[Path]:
    """The block's child processes get a temporary folder of their own (``TMPDIR``, also this
    process's :mod:`tempfile` folder) and the mark; on leaving, however the block ends, the
    processes still carrying the mark are stopped and the folder removed (a stop signal then
    waits for that clean-up to end). Yields the folder."""
    root = Path(tempfile.mkdtemp(prefix=PREFIX))
    mark = f"{os.getpid()}-{os.urandom(6).hex()}"
    saved = {key: os.environ.get(key) for key in ("TMPDIR", MARK_ENV, INDUCTOR_CACHE_ENV)}
    saved_tempdir = tempfile.tempdir
    # the compiler's cache is no leftover: it stays where it would be without the run's folder
    os.environ.setdefault(INDUCTOR_CACHE_ENV, inductor_cache_dir())
    os.environ["TMPDIR"], os.environ[MARK_ENV] = str(root), mark
    tempfile.tempdir = str(root)
    try:
        yield root
    finally:
        with signals.deferred():
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            tempfile.tempdir = saved_tempdir
            left = stop_marked(mark)
            if left and say is not None:
                say(f"stopped {len(left)} leftover processes of this run (pids {left})")
            shutil.rmtree(root, ignore_errors=True)
