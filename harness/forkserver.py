"""Fork server for unprofiled workers: import torch once, fork a fresh process per worker run.

Every worker process spends seconds importing torch, the scenarios and their dependencies
before it does anything (about 4 s each on the H100 machine, 2-4 s on a 2-core CPU box; see
``timings.csv``). The fork server pays that once per ``harness run``: it imports what a worker
needs, never touches CUDA, and forks one child per worker run. Each child is still a process of
its own (its own session and process group, its own CUDA context, created after the fork), runs
``harness.worker.main`` and exits; the parent times and kills it exactly as a spawned worker.

Profiled workers are not forked: nsys has to start the process it traces. torchrun launches
(``world_size`` > 1) are not forked either.

Protocol (one JSON object per line): the parent writes ``{"argv", "stdout", "stderr", "env"}``
to the server's stdin; the server answers on its stdout ``{"pid": N}`` at once and
``{"pid": N, "exit": CODE}`` when the child has ended (CODE < 0: killed by that signal).
The server's first line is ``{"ready": true}``. EOF on stdin stops it.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import IO, Any

#: How long the parent waits for the server's imports before running workers the usual way.
START_TIMEOUT_S = 120.0


class ForkServerError(RuntimeError):
    """The fork server could not start or stopped answering."""


class ForkedProcess:
    """A forked worker, with the part of :class:`subprocess.Popen` the runner uses."""

    def __init__(self, server: ForkServer, pid: int, args: list[str]) -> None:
        self.server = server
        self.pid = pid
        self.args = args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """The exit code if the worker has ended, else None (never blocks)."""
        try:
            return self.wait(timeout=0)
        except subprocess.TimeoutExpired:
            return None

    def wait(self, timeout: float | None = None) -> int:
        """The exit code; :class:`subprocess.TimeoutExpired` after ``timeout`` seconds."""
        if self.returncode is None:
            reply = self.server.read(timeout, self.args)
            if reply is None:  # the server is gone: wait for the orphan to disappear
                self.returncode = _wait_gone(self.pid, timeout, self.args)
            else:
                self.returncode = int(reply["exit"])
        return self.returncode


class ForkServer:
    """The parent's side: start the server, fork workers through it, stop it."""

    def __init__(self, env: dict[str, str] | None = None, preload: list[str] | None = None) -> None:
        # Its own session: Ctrl-C meant for the harness must not kill the server under a
        # worker the harness is about to stop and wait for.
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "harness.forkserver", *(preload or [])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            # NVML answers torch.cuda.is_available()/device_count() without the CUDA runtime
            # call that would make every forked child refuse CUDA ("bad fork").
            env=dict(env or os.environ, PYTHONUNBUFFERED="1", PYTORCH_NVML_BASED_CUDA_CHECK="1"),
            start_new_session=True,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._in: IO[bytes] = self.proc.stdin
        self._out: IO[bytes] = self.proc.stdout
        try:
            reply = self.read(START_TIMEOUT_S, ["harness.forkserver"])
        except subprocess.TimeoutExpired:
            self.close()
            raise ForkServerError(
                f"the fork server did not finish its imports in {START_TIMEOUT_S:g} s"
            ) from None
        if not reply or not reply.get("ready"):
            self.close()
            raise ForkServerError(f"the fork server did not start (it said {reply!r})")

    def spawn(
        self, cmd: list[str], stdout: Path, stderr: Path, env: dict[str, str]
    ) -> ForkedProcess:
        """Fork ``python -m harness.worker ARGS`` (``cmd``) with these logs and environment."""
        if cmd[1:3] != ["-m", "harness.worker"]:
            raise ValueError(f"the fork server runs harness.worker only, not {cmd}")
        request = {"argv": cmd[3:], "stdout": str(stdout), "stderr": str(stderr), "env": env}
        try:
            self._in.write(json.dumps(request).encode() + b"\n")
            self._in.flush()
        except (BrokenPipeError, ValueError) as exc:
            raise ForkServerError(f"the fork server is gone: {exc}") from exc
        reply = self.read(30.0, cmd)
        if not reply or "pid" not in reply:
            raise ForkServerError(f"the fork server did not fork (it said {reply!r})")
        return ForkedProcess(self, int(reply["pid"]), cmd)

    def read(self, timeout: float | None, args: list[str]) -> dict[str, Any] | None:
        """The server's next line (None at EOF); TimeoutExpired when none comes in time."""
        ready, _, _ = select.select([self._out], [], [], timeout)
        if not ready:
            raise subprocess.TimeoutExpired(args, timeout or 0.0)
        line = self._out.readline()
        return json.loads(line) if line else None

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        """EOF on the server's stdin stops it; it is killed if it does not stop."""
        try:
            self._in.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._out.close()


def _wait_gone(pid: int, timeout: float | None, args: list[str]) -> int:
    """An orphaned child (its server died) is reaped by init: wait until it has gone."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return -signal.SIGKILL
        if deadline is not None and time.monotonic() > deadline:
            raise subprocess.TimeoutExpired(args, timeout or 0.0)
        time.sleep(0.05)


# -- the server ----------------------------------------------------------------------------------


def _child(request: dict[str, Any], proto_fd: int, stdin_fd: int) -> None:
    """In the forked child: become a worker process and never return."""
    code = 1
    try:
        os.setsid()  # a session and process group of its own, as a spawned worker
        os.close(proto_fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(target, fd)
            os.close(target)
        if stdin_fd not in (0, 1, 2):
            os.close(stdin_fd)
        sys.stdout = open(1, "w", buffering=1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        os.environ.clear()
        os.environ.update(request["env"])
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        from harness import worker

        worker._MODULE_LOADED_AT = time.time()
        code = worker.main(list(request["argv"]))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def serve(preload: list[str]) -> None:
    """Import what workers need (no CUDA) and the ``preload`` modules, then fork one child
    per request line."""
    # Answer on a private copy of stdout; fd 1 goes to stderr, so that whatever an import
    # prints cannot corrupt the protocol.
    _quiet_signals()
    proto_fd = os.dup(1)
    os.dup2(2, 1)
    proto = os.fdopen(proto_fd, "w", buffering=1)
    stdin_fd = sys.stdin.fileno()

    import numpy  # noqa: F401
    import omegaconf  # noqa: F401
    import torch

    import bottlenecks  # noqa: F401
    from harness import worker  # noqa: F401
    from harness.config import discover_scenarios

    discover_scenarios()  # every scenario module, as the worker will import them

    def say(obj: dict[str, Any]) -> None:
        proto.write(json.dumps(obj) + "\n")
        proto.flush()

    for name in preload:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            say({"ready": False, "why": f"preloading {name} failed: {exc}"})
            return
    if torch.cuda.is_initialized():  # a forked child could not use CUDA: refuse to serve
        say({"ready": False, "why": "CUDA was initialised while importing the scenarios"})
        return
    if _children_in_bad_fork(torch):
        say(
            {
                "ready": False,
                "why": "an import asked the CUDA runtime for devices: forked "
                "children could not use CUDA",
            }
        )
        return
    say({"ready": True, "pid": os.getpid()})
    try:
        for line in sys.stdin:
            request = json.loads(line)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _child(request, proto_fd, stdin_fd)
            say({"pid": pid})
            _, status = os.waitpid(pid, 0)
            say({"pid": pid, "exit": os.waitstatus_to_exitcode(status)})
    except (BrokenPipeError, ConnectionResetError, _Stop):
        # The harness is gone (killed) or stops us: nobody is left to read a traceback. The
        # worker being run is the harness's to stop (it kills the worker's group).
        os._exit(0)


class _Stop(Exception):
    """SIGTERM or SIGHUP to the server: leave quietly."""


def _stop(signum: int, frame: Any) -> None:
    raise _Stop(signum)


def _children_in_bad_fork(torch: Any) -> bool:
    """Whether a forked child would refuse CUDA: torch marks the fork as bad once the parent
    has called into the CUDA runtime, even without initialising CUDA. A probe child says."""
    probe = getattr(torch._C, "_cuda_isInBadFork", None)
    if probe is None:  # a build without CUDA
        return False
    pid = os.fork()
    if pid == 0:
        os._exit(3 if probe() else 0)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) != 0


def _quiet_signals() -> None:
    """The server lives in a session of its own and is stopped by EOF on stdin; a Ctrl-C
    meant for the harness (SIGINT to a group, should it reach us) is ignored, SIGTERM and
    SIGHUP end it without a traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGHUP, _stop)


if __name__ == "__main__":
    serve(sys.argv[1:])
