"""A progress line whenever the test output has been silent for :data:`HEARTBEAT_S` seconds:
which tests are running and for how long (``scripts/test.sh`` prints only a dot per test, and
a module that makes a harness run first showed nothing for 104 s after "bringing up nodes").

It runs where the terminal is: the pytest-xdist controller (which hears each worker's test
start and end), or the one process of a run without xdist. A line is written between the other
output, never inside a test's captured output."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import Any

import pytest

#: Seconds of silence before a progress line (issue 52: never silent for 10 s); the variable
#: is for this plugin's own test.
HEARTBEAT_S = float(os.environ.get("BOTTLENECK_TEST_HEARTBEAT_S", "8"))
#: How many running tests a line names.
SHOWN = 3


class Heartbeat:
    """The plugin: tracks running tests by their start and end reports, and a thread that
    writes a line when nothing was written for :data:`HEARTBEAT_S`."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.running: dict[str, float] = {}
        self.last = time.monotonic()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._beat, name="test-heartbeat", daemon=True)

    # -- events (on the controller: forwarded from the workers) ---------------------------
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.started = time.monotonic()
        self.thread.start()

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        with self.lock:
            self.running[nodeid] = time.monotonic()

    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        with self.lock:
            self.running.pop(nodeid, None)
            self.last = time.monotonic()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        with self.lock:
            self.last = time.monotonic()

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self.stop.set()

    # -- the line -------------------------------------------------------------------------
    def line(self, now: float) -> str:
        """'[still running] tests/test_a.py::test_x (41 s), tests/test_b.py::t (12 s)'."""
        with self.lock:
            running = sorted(self.running.items(), key=lambda kv: kv[1])
        if not running:
            return (
                f"[still running] {now - self.started:.0f} s in: starting the workers, collecting"
            )
        shown = ", ".join(f"{node} ({now - t0:.0f} s)" for node, t0 in running[:SHOWN])
        more = f" and {len(running) - SHOWN} more" if len(running) > SHOWN else ""
        return f"[still running] {shown}{more}"

    def _beat(self) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        capman = self.config.pluginmanager.get_plugin("capturemanager")
        while not self.stop.wait(1.0):
            now = time.monotonic()
            with self.lock:
                quiet = now - self.last >= HEARTBEAT_S
            if not quiet or reporter is None:
                continue
            text = self.line(now)
            off = capman.global_and_fixture_disabled() if capman else contextlib.nullcontext()
            with contextlib.suppress(Exception), off:  # a test may be capturing: write past it
                if getattr(reporter._tw, "width_of_current_line", 0):
                    reporter.write("\n")  # after a line of dots, on a line of its own
                reporter.write_line(text)
            with self.lock:
                self.last = now


def register(config: pytest.Config) -> None:
    """Register the heartbeat where the terminal is (not on an xdist worker); it writes only
    through the terminal reporter (none with ``-p no:terminal``: it stays silent)."""
    if hasattr(config, "workerinput") or config.option.collectonly:
        return
    config.pluginmanager.register(Heartbeat(config), "bottleneck-heartbeat")
