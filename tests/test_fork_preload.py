"""The fork server's extra imports (``harness.fork_preload``): done before it says ready, and a
module that cannot be imported is a clear refusal, never a server that forks broken workers.
Also the two per-run choices the runner makes for a worker's start: the preload list and the
scenario's own nsys trace."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.execution.forkserver import ForkServer, ForkServerError


def _loaded(pid: int, needle: str) -> bool:
    """Whether the process maps a file whose path contains ``needle``."""
    return needle in Path(f"/proc/{pid}/maps").read_text()


def test_preloaded_module_is_imported_before_ready() -> None:
    server = ForkServer(preload=["_testcapi"])  # a shared library, visible in maps
    try:
        assert _loaded(server.proc.pid, "_testcapi")
    finally:
        server.close()


def test_unimportable_preload_refuses_to_serve() -> None:
    with pytest.raises(ForkServerError, match="preloading no_such_module_xyz failed"):
        ForkServer(preload=["no_such_module_xyz"])


def test_a_broken_workload_module_refuses_to_serve(tmp_path: Path) -> None:
    """A scenario whose workload module raises on import (its metadata imports fine, so the
    harness discovered it): the server says which scenario, and why, instead of serving."""
    import os

    from tests.test_contract import write_example

    name = write_example(tmp_path)
    (tmp_path / name / "workload.py").write_text("raise RuntimeError('no GPU library here')\n")
    env = {
        **os.environ,
        "BOTTLENECK_SCENARIO_MODULES": name,
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(tmp_path), os.environ.get("PYTHONPATH", "")) if p
        ),
    }
    why = f"preloading {name}'s workloads failed: RuntimeError: no GPU library here"
    with pytest.raises(ForkServerError, match=why):
        ForkServer(env=env)


def test_a_scenario_may_trace_its_own_apis() -> None:
    """``scenario.<name>.nsys_trace`` replaces ``nsys.trace`` for that scenario only."""
    from harness.core.config import compose
    from harness.execution.settings import Settings

    raw, suite = compose(
        ["+scenario=[forced_sync,kernel_flood]", "scenario.forced_sync.nsys_trace=[cuda,nvtx]"]
    )
    s = Settings(suite, raw)
    assert s.trace_for("forced_sync") == ["cuda", "nvtx"]
    assert s.trace_for("kernel_flood") == ["cuda", "nvtx", "osrt"]


def test_the_default_preload_depends_on_the_device() -> None:
    from harness.core.config import compose
    from harness.execution.settings import PRELOAD_ALWAYS, PRELOAD_GPU, Settings

    raw, suite = compose(["+scenario=forced_sync"])
    s = Settings(suite, raw)
    s.device = "cpu"
    assert s.fork_preload() == list(PRELOAD_ALWAYS)
    s.device = "cuda"
    assert s.fork_preload() == [*PRELOAD_ALWAYS, *PRELOAD_GPU]
    raw, suite = compose(["+scenario=forced_sync", "harness.fork_preload=[json]"])
    assert Settings(suite, raw).fork_preload() == ["json"]


def test_unforked_workers_import_inductor_only_where_the_variant_compiles() -> None:
    """A profiled worker of a variant that never compiles skips Inductor's import (8 s of its
    start on the H100); one that compiles gets it, and an explicit list is kept as given."""
    from harness.core.config import compose
    from harness.core.runfolder import Unit
    from harness.execution.settings import PRELOAD_ALWAYS, PRELOAD_GPU, Settings

    raw, suite = compose(["+scenario=kernel_flood"])
    s = Settings(suite, raw)
    s.device = "cuda"
    assert s.unforked_preload(Unit("kernel_flood", "baseline", "profile")) == list(PRELOAD_ALWAYS)
    compiled = Unit("kernel_flood", "torch_compile", "profile")
    assert s.unforked_preload(compiled) == [*PRELOAD_ALWAYS, *PRELOAD_GPU]
    raw, suite = compose(["+scenario=kernel_flood", "harness.fork_preload=[json]"])
    s = Settings(suite, raw)
    s.device = "cuda"
    assert s.unforked_preload(Unit("kernel_flood", "baseline", "profile")) == ["json"]


def test_fork_servers_start_with_the_workers_compiler_caches(monkeypatch) -> None:
    """A fork server imports what its workers use before it forks them: it must resolve the
    same compiler caches as a worker started on its own (the background warmer), or its
    forked workers compile again what the warmer compiled (57 and 64 s on the H100)."""
    from harness.core.config import compose
    from harness.execution.settings import Settings

    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setenv("TRITON_CACHE_DIR", "/tmp/the-users-own")  # the user's setting wins
    raw, suite = compose(["+scenario=forced_sync"])
    s = Settings(suite, raw)
    cache = s.cfg.harness.cache_path()
    server = ForkServer(s.server_env())
    try:
        environ = Path(f"/proc/{server.proc.pid}/environ").read_bytes().split(b"\0")
    finally:
        server.close()
    assert f"TORCHINDUCTOR_CACHE_DIR={cache / 'torchinductor'}".encode() in environ
    assert b"TRITON_CACHE_DIR=/tmp/the-users-own" in environ


def test_a_stray_sigterm_does_not_end_a_server(tmp_path) -> None:
    """The server is stopped through its socket; a SIGTERM (on the H100 one reached a traced
    server while it forked) is said in its log, with its sender, and otherwise ignored."""
    import os
    import signal
    import sys
    import time

    log = tmp_path / "server.log"
    server = ForkServer(log=log)
    try:
        os.kill(server.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 30  # a state to reach, not a delay to sit out
        while "ignored" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.alive
        out = tmp_path / "child"
        out.mkdir()
        cmd = [
            sys.executable,
            "-m",
            "harness.execution.worker",
            "--spec",
            str(tmp_path / "none.json"),
        ]
        child = server.spawn(cmd, out / "o.log", out / "e.log", dict(os.environ))
        assert child.wait(timeout=60) != 0  # forked and run: its spec does not exist
        assert server.alive
    finally:
        server.close()
    assert f"signal 15 from pid {os.getpid()} (" in log.read_text()
