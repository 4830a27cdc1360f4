"""Lanes of traced sessions (``nsys.server_lanes``, harness/execution/profiling.py): the next profiled
worker is forked from a session of its scenario that runs no worker, since one forked while a
sibling's capture range is open loses its capture (and nsys 2025.3 ends that session); where
no session is free, the runner forks only once the running worker's capture has been taken.

The sessions' servers here are stand-ins that only close: what is tested is which session a
worker is forked from, not nsys (tests/test_profiling.py runs the real one)."""

from __future__ import annotations

from pathlib import Path

from harness.core.runfolder import Unit, WorkerState
from harness.execution.profiling import ProfileServers, Session


class _Server:
    """What ProfileServers asks of a started server: to be closed."""

    alive = True

    def close(self, timeout_s: float = 10.0) -> int:
        self.alive = False
        return 0


def _servers(tmp_path: Path, lanes: int) -> tuple[ProfileServers, list[Path]]:
    started: list[Path] = []

    def make(base: Path, log: Path) -> _Server:
        started.append(base)
        return _Server()

    servers = ProfileServers(make, lambda u: tmp_path / u.variant, tmp_path, 60.0, lanes)
    return servers, started


def _unit(variant: str) -> Unit:
    return Unit("forced_sync", variant, "profile")


def test_the_next_worker_goes_to_the_session_that_runs_none(tmp_path) -> None:
    servers, started = _servers(tmp_path, lanes=2)
    servers.start("forced_sync")
    servers.ready()
    assert [b.name for b in started] == ["forced_sync", "forced_sync-2"]
    first, _ = servers.server("forced_sync")
    assert first is not None and first.base.name == "forced_sync"
    servers.forked(first, _unit("baseline"))
    assert servers.free("forced_sync")
    second, _ = servers.server("forced_sync")  # the first still runs baseline
    assert second is not None and second.base.name == "forced_sync-2"
    servers.forked(second, _unit("sync_free"))
    assert not servers.free("forced_sync")
    servers.ended(first, _unit("baseline"), ok=True)
    assert servers.free("forced_sync")
    third, _ = servers.server("forced_sync")
    assert third is first
    assert len(started) == 2  # no session was started for them


def test_a_failed_worker_retires_only_its_own_lane(tmp_path) -> None:
    servers, started = _servers(tmp_path, lanes=2)
    servers.start("forced_sync")
    servers.ready()
    first, _ = servers.server("forced_sync")
    assert first is not None
    servers.forked(first, _unit("baseline"))
    second, _ = servers.server("forced_sync")
    assert second is not None and second is not first
    servers.forked(second, _unit("crash"))
    assert servers.ended(second, _unit("crash"), ok=False) is None
    assert second.retired and not first.retired
    servers.ended(first, _unit("baseline"), ok=True)
    again, _ = servers.server("forced_sync")
    assert again is first  # the lane left; a retired lane is not replaced
    servers.forked(first, _unit("ideal"))
    assert not servers.free("forced_sync")
    assert len(started) == 2
    servers.ended(first, _unit("ideal"), ok=False)
    fresh, _ = servers.server("forced_sync")  # none left: one fresh session, not two
    assert fresh is not None and fresh.base.name == "forced_sync-3"
    assert [b.name for b in started][2:] == ["forced_sync-3"]
    servers.close_all()


def test_the_runner_waits_for_the_capture_where_no_lane_is_free(tmp_path) -> None:
    """With one lane, the next served worker of the scenario starts only once the running
    one's cudaProfilerStop has returned (it says TEARDOWN); another scenario's at once."""
    from harness.core.config import compose
    from harness.core.nsys import Nsys
    from harness.execution.runloop import Live
    from harness.execution.runner import Suite

    raw, cfg = compose(["+scenario=[forced_sync,pageable_copies]", "nsys.server_lanes=1"])
    suite = Suite(cfg, raw)
    suite.settings.nsys = Nsys(path="nsys", version="stand-in")
    servers, _ = _servers(tmp_path, lanes=1)
    suite.traced.pool = servers
    servers.start("forced_sync")
    servers.ready()
    session, _ = servers.server("forced_sync")
    assert isinstance(session, Session)
    current = Live(_unit("baseline"), None, tmp_path, 60.0)
    suite.traced.forked_from[current.unit] = session
    servers.forked(session, current.unit)
    current.state = WorkerState.STOPPING
    assert not suite.scheduler.may_overlap(current, _unit("sync_free"))
    assert suite.scheduler.may_overlap(current, Unit("pageable_copies", "baseline", "profile"))
    current.state = WorkerState.TEARDOWN
    assert suite.scheduler.may_overlap(current, _unit("sync_free"))
    servers.close_all()


class _Forking(_Server):
    """A stand-in server that also forks: it hands back a process that never ends."""

    def spawn(self, cmd, stdout, stderr, env):
        return type("Proc", (), {"pid": 4242, "args": cmd, "poll": lambda self: None})()


def test_a_served_worker_honours_overlap_capture_stop(tmp_path) -> None:
    """harness.overlap_capture_stop reaches workers forked from a traced server too (at
    c6fae69 only workers under their own nsys had it)."""
    from harness.core.config import compose
    from harness.core.nsys import Nsys
    from harness.execution.runner import Suite

    for on in (True, False):
        raw, cfg = compose(["+scenario=forced_sync", f"harness.overlap_capture_stop={on}"])
        suite = Suite(cfg, raw)
        suite.settings.device = "cuda"
        suite.settings.nsys = Nsys(path="nsys", version="stand-in")
        servers = ProfileServers(lambda b, log: _Forking(), lambda u: tmp_path, tmp_path, 60.0)
        suite.traced.pool = servers
        out = tmp_path / f"served-{on}"
        out.mkdir()
        live = suite.traced.start_served(_unit("baseline"), out)
        assert live is not None and live.quiet_stop is on
        servers.close_all()
