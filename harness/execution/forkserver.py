"""Fork server: import torch once, fork a fresh process per worker run.

Every worker process spends seconds importing torch, the scenarios and their dependencies
before it does anything (``timings.csv`` has each run's; docs/measurement.md some machines').
The fork server pays that once: it imports what a worker needs, never touches CUDA, and forks
one child per worker run. Each child is still a process of its own (its own session and process
group, its own CUDA context, created after the fork), runs ``harness.execution.worker.main`` and
exits; the parent times and kills it exactly as a spawned worker.

The same server runs under ``nsys profile`` for profiled workers (``command_prefix``, see
:func:`harness.core.nsys.server_command`): nsys then traces each forked child, and every child's
capture range becomes a report of its own. The ranks of a distributed timing unit on one node
are forked from the unprofiled server too, one child per rank (:mod:`harness.execution.ranks`); profiled
distributed units stay ``nsys profile ... torchrun``.

Protocol (one JSON object per line, over a Unix socket the parent listens on and the server
connects to once its imports are done: nsys writes its own lines to the server's stdout): the
parent sends ``{"argv", "stdout", "stderr", "env"}`` (and ``"append": true`` for logs that several
children share, as a unit's ranks do); the server answers ``{"pid": N}`` at
once and ``{"pid": N, "exit": CODE}`` when the child has ended (CODE < 0: killed by that
signal). The server's first line is ``{"ready": true}``. Children may run side by side (the
next one sets up while the last one tears down), so exits and fork replies interleave. EOF on
the socket stops the server once its running children have ended.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
        self.orphaned = False
        """Its server ended (or was closed) while it ran: its exit code is not known
        (``returncode`` then reads -SIGKILL)."""

    def poll(self) -> int | None:
        """The exit code if the worker has ended, else None (never blocks)."""
        try:
            return self.wait(timeout=0)
        except subprocess.TimeoutExpired:
            return None

    def wait(self, timeout: float | None = None) -> int:
        """The exit code; :class:`subprocess.TimeoutExpired` after ``timeout`` seconds."""
        if self.returncode is None:
            code = self.server.exit_of(self.pid, timeout, self.args)
            if code is None:  # the server is gone: wait for the orphan to disappear
                code = _wait_gone(self.pid, timeout, self.args)
                self.orphaned = True
            self.returncode = code
        return self.returncode


class ForkServer:
    """The parent's side: start the server, fork workers through it, stop it."""

    def __init__(
        self,
        env: dict[str, str] | None = None,
        preload: list[str] | None = None,
        *,
        command_prefix: list[str] | None = None,
        log: Path | None = None,
        start_timeout_s: float = START_TIMEOUT_S,
    ) -> None:
        """``command_prefix``: what the server runs under (``nsys profile ...``); ``log``: a file
        for the output of the server (and of what it runs under), else the parent's."""
        self._dir = tempfile.mkdtemp(prefix="bottleneck-fork-")
        path = os.path.join(self._dir, "socket")
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(path)
        self._listener.listen(1)
        self._sock: socket.socket | None = None
        self._buf = b""
        #: Exit codes the server has reported, by child pid, not yet asked for.
        self._exits: dict[int, int] = {}
        #: Variables the server's launcher (nsys) set or changed in the server's environment:
        #: each child gets them too (nsys's NVTX and CUDA injection read them after the fork).
        self.injected: dict[str, str] = {}
        # NVML answers torch.cuda.is_available()/device_count() without the CUDA runtime call
        # that would make every forked child refuse CUDA ("bad fork").
        given = dict(env or os.environ, PYTHONUNBUFFERED="1", PYTORCH_NVML_BASED_CUDA_CHECK="1")
        cmd = [
            *(command_prefix or []),
            sys.executable,
            "-m",
            "harness.execution.forkserver",
            "--connect",
        ]
        out = open(log, "ab") if log is not None else None
        try:
            # Its own session: Ctrl-C meant for the harness must not kill the server under a
            # worker the harness is about to stop and wait for.
            self.proc = subprocess.Popen(
                [*cmd, path, *(preload or [])],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                env=given,
                start_new_session=True,
            )
        finally:
            if out is not None:
                out.close()
        try:
            self._sock = self._accept(start_timeout_s)
            reply = self.read(start_timeout_s, ["harness.execution.forkserver"])
        except (subprocess.TimeoutExpired, ForkServerError) as exc:
            self.close()
            raise ForkServerError(
                f"the fork server did not finish its imports in {start_timeout_s:g} s"
                if isinstance(exc, subprocess.TimeoutExpired)
                else str(exc)
            ) from None
        if not reply or not reply.get("ready"):
            self.close()
            raise ForkServerError(f"the fork server did not start (it said {reply!r})")
        own = ("PYTHONUNBUFFERED", "PYTORCH_NVML_BASED_CUDA_CHECK")
        seen = reply.get("env") or {}
        self.injected = {k: v for k, v in seen.items() if k not in own and given.get(k) != v}

    def _accept(self, timeout_s: float) -> socket.socket:
        """The server's connection, once its imports are done; ForkServerError if it ended
        first, TimeoutExpired if it takes longer than ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            ready, _, _ = select.select([self._listener], [], [], 0.2)
            if ready:
                conn, _ = self._listener.accept()
                return conn
            if self.proc.poll() is not None:
                raise ForkServerError(
                    f"the fork server exited with code {self.proc.returncode} before it was ready"
                )
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(["harness.execution.forkserver"], timeout_s)

    def spawn(
        self,
        cmd: list[str],
        stdout: Path,
        stderr: Path,
        env: dict[str, str],
        *,
        append: bool = False,
    ) -> ForkedProcess:
        """Fork ``python -m harness.execution.worker ARGS`` (``cmd``) with these logs and environment;
        ``append``: add to the logs (shared by several children) rather than truncate them."""
        if cmd[1:3] != ["-m", "harness.execution.worker"]:
            raise ValueError(f"the fork server runs harness.execution.worker only, not {cmd}")
        request = {
            "argv": cmd[3:],
            "stdout": str(stdout),
            "stderr": str(stderr),
            "env": {**env, **self.injected},
            "append": append,
        }
        if self._sock is None:
            raise ForkServerError("the fork server is closed")
        try:
            self._sock.sendall(json.dumps(request).encode() + b"\n")
        except OSError as exc:
            raise ForkServerError(f"the fork server is gone: {exc}") from exc
        reply = self._reply(30.0, cmd)
        if not reply or "pid" not in reply:
            raise ForkServerError(f"the fork server did not fork (it said {reply!r})")
        return ForkedProcess(self, int(reply["pid"]), cmd)

    def _reply(self, timeout: float | None, args: list[str]) -> dict[str, Any] | None:
        """The server's next line that is not a child's exit (those are kept for
        :meth:`exit_of`): children run side by side, so an exit may come first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            reply = self.read(left, args)
            if reply is None or "exit" not in reply:
                return reply
            self._exits[int(reply["pid"])] = int(reply["exit"])

    def exit_of(self, pid: int, timeout: float | None, args: list[str]) -> int | None:
        """Child ``pid``'s exit code once the server reports it (None: the server is gone);
        TimeoutExpired after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while pid not in self._exits:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            reply = self.read(left, args)
            if reply is None:
                return None
            if "exit" in reply:
                self._exits[int(reply["pid"])] = int(reply["exit"])
        return self._exits.pop(pid)

    def read(self, timeout: float | None, args: list[str]) -> dict[str, Any] | None:
        """The server's next line (None at EOF); TimeoutExpired when none comes in time. Lines
        are split here, not by a buffered reader, so a second line that arrived with the first
        is not left where ``select`` cannot see it."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buf:
            if self._sock is None:
                return None
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self._sock], [], [], left)
            if not ready:
                raise subprocess.TimeoutExpired(args, timeout or 0.0)
            try:
                chunk = self._sock.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                return None
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self, timeout_s: float = 10.0) -> int | None:
        """EOF on the socket stops the server; it is killed if it does not stop within
        ``timeout_s`` (under nsys: nsys writing its reports). Its exit code (None: killed)."""
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
            self._sock.close()
            self._sock = None
        self._listener.close()
        shutil.rmtree(self._dir, ignore_errors=True)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            return None


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


def _child(request: dict[str, Any], proto_fd: int) -> None:
    """In the forked child: become a worker process and never return."""
    code = 1
    try:
        if hasattr(signal, "pthread_sigmask"):  # the server blocks these (_quiet_signals)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _STRAY)
        os.setsid()  # a session and process group of its own, as a spawned worker
        os.close(proto_fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        mode = os.O_APPEND if request.get("append") else os.O_TRUNC
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | mode, 0o644)
            os.dup2(target, fd)
            os.close(target)
        sys.stdout = open(1, "w", buffering=1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        os.environ.clear()
        os.environ.update(request["env"])
        _apply_threads(request["env"])
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        from harness.execution import worker

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


def _apply_threads(env: dict[str, str]) -> None:
    """OpenMP read ``OMP_NUM_THREADS`` when the server imported torch: a child whose
    environment sets it (torchrun's ranks get 1) takes it through torch, as a fresh
    interpreter would at its import."""
    value = env.get("OMP_NUM_THREADS", "")
    torch = sys.modules.get("torch")
    if torch is not None and value.isdigit() and int(value) > 0:
        torch.set_num_threads(int(value))


def serve(path: str, preload: list[str]) -> None:
    """Import what workers need (no CUDA) and the ``preload`` modules, connect to the parent
    at ``path``, then fork one child per request line."""
    _quiet_signals()
    os.dup2(2, 1)  # whatever an import prints goes to the log, never to the protocol
    import numpy  # noqa: F401
    import omegaconf  # noqa: F401
    import torch

    import bottlenecks  # noqa: F401
    from harness.core.config import discover_scenarios
    from harness.execution import worker  # noqa: F401

    found = discover_scenarios()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    proto_fd = sock.fileno()

    def say(obj: dict[str, Any]) -> None:
        sock.sendall(json.dumps(obj).encode() + b"\n")

    if not _preloaded(found, preload, torch, say):
        return
    # Frozen, the imports' heap is left out of every child's collections: its settle_heap
    # (harness.execution.worker) walks only its own set-up's objects, not all of torch's
    # (~0.25 s of CPU per forked worker), and touches none of the pages it shares with us.
    gc.collect()
    gc.freeze()
    say({"ready": True, "pid": os.getpid(), "env": dict(os.environ)})
    running: set[int] = set()
    buf, eof = b"", False
    try:
        while not eof or running:
            # children run side by side (the next one sets up while the last tears down): an
            # exit is reported within REAP_S of happening
            ready, _, _ = select.select([] if eof else [sock], [], [], REAP_S if running else None)
            _reap(running, say)
            if not ready:
                continue
            chunk = sock.recv(65536)
            eof = not chunk
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                request = json.loads(line)
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    _child(request, proto_fd)
                running.add(pid)
                say({"pid": pid})
    except (BrokenPipeError, ConnectionResetError):
        # The harness is gone (killed) or stops us: nobody is left to read a traceback. The
        # workers being run are the harness's to stop (it kills each worker's group).
        os._exit(0)
    except BaseException:  # anything else ends the server: say what, in its log
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(70)


def _preloaded(found: dict, preload: list[str], torch: Any, say: Callable[[dict], None]) -> bool:
    """Every workload module and the ``preload`` modules imported, CUDA untouched; else False,
    having told the parent why it cannot serve."""
    for scen in found.values():  # every workload module, as the workers will import them
        try:
            scen.builder()
        except Exception as exc:  # a broken workload module: its workers will say it again
            why = f"{type(exc).__name__}: {exc}"
            say({"ready": False, "why": f"preloading {scen.name}'s workloads failed: {why}"})
            return False
    for name in preload:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            say({"ready": False, "why": f"preloading {name} failed: {exc}"})
            return False
    if torch.cuda.is_initialized():  # a forked child could not use CUDA: refuse to serve
        say({"ready": False, "why": "CUDA was initialised while importing the scenarios"})
        return False
    if _children_in_bad_fork(torch):
        say(
            {
                "ready": False,
                "why": "an import asked the CUDA runtime for devices: forked "
                "children could not use CUDA",
            }
        )
        return False
    return True


#: How often a server with running children looks for their exit (seconds).
REAP_S = 0.01


def _reap(running: set[int], say: Any) -> None:
    """Report every child that has ended (each asked for by pid: a process that nsys's
    injection started in the server is none of ours)."""
    for pid in list(running):
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # reaped by someone else: its exit code is lost
            done, status = pid, None
        if done == 0:
            continue
        running.discard(pid)
        code = os.waitstatus_to_exitcode(status) if status is not None else -signal.SIGKILL
        if status is None:
            print(f"fork server: child {pid} was reaped elsewhere", file=sys.stderr, flush=True)
        say({"pid": pid, "exit": code})


def _noted(signum: int, frame: Any) -> None:
    """SIGTERM or SIGHUP to the server where ``sigwaitinfo`` is missing: said in its log."""
    _say_signal(signum, None)


def _say_signal(signum: int, sender: int | None) -> None:
    """A SIGTERM or SIGHUP to the server: said in its log (with its sender's pid and command
    line where known) and otherwise ignored. The harness stops a server through its socket
    (and kills its group when that fails); a stray signal must not end it under running
    workers: traced servers have got a SIGTERM from an unknown sender, and nsys took no capture
    after it (docs/measurement.md)."""
    who = ""
    if sender is not None:
        try:
            cmd = Path(f"/proc/{sender}/cmdline").read_bytes().replace(b"\0", b" ").strip()
        except OSError:
            cmd = b"?"
        who = f" from pid {sender} ({cmd[:160].decode(errors='replace')})"
    print(
        f"fork server: signal {signum}{who} at {time.time():.3f}, ignored (stopped through "
        "its socket)",
        file=sys.stderr,
        flush=True,
    )


def _signal_watch() -> None:
    """Take SIGTERM and SIGHUP in a thread of their own, to name their sender."""
    while True:
        info = signal.sigwaitinfo(_STRAY)
        _say_signal(info.si_signo, info.si_pid)


#: Signals a server logs and ignores (it is stopped through its socket).
_STRAY = {signal.SIGTERM, signal.SIGHUP}


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
    """The server lives in a session of its own and is stopped by EOF on its socket: a Ctrl-C
    meant for the harness (SIGINT to a group, should it reach us) is ignored, SIGTERM and
    SIGHUP are logged with their sender and otherwise ignored (blocked, and taken by
    :func:`_signal_watch`; each forked child unblocks them first)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "sigwaitinfo"):
        signal.pthread_sigmask(signal.SIG_BLOCK, _STRAY)
        threading.Thread(target=_signal_watch, name="signal-watch", daemon=True).start()
        return
    signal.signal(signal.SIGTERM, _noted)
    signal.signal(signal.SIGHUP, _noted)


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] != "--connect":
        sys.exit("usage: python -m harness.execution.forkserver --connect SOCKET [MODULE ...]")
    serve(sys.argv[2], sys.argv[3:])
