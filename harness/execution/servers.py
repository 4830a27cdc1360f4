"""Which profiled workers are forked from their scenario's traced fork server
(``nsys.profile_server``), the forking itself, and what became of each served attempt.

The sessions and their lanes are :class:`harness.execution.profiling.ProfileServers`'; this is
the run's side of them: the servers started when the run starts, a worker forked from a free
session, and a served attempt that failed for a reason of the session's run again, once, as
its own ``nsys profile`` after the other workers.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bottlenecks import MEASURE
from harness.core import nsys as nsys_mod
from harness.core import runfolder as rf
from harness.core import signals
from harness.core.hostmem import OomWatch
from harness.core.progress import Progress
from harness.core.runfolder import Status, Unit, WorkerState
from harness.execution.execute import stop_group, worker_env
from harness.execution.forkserver import ForkServer, ForkServerError
from harness.execution.memcheck import size_said
from harness.execution.profiling import ProfileServers, ReportHandle, Session
from harness.execution.runloop import Live
from harness.execution.settings import Settings

#: How a profile forked from a traced server may fail for a reason of the session's (the server
#: ended, its exit code was lost, nsys wrote no report or another worker's): run it again on its
#: own. A timeout or an out-of-memory is the variant's and is not run again.
SERVED_RETRY = frozenset({Status.FAILED, Status.NO_RESULT, Status.EVIDENCE_FAILED})


class TracedServers:
    """The run's traced fork servers and the profiled workers forked from them."""

    def __init__(self, settings: Settings, say: Callable[[str], None], progress: Progress) -> None:
        self.settings = settings
        self.say = say
        self.progress = progress
        #: The sessions while units run (None: no scenario's profiles are served).
        self.pool: ProfileServers | None = None
        self._said: set[str] = set()
        #: The session each running profiled worker was forked from.
        self.forked_from: dict[Unit, Session] = {}
        #: Units forked from a traced server at least once, and those that failed there (run
        #: again, once, as their own ``nsys profile`` after the other workers).
        self.tried: set[Unit] = set()
        self.failed: list[Unit] = []

    def start(self, todo: list[Unit], run_dir: Path) -> None:
        """Start the traced fork servers of the scenarios with profiled workers still to run
        (their imports run before anything is measured); none when none applies."""
        s = self.settings
        if not s.serving:
            return
        scenarios = list(dict.fromkeys(u.scenario for u in todo if u.is_profile))
        scenarios = [name for name in scenarios if s.server_mode(name)]
        if not scenarios:
            return

        def make(base: Path, log: Path) -> ForkServer:
            scenario = base.parent.name
            cmd = nsys_mod.server_command(
                s.nsys,  # type: ignore[arg-type]
                base,
                trace=s.trace_for(scenario),
                gpu=s.device == "cuda",
                window_range=MEASURE,
                cuda_memory_usage=s.cfg.nsys.cuda_memory_usage,
                cuda_graph_trace=s.cfg.nsys.cuda_graph_trace,
                extra_args=s.cfg.nsys.extra_args,
            )
            env = {**s.server_env(), **nsys_mod.SERVER_ENV}
            return ForkServer(env, self.preload(scenario), command_prefix=cmd, log=log)

        self.pool = ProfileServers(
            make,
            lambda u: s.report_base(u, run_dir),
            run_dir,
            s.cfg.harness.timeout_s,
            s.cfg.nsys.server_lanes,
        )
        for scenario in scenarios:
            self.pool.start(scenario)
        self.progress.activity(f"starting {len(scenarios)} traced fork servers (nsys)")
        # the first workers set up meanwhile; they measure once it is done

    def preload(self, scenario: str) -> list[str]:
        """What a scenario's traced server imports besides torch: the fork server's list, less
        Inductor's compiler unless one of its variants compiles (as ``unforked_preload``)."""
        return self.settings.preload(bool(self.settings.compiling(scenario)))

    def served(self, unit: Unit) -> bool:
        """Whether ``unit`` is profiled as a child of its scenario's traced fork server (not
        after a served attempt failed)."""
        return (
            self.pool is not None
            and self.settings.server_mode(unit.scenario)
            and unit not in self.failed
        )

    def start_served(self, unit: Unit, out_dir: Path) -> Live | None:
        """Fork the profiled worker from its scenario's traced server; None where that server
        could not start or fork (said once per scenario: the worker is profiled on its own)."""
        assert self.pool is not None
        proc, why = None, ""
        watch = OomWatch.start(size_said(self.settings, unit.scenario))
        for _ in range(2):  # a server found gone at the fork: once more, from a fresh session
            session, why = self.pool.server(unit.scenario)
            if session is None:
                break
            proc, why = self._fork(unit, out_dir, session)
            if proc is not None:
                break
        if proc is None:
            if unit.scenario not in self._said:
                self._said.add(unit.scenario)
                self.say(
                    f"{unit.scenario}: its traced fork server is unavailable ({why}); its "
                    "variants are profiled one nsys process each"
                )
            return None
        h = self.settings.cfg.harness
        return Live(
            unit, proc, out_dir, h.timeout_s, memory_cap_gb=h.memory_cap_gb,
            oom_watch=watch, quiet_stop=self.settings.overlap_capture_stop,
        )  # fmt: skip

    def _fork(self, unit: Unit, out_dir: Path, session: Session) -> tuple[Any, str]:
        """The unit's worker forked from ``session``'s server, or None and why (the session is
        then retired)."""
        assert self.pool is not None
        spec = self.settings.spec(unit, out_dir, forked=True)
        cmd = [sys.executable, "-m", "harness.execution.worker", "--spec", str(spec)]
        env = worker_env(self.settings.worker_env())
        forked: list[Any] = []
        try:  # held against stop signals: no worker starts unseen
            with signals.deferred():
                server = session.starting.result()
                forked.append(server.spawn(cmd, out_dir / rf.STDOUT, out_dir / rf.STDERR, env))
        except ForkServerError as exc:
            self.pool.retire_session(session)
            return None, str(exc)
        except BaseException:  # a stop signal held back during the fork arrives now
            for item in forked:
                stop_group(item, out_dir)
            raise
        self.forked_from[unit] = session
        self.tried.add(unit)
        self.pool.forked(session, unit)
        return forked[0], ""

    def ended(self, unit: Unit, ok: bool) -> tuple[bool, ReportHandle | None]:
        """A profiled worker ended: whether it was forked from a session, and the handle of
        its report while its session still writes it (None: nothing to wait for)."""
        session = self.forked_from.pop(unit, None)
        if session is None or self.pool is None:
            return False, None
        return True, self.pool.ended(session, unit, ok)

    def in_served_attempt(self, unit: Unit) -> bool:
        """Whether ``unit``'s last attempt was forked from a traced server (its failure is
        run again by :meth:`retried`'s rule)."""
        return unit in self.tried and unit not in self.failed

    def retried(self, unit: Unit, status: Status) -> bool:
        """Whether a failed profile is run again as its own ``nsys profile`` (once, and only
        when it was forked from a traced server): a server's session can end or lose a report
        for reasons of nsys's own, which the worker's variant has no part in."""
        if status not in SERVED_RETRY or not self.in_served_attempt(unit):
            return False
        self.failed.append(unit)
        return True

    def may_start_beside(self, current: Live, unit: Unit) -> bool:
        """A served profile starts beside ``current`` once a session of its scenario runs no
        worker or ``current``'s capture has been taken (a worker forked while a sibling's
        capture range is open loses its own: harness/execution/profiling.py)."""
        session = self.forked_from.get(current.unit)
        if session is None or session.scenario != unit.scenario or not self.served(unit):
            return True
        assert self.pool is not None
        return current.state == WorkerState.TEARDOWN or self.pool.free(unit.scenario)

    # -- the sessions, as the run goes on ------------------------------------------------------
    def starting(self) -> bool:
        """Whether a traced server is still starting (its imports)."""
        return self.pool is not None and self.pool.starting()

    def writing(self) -> bool:
        """Whether a closed session's nsys still writes its reports."""
        return self.pool is not None and self.pool.writing()

    def retire(self, scenario: str) -> None:
        """The scenario's last worker has ended: its sessions close (nsys writes their reports
        in the background)."""
        if self.pool is not None:
            self.pool.retire(scenario)

    def close_all(self) -> None:
        """Close every session (their reports are written)."""
        if self.pool is not None:
            self.pool.close_all()

    def kill(self) -> None:
        """Kill every session (the run ends or is interrupted)."""
        if self.pool is not None:
            self.pool.kill()
            self.pool = None
