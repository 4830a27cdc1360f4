"""Shared fixtures: a way to run the real CLI in a subprocess, as a user would."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"

#: Test files that read one harness run made once per process (test_report.shared_sweep).
SHARED_SWEEP = {"tests/test_report.py", "tests/test_compare.py", "tests/test_dose.py"}


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """Under pytest-xdist (``scripts/test.sh`` runs 3 workers): a test file's tests stay on one
    worker, so its module-scoped harness run is made once, and the three files reading the
    shared sweep share a worker with it. A scheduler of our own rather than ``xdist_group``
    marks: with pytest 9.2 and xdist 3.8 those marks were silently ignored (every module's
    harness run was made on both workers, and the suite took 13 minutes instead of 7)."""
    from xdist.scheduler import LoadScopeScheduling

    class FileScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "shared_sweep" if path in SHARED_SWEEP else path

    return FileScheduling(config, log)


#: Test files by how long they take (slowest first as of 2026-11-28, roughly; a fresh clone on
#: an idle 2-core box). The scheduler hands files out in collection order (scripts/test.sh
#: passes --no-loadscope-reorder; xdist's own order, by number of tests, put these files with
#: few tests last), so the long ones go first and the short ones fill in at the end. A strict
#: longest-first order was tried and was slower (776-824 s against 663-724 s on fresh clones,
#: about 3 CPU-minutes more): it ran the CPU-heavy end-to-end files side by side, where this
#: order pairs them with test_reliability and test_interrupts, which mostly wait.
SLOW_FIRST = (
    "tests/test_reliability.py",
    "tests/test_compare.py",
    "tests/test_interrupts.py",
    "tests/test_stop_leftovers.py",
    "tests/test_ranks.py",
    "tests/test_pipeline_e2e.py",
    "tests/test_corpus_scripts.py",
    "tests/test_profiling.py",
    "tests/test_e2e_smoke.py",
    "tests/test_window.py",
    "tests/test_packaging.py",
    "tests/test_exports.py",
    "tests/test_progress.py",
    "tests/test_smoke_all.py",
    "tests/test_corpus_timer.py",
    "tests/test_faults.py",
    "tests/test_contract.py",
    "tests/test_multinode.py",
    "tests/test_warmer.py",
    "tests/test_readme.py",
    "tests/test_bad_input.py",
    "tests/test_cli_errors.py",
)


#: Set once for the whole session (xdist workers inherit it, and so does every process the
#: tests start): how pytest_sessionfinish tells the tests' own nsys processes from others'.
SESSION_MARK = "BOTTLENECK_TEST_SESSION"
os.environ.setdefault(SESSION_MARK, f"{os.getpid()}-{os.urandom(4).hex()}")

#: Where scripts/setup.sh puts nsys, said when CI lacks it.
NSYS_MISSING = (
    "CI=true but nsys is not on PATH: the tests that profile would all skip. scripts/setup.sh "
    "installs Debian's nsight-systems 2022.4 when run as root (scripts/install-nsys-cpu.sh)"
)


def pytest_configure(config: pytest.Config) -> None:
    """In CI (``CI=true``) a missing nsys fails the suite in one line, as a missing browser
    fails the report's browser test: some 50 tests skip without it, and a skip is not seen.
    Then the heartbeat: never 10 s without a line."""
    if os.environ.get("CI") == "true" and shutil.which("nsys") is None:
        pytest.exit(NSYS_MISSING, returncode=1)
    from tests._heartbeat import register

    register(config)  # a progress line after 8 s of silence (tests/_heartbeat.py)


def leftover_nsys(mark: str) -> list[tuple[int, str]]:
    """(pid, command line) of the live nsys processes (an agent, a report writer) started
    under the session ``mark``: none may outlive the tests."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            env = (proc / "environ").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if "nsys" in cmd.split(" ", 1)[0] and f"{SESSION_MARK}={mark}".encode() in env:
            found.append((int(proc.name), cmd.strip()))
    return found


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """After the whole suite (the xdist controller, or a run without xdist): no nsys process
    the tests started is left (an ``nsys --start-agent`` orphan was once found after the
    suite). Any found is named, stopped, and fails the session."""
    if hasattr(session.config, "workerinput") or not Path("/proc").is_dir():
        return
    mark = os.environ[SESSION_MARK]
    left = leftover_nsys(mark)
    for _ in range(50):  # nsys's own shutdown may take a few seconds
        if not left:
            return
        time.sleep(0.2)
        left = leftover_nsys(mark)
    for pid, _ in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    print("\nnsys processes the tests started outlived them (stopped now):", file=sys.stderr)
    for pid, cmd in left:
        print(f"  {pid}: {cmd[:200]}", file=sys.stderr)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The slow files first (SLOW_FIRST), each file's tests in their own order."""
    rank = {path: i for i, path in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


#: ``python -m harness``, with torch barred from the harness's own process (tests/harness_cli.py).
HARNESS = [sys.executable, str(Path(__file__).resolve().parent / "harness_cli.py")]


#: Environment keys a forked command cannot take as a new interpreter would (they act when
#: Python starts, or when a preloaded module is imported): a command given one of them that
#: differs from this process's runs as a new process (tests/harness_cli.py --serve).
AT_START = ("PYTHON", "OMP_", "MKL_", "OPENBLAS_", "NUMEXPR_", "MPL", "HOME", "LANG", "LC_")


class _Forks:
    """This test process's harness command server (tests/harness_cli.py --serve), started on
    the first command; None where it cannot start or its imports said anything (then every
    command is a new process). BOTTLENECK_TEST_FORK=0 turns it off."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.path = ""
        self.failed = os.environ.get("BOTTLENECK_TEST_FORK") == "0"
        self.lock = threading.Lock()  # tests/test_bad_input.py runs commands from threads

    def socket_path(self) -> str | None:
        with self.lock:
            if self.proc is None and not self.failed:
                self._start()
        return None if self.failed else self.path

    def _start(self) -> None:
        folder = tempfile.mkdtemp(prefix="bncli-")  # short: a socket path has 108 bytes
        self.path = f"{folder}/s"
        err = Path(folder) / "stderr"
        with err.open("w") as fh:
            self.proc = subprocess.Popen(
                [*HARNESS, "--serve", self.path], cwd=REPO, stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=fh, start_new_session=True,
            )  # fmt: skip
        ready = self.proc.stdout.readline() == b"ready\n"
        if not ready or err.read_text():  # a warning of an import would be lost to the commands
            self.failed = True
            self.proc.kill()
            self.proc.wait()
        atexit.register(self.close)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()  # it ends
            self.proc.wait(timeout=30)
        shutil.rmtree(Path(self.path).parent, ignore_errors=True)

    def run(self, args: list[str], env: dict[str, str], timeout: float):
        """``python -m harness ARGS`` in a child forked by the server, as subprocess.run."""
        path = self.socket_path()
        if path is None:
            return None
        with tempfile.TemporaryDirectory(prefix="bncli-") as folder:
            out, err = Path(folder) / "stdout", Path(folder) / "stderr"
            request = {"argv": args, "env": env, "cwd": str(REPO), "stdout": str(out),
                       "stderr": str(err)}  # fmt: skip
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.connect(path)
                conn.sendall(json.dumps(request).encode() + b"\n")
                answers = _Lines(conn)
                pid = answers.number()
                conn.settimeout(timeout)
                try:
                    code = answers.number()
                except TimeoutError:
                    with contextlib.suppress(ProcessLookupError):  # ended meanwhile
                        os.kill(pid, signal.SIGKILL)  # as subprocess.run's timeout does
                    conn.settimeout(None)
                    answers.number()
                    said = [p.read_text() if p.is_file() else "" for p in (out, err)]
                    raise subprocess.TimeoutExpired([*HARNESS, *args], timeout, *said) from None
            return subprocess.CompletedProcess([*HARNESS, *args], code, out.read_text(),
                                               err.read_text())  # fmt: skip


class _Lines:
    """The server's answers on one connection: a number a line (the pid, then the exit code)."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn, self.buf = conn, b""

    def number(self) -> int:
        while b"\n" not in self.buf:
            chunk = self.conn.recv(64)
            if not chunk:
                raise ConnectionError("the harness command server closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return int(line)


_FORKS = _Forks()


def run_cli(args: list[str], *, env: dict[str, str] | None = None, timeout: float = 900):
    """``python -m harness ARGS`` from the repository root (through :data:`HARNESS`); returns
    the CompletedProcess. A child of the command server where it runs (its imports paid once),
    else a new process."""
    # cwd=REPO: `python -m` puts the working folder first on sys.path, so the worker processes
    # the harness starts can import the test plugins under tests/ as well.
    full_env = dict(os.environ, **(env or {}))
    if not any(k.startswith(AT_START) and v != os.environ.get(k) for k, v in full_env.items()):
        done = _FORKS.run(list(args), full_env, timeout)
        if done is not None:
            return done
    return subprocess.run(
        [*HARNESS, *args],
        cwd=REPO,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """One data-set cache for the whole session, so JPEGs are generated once."""
    return tmp_path_factory.getbasetemp() / "cache"


#: The terminal width the console output is written for (harness.core.console.WIDTH).
CONSOLE_WIDTH = 100


def assert_fits(text: str) -> None:
    """Every line of ``text`` fits a terminal 100 columns wide (the failing lines in the
    message)."""
    long = [line for line in text.splitlines() if len(line) > CONSOLE_WIDTH]
    assert not long, "\n".join(long)


def only_run_dir(results: Path) -> Path:
    runs = [p for p in results.iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    return runs[0]


#: Environment that makes the deliberately broken test scenario (tests/plugins/faulty/) visible.
FAULTY_ENV = {"BOTTLENECK_SCENARIO_MODULES": "tests.plugins.faulty"}


#: The test plugins whose workers build no optimizer and compile nothing: their fork servers
#: and new interpreters skip the default preload (torch._dynamo: about 2 s of CPU each on 2
#: cores), which would buy them nothing.
NO_DYNAMO = ("faulty", "faulty_dist")


def smoke_args(scenario: str, results: Path, *extra: str) -> list[str]:
    """CLI arguments for a quick, unprofiled smoke-size run of ``scenario`` into ``results``."""
    return [
        "run",
        f"+scenario={scenario}",
        "size=smoke",
        "harness.repeats=1",
        "nsys.enabled=false",
        "harness.progress=false",
        f"harness.results_dir={results}",
        *(["harness.fork_preload=[]"] if scenario in NO_DYNAMO else []),
        *extra,
    ]


def faulty_args(results: Path, *extra: str) -> list[str]:
    """CLI arguments for a quick, unprofiled run of the faulty scenario into ``results``."""
    return smoke_args("faulty", results, *extra)
