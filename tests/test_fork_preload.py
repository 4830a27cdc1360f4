"""The fork server's extra imports (``harness.fork_preload``): done before it says ready, and a
module that cannot be imported is a clear refusal, never a server that forks broken workers."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.forkserver import ForkServer, ForkServerError


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
