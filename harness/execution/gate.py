"""The turn gate of a sliced round: one Unix stream socket per held worker, JSON lines both ways.

Why a socket: the variants of a sliced round take turns many times a second (a slice is about
0.1 s), so a turn must be handed over in microseconds; a file polled every few milliseconds
would cost more than the slice measures. The parent listens on one socket path for the whole
run (:class:`GateListener`); each worker of a sliced round connects once it has set up, says
which unit it is (:data:`HELLO`), and from then on only runs what the parent sends and answers
each command (:class:`Channel`). Neither side imports torch here.

The commands and their answers (every message one JSON object on one line):

- ``{"op": "warmup"}`` -> ``{"ok": true, "steps": n, "warmup_s": s, "est_step_s": s}``: the
  worker's warm-up, alone, and its host probe before the window;
- ``{"op": "slice", "steps": n}`` -> ``{"ok": true, "wall_s": s}``: ``n`` measured steps, their
  GPU work synchronised before the answer;
- ``{"op": "end"}`` -> ``{"ok": true}``: the host probe after the window; the worker then
  writes its result and leaves.

A worker that fails raises and exits: its socket closes (:class:`GateClosed`), and the parent
goes on with the others.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["HELLO", "Channel", "GateClosed", "GateListener", "connect"]

#: The first message of a worker: ``{"hello": <its unit folder>, "pid": <its pid>}``.
HELLO = "hello"

#: The longest a single message line may be (bytes): commands and answers are a few dozen.
MAX_LINE = 1 << 20


class GateClosed(ConnectionError):
    """The other side closed its end (a worker that failed, or a parent that is gone)."""


class Channel:
    """One connected socket, JSON lines both ways."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buf = b""

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, message: dict[str, Any]) -> None:
        """Send one message (raises :class:`GateClosed` when the other side is gone)."""
        try:
            self.sock.sendall(json.dumps(message).encode() + b"\n")
        except (BrokenPipeError, ConnectionResetError, OSError) as exc:
            raise GateClosed(str(exc)) from exc

    def pending(self) -> bool:
        """A whole message is already buffered (no need to wait on the socket)."""
        return b"\n" in self._buf

    def recv(self, timeout_s: float | None = None) -> dict[str, Any] | None:
        """The next message; None when none came within ``timeout_s`` (None: wait for one)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while b"\n" not in self._buf:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.sock], [], [], left)
            if not ready:
                return None
            try:
                chunk = self.sock.recv(65536)
            except (ConnectionResetError, OSError) as exc:
                raise GateClosed(str(exc)) from exc
            if not chunk:
                raise GateClosed("the other side closed its end")
            self._buf += chunk
            if len(self._buf) > MAX_LINE:
                raise GateClosed("a message longer than the gate allows")
        line, self._buf = self._buf.split(b"\n", 1)
        data = json.loads(line)
        if not isinstance(data, dict):
            raise GateClosed(f"not a message: {line[:80]!r}")
        return data

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


class GateListener:
    """The parent's end: a socket in a short-named temporary folder (a Unix socket's path may
    be 108 bytes at most, and run folders can be deeper than that)."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="bsgate-"))
        self.path = str(self.folder / "gate.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(128)
        self.sock.setblocking(False)
        self._greeting: list[tuple[Channel, float]] = []

    def accept(self) -> list[tuple[str, int, Channel]]:
        """Workers that connected and said hello since the last call: (unit folder, pid,
        channel) each. Never waits: a worker that connected but has not said hello yet is
        kept for the next call (dropped after 30 s)."""
        while True:
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                break
            conn.setblocking(True)
            self._greeting.append((Channel(conn), time.monotonic()))
        out, keep = [], []
        for chan, since in self._greeting:
            try:
                ready, _, _ = select.select([chan.sock], [], [], 0)
                msg = chan.recv(0.0) if ready or chan.pending() else None
            except (GateClosed, ValueError):
                chan.close()
                continue
            if msg is not None and HELLO in msg:
                out.append((str(msg[HELLO]), int(msg.get("pid") or 0), chan))
            elif time.monotonic() - since < 30.0:
                keep.append((chan, since))
            else:
                chan.close()
        self._greeting = keep
        return out

    def close(self) -> None:
        for chan, _ in self._greeting:
            chan.close()
        self._greeting = []
        with contextlib.suppress(OSError):
            self.sock.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def connect(path: str, out_dir: str, timeout_s: float = 30.0) -> Channel:
    """The worker's end: connect to the parent's listener and say which unit this is."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    sock.connect(path)
    sock.settimeout(None)
    chan = Channel(sock)
    chan.send({HELLO: out_dir, "pid": os.getpid()})
    return chan
