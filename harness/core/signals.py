"""Stop signals: Ctrl-C (SIGINT), SIGTERM and SIGHUP all stop a run the same way.

Each raises :class:`Interrupted` (a KeyboardInterrupt, so every ``except KeyboardInterrupt``
arm handles it) in the main thread: the runner then stops the workers' process groups, rebuilds
the tables, writes state ``interrupted``, removes its lock and exits ``128 + signal``
(130, 143, 129).

The handlers are installed explicitly, whatever the process inherited: a shell that starts a
job in the background without job control (``cmd &`` in a script, some CI runners) makes it
ignore SIGINT, and Python then never raises KeyboardInterrupt: the run went on to the end and
said ``complete``. SIGHUP is left ignored when it was (``nohup``: the user asked for that).

Only the first signal raises: later ones, while the run cleans up, are noted and ignored, so
the clean-up (killing workers, writing the tables) is never cut short half-way.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType

#: The signals that stop a run.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

#: deferred()'s state: how deep the holding blocks nest, and the signal held back.
_DEFER: dict[str, int | None] = {"depth": 0, "pending": None}


class Interrupted(KeyboardInterrupt):
    """A stop signal arrived; ``signum`` says which."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)

    @property
    def exit_code(self) -> int:
        return exit_code(self.signum)


def exit_code(signum: int = signal.SIGINT) -> int:
    """The shell's convention for a process stopped by ``signum``."""
    return 128 + int(signum)


class StopSignals:
    """Installed handlers; :attr:`received` is the first stop signal (None: none yet)."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, object] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if _DEFER["depth"] and self.received is None:
            _DEFER["pending"] = _DEFER["pending"] or signum  # delivered when deferred() ends
            return
        if self.received is not None:
            print(
                f"harness: {signal.Signals(signum).name} again: already stopping "
                "(stopping workers, writing the tables)",
                file=sys.stderr,
                flush=True,
            )
            return
        self.received = signum
        raise Interrupted(signum)

    @property
    def exit_code(self) -> int:
        """128 + the signal received (130 when none was: a KeyboardInterrupt of other origin)."""
        return exit_code(self.received or signal.SIGINT)

    def install(self) -> None:
        for sig in STOP_SIGNALS:
            previous = signal.getsignal(sig)
            if sig == signal.SIGHUP and previous == signal.SIG_IGN:
                continue  # nohup
            self._previous[sig] = previous
            signal.signal(sig, self._handle)

    def restore(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)  # type: ignore[arg-type]
        self._previous.clear()


@contextlib.contextmanager
def handled() -> Iterator[StopSignals]:
    """Stop signals raise :class:`Interrupted` inside this block (main thread only; elsewhere
    the handlers cannot be set and the block runs without them)."""
    stops = StopSignals()
    if threading.current_thread() is not threading.main_thread():
        yield stops
        return
    stops.install()
    try:
        yield stops
    finally:
        stops.restore()


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Hold stop signals back for a short round trip that must not be cut in two (the fork
    server's request and its pid reply): one that arrives meanwhile is delivered on leaving
    the block. Python runs signal handlers in the main thread whichever thread the kernel
    picked, so the hold is a flag the handler reads, not a signal mask (a mask covers only its
    own thread). Main thread only; elsewhere a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _DEFER["depth"] += 1
    try:
        yield
    finally:
        _DEFER["depth"] -= 1
        pending = _DEFER["pending"] if not _DEFER["depth"] else None
        if pending is not None:
            _DEFER["pending"] = None
            signal.raise_signal(pending)
