"""Profiled workers forked from traced fork servers, two per scenario (``nsys.profile_server``).

A profiled worker started as ``nsys profile python -m harness.execution.worker`` pays a fresh interpreter's
imports (seconds, with or without nsys) and holds in cudaProfilerStop while nsys writes its
report (seconds again; docs/measurement.md has the numbers). Here each scenario gets one
``nsys profile`` session around a fork server (:func:`harness.core.nsys.server_command`), started when the run starts so its
imports run before anything is measured. Each profiled worker is a child forked from it: a
process of its own, with its own CUDA context, whose capture range (cudaProfilerStart/Stop on a
GPU, its NVTX ``measure`` range on the CPU) nsys turns into a report of its own,
``<base>.<k>.nsys-rep``, written when the session ends. The scenario's session is closed once
its last profiled worker has ended, and its reports are written in the background while the
next scenario's profiled workers run (as ``nsys.background_finalize`` lets them be written).

Which report is whose: the k-th worker that ended well in a session had the k-th capture range.
A worker that ends otherwise may leave its range open, so its session is retired: the rest of
the scenario's workers get a fresh one. The export is checked against the worker's pid
(:func:`check_owner`).

Lanes (``nsys.server_lanes``): a child forked while a sibling of the same session is inside its
capture range loses its own capture, and nsys 2025.3 then ends the session (its agent sends the
server a SIGTERM; ``scripts/device/nsys_repeat_probe.py`` shows it, docs/measurement.md has its
counts: a child forked after the last one's cudaProfilerStop had returned, or from another
session, keeps its capture). So
each scenario has two sessions, and the next worker is forked from one that runs no worker:
it sets up while the last one's capture is taken, as with one process per worker. Where no
session is free the runner forks only once the running worker's stop has returned.
"""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from harness.core import runfolder as rf
from harness.core.runfolder import Unit
from harness.execution.forkserver import START_TIMEOUT_S, ForkServer, ForkServerError

__all__ = ["ProfileServers", "ReportHandle", "Session", "check_owner"]

#: Tries to start one traced server (nsys start-ups at once can collide).
START_ATTEMPTS = 3


@dataclass
class Session:
    """One ``nsys profile`` session around a fork server, for one scenario."""

    scenario: str
    base: Path
    """nsys's ``--output``: its reports are ``<base>.<k>.nsys-rep``."""
    starting: Future[ForkServer]
    units: list[Unit] = field(default_factory=list)
    """Units whose worker ended well, in the order of their capture ranges."""
    running: set[Unit] = field(default_factory=set)
    """Units whose worker, forked from this session, has not ended yet."""
    retired: bool = False
    """No further worker is forked from it; it closes once ``running`` is empty."""
    closing: Future[str] | None = None
    """Set once the session is being closed: its result says what went wrong ('' if nothing)."""
    placed: dict[Unit, Path] = field(default_factory=dict)
    """Each unit's report, moved to the unit's folder once the session has ended."""

    @property
    def log(self) -> Path:
        return self.base.parent / rf.SERVER_LOG


class ProfileServers:
    """The run's profiling sessions, one live per scenario at a time."""

    def __init__(
        self,
        make: Callable[[Path, Path], ForkServer],
        report_base: Callable[[Unit], Path],
        run_dir: Path,
        close_timeout_s: float,
        lanes: int = 2,
    ) -> None:
        """``make(base, log)``: start a traced fork server writing ``base.<k>.nsys-rep``;
        ``report_base(unit)``: where a unit's report goes (without suffix); ``lanes``: live
        sessions per scenario."""
        self._make = make
        self._lanes = lanes
        self._report_base = report_base
        self._run_dir = run_dir
        self._close_timeout_s = close_timeout_s
        # every scenario's server starts at once, when the run starts, so their imports are
        # done before the first worker measures (the runner holds its gate; a start that fails
        # is tried again)
        # (threads that wait on a start each: all of them at once, in one wave of imports)
        self._starts = ThreadPoolExecutor(max_workers=32, thread_name_prefix="profile-server")
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="profile-report")
        self._live: dict[str, list[Session]] = {}
        self._all: list[Session] = []
        self._lock = threading.Lock()

    def start(self, scenario: str, lanes: int | None = None) -> None:
        """Start the scenario's sessions in the background (each server imports torch), as
        many as it lacks of ``lanes`` (default: all its lanes)."""
        with self._lock:
            live = self._live.setdefault(scenario, [])
            while len(live) < (self._lanes if lanes is None else lanes):
                live.append(self._new_session(scenario))

    def _new_session(self, scenario: str) -> Session:
        n = sum(s.scenario == scenario for s in self._all) + 1
        folder = rf.server_dir(self._run_dir, scenario)
        folder.mkdir(parents=True, exist_ok=True)
        base = folder / (scenario if n == 1 else f"{scenario}-{n}")
        for suffix in (rf.REPORT_SUFFIX, rf.QDSTRM_SUFFIX):  # an earlier run's, left over
            for old in [*folder.glob(f"{base.name}.*{suffix}"), base.with_suffix(suffix)]:
                old.unlink(missing_ok=True)
        session = Session(scenario, base, Future())
        session.starting = self._starts.submit(self._start, base, session.log)
        self._all.append(session)
        return session

    def _start(self, base: Path, log: Path) -> ForkServer:
        """Start a traced server; up to twice more after a failed start (an nsys start-up can
        fail while another nsys starts on the machine: its agent's endpoint is taken)."""
        for _ in range(START_ATTEMPTS - 1):
            try:
                return self._make(base, log)
            except (ForkServerError, OSError):
                time.sleep(1.0 + random.random() * 2.0)  # not in step with another failed start
        return self._make(base, log)

    def ready(self) -> None:
        """Wait until every session started so far is serving (or has failed to start): the
        run's first worker measures only after their imports."""
        for session in list(self._all):
            with contextlib.suppress(Exception):
                session.starting.result()

    def starting(self) -> bool:
        """Whether a session's server is still starting (nsys and the imports of torch)."""
        return any(not s.starting.done() for s in self._all)

    def writing(self) -> bool:
        """Whether nsys is still writing a closed session's reports."""
        return any(s.closing is not None and not s.closing.done() for s in self._all)

    def server(self, scenario: str) -> tuple[Session | None, str]:
        """A live session of the scenario, one that runs no worker where there is one (a fresh
        one is started where none is left: a retired lane is not replaced), once its server has
        done its imports; None and why where none could start (the worker is then profiled on
        its own)."""
        self.start(scenario, lanes=1)
        why = ""
        for session in sorted(self._live[scenario], key=lambda s: not self._idle(s)):
            try:
                session.starting.result()
            except (ForkServerError, OSError) as exc:
                self.retire_session(session)
                why = f"{exc} (see {session.log})"
                continue
            return session, ""
        return None, why

    def free(self, scenario: str) -> bool:
        """Whether a session of the scenario serves and runs no worker: the next worker may be
        forked while another one's capture is being taken."""
        return any(self._idle(s) for s in self._live.get(scenario, []))

    @staticmethod
    def _idle(session: Session) -> bool:
        done = session.starting.done()
        return done and session.starting.exception() is None and not session.running

    def forked(self, session: Session, unit: Unit) -> None:
        """A worker of ``unit`` was forked from ``session``."""
        session.running.add(unit)

    def ended(self, session: Session, unit: Unit, ok: bool) -> ReportHandle | None:
        """A worker forked from ``session`` has ended: well (``ok``: its capture range was the
        session's next), or not (the session is retired). The handle to wait for its report,
        or None."""
        session.running.discard(unit)
        if ok:
            session.units.append(unit)
        else:
            self.retire_session(session)
        if session.retired and not session.running:
            self._closing(session)
        return ReportHandle(self, session, unit) if ok else None

    def retire(self, scenario: str) -> None:
        """No further worker of the scenario is forked from its live sessions (its last one
        has ended)."""
        with self._lock:
            sessions = self._live.pop(scenario, [])
        for session in sessions:
            self._retired(session)

    def retire_session(self, session: Session) -> None:
        """No further worker is forked from ``session``: a later one gets another session."""
        with self._lock:
            live = self._live.get(session.scenario, [])
            if session not in live:
                return
            live.remove(session)
        self._retired(session)

    def _retired(self, session: Session) -> None:
        """The session closes in the background once its running workers have ended (closing
        it sooner would lose their exit codes and reports)."""
        session.retired = True
        if not session.running:
            self._closing(session)

    def _closing(self, session: Session) -> Future[str]:
        with self._lock:
            if session.closing is None:
                session.closing = self._pool.submit(self._close, session)
            return session.closing

    def close_all(self) -> None:
        """Close every session (in the background): no worker runs any more."""
        for scenario in list(self._live):
            self.retire(scenario)
        for session in self._all:
            session.running.clear()
            if session.retired:
                self._closing(session)

    def kill(self) -> None:
        """Stop every session now (the run is being torn down): a server still starting or
        serving is stopped; one whose reports are being written is left to finish them."""
        for session in self._all:
            if session.closing is not None:
                continue
            try:  # one still starting is waited for: left alone it would outlive the run
                server = session.starting.result(timeout=START_TIMEOUT_S)
            except Exception:
                continue
            if server.alive:
                server.close(timeout_s=10.0)
        self._starts.shutdown(wait=False, cancel_futures=True)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _close(self, session: Session) -> str:
        """End the server (nsys then writes a report per capture range) and move each report
        to its unit's folder; what went wrong, or ''."""
        try:
            server = session.starting.result()
        except (ForkServerError, OSError) as exc:
            return f"its traced fork server did not start: {exc}"
        rc = server.close(timeout_s=self._close_timeout_s)
        for k, unit in enumerate(session.units, 1):  # the k-th capture range is the k-th unit's
            for suffix in (rf.REPORT_SUFFIX, rf.QDSTRM_SUFFIX):  # a report, or the raw capture
                found = session.base.with_name(f"{session.base.name}.{k}{suffix}")
                if k == 1 and not found.is_file():  # a session of one capture: no number
                    found = session.base.with_name(session.base.name + suffix)
                if found.is_file():
                    target = self._report_base(unit).with_suffix(suffix)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    os.replace(found, target)
                    if suffix == rf.REPORT_SUFFIX:
                        session.placed[unit] = target
                    break
        if rc is None:
            return f"nsys did not finish writing its reports within {self._close_timeout_s:g} s"
        if rc != 0:
            return f"nsys exited with code {rc}"
        if len(session.placed) < len(session.units):
            return f"nsys wrote {len(session.placed)} reports for {len(session.units)} captures"
        return ""


class ReportHandle:
    """A profiled worker's report while its session writes it (an outcome's ``finishing``,
    waited for by the runner once the last worker has ended)."""

    def __init__(self, servers: ProfileServers, session: Session, unit: Unit) -> None:
        self._servers = servers
        self.session = session
        self.unit = unit
        self.args = [f"nsys ({session.base.name})"]

    def wait(self, timeout: float | None = None) -> int:
        """0 once the unit's report is in its folder, 1 when the session ended without it
        (:attr:`why` says why); TimeoutExpired after ``timeout`` seconds."""
        self._servers.retire_session(self.session)
        self.session.running.clear()  # waited for at the end: no worker of it runs any more
        closing = self._servers._closing(self.session)
        try:
            self.why = closing.result(timeout=timeout)
        except TimeoutError:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0) from None
        if self.unit in self.session.placed:
            return 0
        self.why = self.why or "nsys wrote no report for its capture range"
        return 1

    why: str = ""


def check_owner(sqlite: Path, pid: int | None) -> str:
    """'' when the export's measured window (its NVTX ``measure`` range) belongs to process
    ``pid`` (or when ``pid`` is unknown), else what is wrong: a report placed on the wrong
    variant would be judged as that variant."""
    if pid is None:
        return ""
    from analysis.trace import TraceError, nvtx_ranges, open_trace
    from bottlenecks import MEASURE

    try:
        with open_trace(sqlite) as trace:
            ranges = nvtx_ranges(trace)
    except TraceError as exc:
        return f"the SQLite export is unusable: {exc}"
    mine = ranges[ranges["text"] == MEASURE]
    if mine.empty:
        return ""  # nothing to check it by; check_export says what is missing
    owners = {int(p) for p in mine["pid"]}
    if owners == {pid}:
        return ""
    return f"its measured window belongs to process {sorted(owners)}, not to the worker ({pid})"
