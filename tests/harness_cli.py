"""``python tests/harness_cli.py ARGS`` is ``python -m harness ARGS`` with torch barred from this
process: every CLI test runs the harness this way, so each checks that the harness's own process
(which plans, gates, exports, judges and reports) never imports torch. Only workers and the fork
server may; they are new interpreters, where the bar does not reach.

``python tests/harness_cli.py --serve SOCKET`` imports the harness's modules once (torch barred
as ever) and forks one child per request on SOCKET (tests/conftest.py: ``run_cli``), which then
runs ``python -m harness ARGS`` exactly as above: its own process, folder, environment, standard
streams and exit code; only the imports (1 to 3 s of CPU a command on 2 cores, some 200
commands a suite) are paid once per test worker instead of once per command."""

from __future__ import annotations

import gc
import importlib
import importlib.abc
import json
import os
import random
import runpy
import select
import socket
import sys
import tempfile


class NoTorch(importlib.abc.MetaPathFinder):
    """Refuses ``torch`` and its submodules: an import of either fails the run loudly."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "torch" or name.startswith("torch."):
            raise ImportError(f"the harness's own process imported {name}: only workers may")
        return None


def preload() -> None:
    """Import every subcommand's module (what each command would import first)."""
    from harness.__main__ import COMMANDS, HERE, available

    for cmd in COMMANDS:
        if cmd.module != HERE and available(cmd):
            importlib.import_module(cmd.module)
    for name in ("hydra", "omegaconf", "harness.execution.settings"):
        importlib.import_module(name)
    del sys.modules[HERE]  # runpy runs it as __main__, as `python -m harness` does


def serve(path: str) -> dict:
    """Fork a child per request on the socket at ``path``; in the child, return the request.
    The parent sends each child's pid, then its exit code, and ends when its stdin closes."""
    preload()
    gc.collect()  # frozen, the imports' heap is left out of each command's full collections
    gc.freeze()
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(64)
    os.write(1, b"ready\n")
    kids: dict[int, socket.socket] = {}
    while True:
        ready, _, _ = select.select([srv, 0], [], [], 0.05)
        while kids:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            conn = kids.pop(pid)
            conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
            conn.close()
        if 0 in ready and not os.read(0, 1):  # the tests ended
            os._exit(0)
        if srv in ready:
            conn, _ = srv.accept()
            request = json.loads(conn.makefile("rb").readline())
            pid = os.fork()
            if pid == 0:
                srv.close()
                conn.close()
                return request
            conn.sendall(f"{pid}\n".encode())
            kids[pid] = conn


def become(request: dict) -> None:
    """This forked child as a new process of its request would be: folder, environment,
    streams, its own process group, fresh random seeds."""
    os.setpgid(0, 0)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None  # TMPDIR as the request says
    for fd, name, flags in ((0, os.devnull, os.O_RDONLY),
                            (1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                            (2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):  # fmt: skip
        new = os.open(name, flags, 0o600)
        os.dup2(new, fd)
        os.close(new)
    random.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    sys.argv = [sys.argv[0], *request["argv"]]


if __name__ == "__main__":
    sys.meta_path.insert(0, NoTorch())
    sys.path[0] = os.getcwd()  # as `python -m` does: the working folder first, not tests/
    if sys.argv[1:2] == ["--serve"]:
        become(serve(sys.argv[2]))
    runpy.run_module("harness", run_name="__main__", alter_sys=True)
