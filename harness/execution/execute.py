"""Running one worker command: its own session, a timeout, a whole-group kill, its outcome.

Also the profile's side: waiting for an nsys that writes its report in the background, and
exporting and checking that report. Knows processes and files, not the suite's plan.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.core import nsys as nsys_mod
from harness.core import runfolder as rf
from harness.core import signals
from harness.core.hostmem import OomWatch
from harness.core.runfolder import Status
from harness.execution.forkserver import ForkServer, ForkServerError
from harness.execution.worker import LAUNCHED_AT_ENV, OOM_EXIT_CODE, OOM_MARKER


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid``, from /proc (empty where there is no /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _signal_all(pgids: list[int], pids: list[int], sig: signal.Signals) -> None:
    for pgid in pgids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def members(proc: Any) -> list[Any]:
    """The processes a worker is made of, each leading a session of its own: the ranks of a
    forked distributed unit (:class:`harness.execution.ranks.RankGroup`), else the one process."""
    return list(getattr(proc, "members", None) or [proc])


def kill_group(proc: Any, grace_s: float = 5.0) -> None:
    """Terminate the worker's process group (loader workers, nsys) and every descendant that
    left it: torchrun starts each rank in a session of its own, out of the group's reach; a
    forked distributed unit is several such processes (:func:`members`), all stopped at once.

    Descendants are listed before the first signal, since once their parent dies they are
    re-parented and can no longer be told apart. SIGTERM first (workers unwind and clean up),
    SIGKILL for whatever is left once the leaders are gone or the grace time is over.
    """
    procs = members(proc)
    leaders = [p.pid for p in procs]
    family = [d for pid in leaders for d in _descendants(pid)]
    _signal_all(leaders, family, signal.SIGTERM)
    _signal_all(leaders, family, signal.SIGCONT)  # a paused process acts on SIGTERM only now
    deadline = time.monotonic() + grace_s
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
    family += [d for pid in leaders for d in _descendants(pid) if d not in family]
    _signal_all(leaders, family, signal.SIGKILL)
    for p in procs:
        p.wait()


def pause_group(proc: Any, pause: bool) -> None:
    """SIGSTOP (``pause``) or SIGCONT a process group and every descendant that left it."""
    _signal_all([proc.pid], _descendants(proc.pid), signal.SIGSTOP if pause else signal.SIGCONT)


def _remove_partial(out_dir: Path) -> None:
    """Drop temp files of atomic writes a killed worker could not clean up (SIGKILL)."""
    for tmp in out_dir.glob(".*.tmp"):
        tmp.unlink(missing_ok=True)


def tail(path: Path, n: int = 15) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


@dataclass
class Outcome:
    status: Status
    error: str = ""
    returncode: int | None = None
    wall_s: float = 0.0
    export_s: float | None = None
    """Seconds ``nsys export`` took (profile phase); None: not exported (yet)."""
    finalize_s: float | None = None
    """Seconds nsys went on writing its report after the worker had ended, in the background
    (nsys.background_finalize); None: waited for in line (included in ``wall_s``)."""
    launched_at: float | None = None
    """When the worker was launched (epoch seconds); None: no process ran (skipped)."""
    ended_at: float | None = None
    """When the parent saw it end, or let go of it under nsys (epoch seconds)."""
    pid: int | None = None
    """The worker's process id (a forked one's; under nsys or torchrun, the launcher's)."""
    finishing: Any = field(default=None, repr=False, compare=False)
    """The nsys process still writing its report (not recorded)."""

    def record(self) -> dict[str, Any]:
        """The JSON-safe fields, for status.json."""
        record = asdict(replace(self, finishing=None))
        del record["finishing"]
        record["status"] = Status(self.status).value
        return record


def worker_env(extra_env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a worker command: the parent's, unbuffered output, its launch time,
    and ``extra_env`` where the parent's environment does not set the key (the user wins)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", **{LAUNCHED_AT_ENV: repr(time.time())})
    for key, value in (extra_env or {}).items():
        env.setdefault(key, value)
    return env


def launch(
    cmd: list[str],
    out_dir: Path,
    extra_env: dict[str, str] | None = None,
    forkserver: ForkServer | None = None,
) -> Any:
    """Start one worker command (argument list) in a session of its own, logging to
    ``out_dir``; through the fork server when one is given (``python -m harness.execution.worker``
    commands only), else as a new process. Returns the process (``poll``, ``wait``, ``pid``)."""
    env = worker_env(extra_env)
    if forkserver is None:
        return popen(cmd, out_dir, env)
    forked: list[Any] = []
    try:  # held against stop signals: no worker starts unseen
        with contextlib.suppress(ForkServerError), signals.deferred():
            forked.append(forkserver.spawn(cmd, out_dir / rf.STDOUT, out_dir / rf.STDERR, env))
    except BaseException:  # a stop signal held back during the fork arrives now
        for proc in forked:
            stop_group(proc, out_dir)
        raise
    return forked[0] if forked else popen(cmd, out_dir, env)


def run_process(
    cmd: list[str],
    out_dir: Path,
    timeout_s: float,
    label: str,
    memory_cap_gb: float | None = None,
    extra_env: dict[str, str] | None = None,
    forkserver: ForkServer | None = None,
    detach_when: Callable[[Any], bool] | None = None,
) -> Outcome:
    """Run one worker command (argument list) in its own session with a timeout, and wait for
    it (:func:`launch`, then :func:`wait_outcome`)."""
    t0 = time.perf_counter()
    watch = OomWatch.start()
    proc: Any = None
    try:
        proc = launch(cmd, out_dir, extra_env, forkserver)
    except BaseException:
        _remove_partial(out_dir)
        raise
    return wait_outcome(proc, out_dir, t0, timeout_s, label, memory_cap_gb, detach_when, watch)


def wait_outcome(
    proc: Any,
    out_dir: Path,
    t0: float,
    timeout_s: float,
    label: str,
    memory_cap_gb: float | None = None,
    detach_when: Callable[[Any], bool] | None = None,
    watch: OomWatch | None = None,
) -> Outcome:
    """Wait for a launched worker (started at ``t0``, ``time.perf_counter``) and say how it
    ended.

    ``detach_when(proc)``: polled while the command runs; once it is true the command is left
    to finish on its own and returned as the outcome's ``finishing`` (an nsys writing its
    report after the profiled worker has ended), to be waited for with :func:`finish`.
    Any exception while it runs (a stop signal: :class:`harness.core.signals.Interrupted`) kills its
    process group before it propagates.
    """
    remaining = max(0.0, timeout_s - (time.perf_counter() - t0))
    try:
        if detach_when is not None and _wait_or_detach(proc, remaining, detach_when):
            return Outcome(Status.FINALIZING, "", None, time.perf_counter() - t0, finishing=proc)
        rc = proc.wait(timeout=remaining)
    except subprocess.TimeoutExpired:
        return timed_out(proc, out_dir, t0, timeout_s, label)
    except BaseException:
        kill_group(proc)
        _remove_partial(out_dir)
        raise
    return ended(rc, time.perf_counter() - t0, out_dir, label, memory_cap_gb, watch)


def timed_out(proc: Any, out_dir: Path, t0: float, timeout_s: float, label: str) -> Outcome:
    """Kill a worker that ran past its time limit and say so."""
    kill_group(proc)
    _remove_partial(out_dir)
    return Outcome(
        Status.TIMEOUT,
        f"{label} did not finish within harness.timeout_s={timeout_s:g} s; its process "
        f"group was killed. Last lines of stderr:\n{tail(out_dir / rf.STDERR)}",
        None,
        time.perf_counter() - t0,
    )


def stop_group(proc: Any, out_dir: Path) -> None:
    """Stop a worker that is still running (a stop signal, or the run failing around it) and
    drop the temp files it could not remove."""
    kill_group(proc)
    _remove_partial(out_dir)


def popen(cmd: list[str], out_dir: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A new interpreter in a session of its own, logging to the unit folder."""
    with open(out_dir / rf.STDOUT, "wb") as out, open(out_dir / rf.STDERR, "wb") as err:
        return subprocess.Popen(cmd, stdout=out, stderr=err, env=env, start_new_session=True)


def ended(
    rc: int,
    wall: float,
    out_dir: Path,
    label: str,
    memory_cap_gb: float | None,
    watch: OomWatch | None = None,
) -> Outcome:
    """The outcome of a worker that exited with ``rc`` on its own; ``watch``: what was known
    of memory at its launch, to tell the kernel's OOM killer's SIGKILL from any other."""
    err_tail = tail(out_dir / rf.STDERR)
    killed = watch.killed(rc) if watch is not None else ""
    if killed:
        return Outcome(
            Status.OOM,
            f"{label} ran out of host memory after {wall:.1f} s: {killed}; run a smaller size, "
            "or fewer workers setting up at once (harness.setup_batch=1). Other variants' "
            f"results are kept; stderr in {out_dir / rf.STDERR}.",
            rc,
            wall,
        )
    if rc == OOM_EXIT_CODE or OOM_MARKER in err_tail:
        said = next((ln for ln in err_tail.splitlines() if OOM_MARKER in ln), "")
        said = said.split(OOM_MARKER, 1)[-1].strip()
        return Outcome(
            Status.OOM,
            f"{label} ran out of memory after {wall:.1f} s ({said or f'exit code {rc}'}). "
            f"{_oom_advice(said, memory_cap_gb)} Other variants' results are kept; full stderr "
            f"in {out_dir / rf.STDERR}.",
            rc,
            wall,
        )
    if rc != 0:
        return Outcome(
            Status.FAILED,
            f"{label} exited with code {rc} after {wall:.1f} s. Last lines of stderr "
            f"({out_dir / rf.STDERR}):\n{err_tail}",
            rc,
            wall,
        )
    if not (out_dir / rf.RESULT).is_file():
        return Outcome(Status.NO_RESULT, f"{label} exited 0 but wrote no result.json", rc, wall)
    return Outcome(Status.OK, "", rc, wall)


def never_started(outcome: Outcome, out_dir: Path) -> bool:
    """A worker command that failed before the worker said anything (no ``.progress.json``):
    its launcher (nsys, torchrun) failed, not the variant. nsys 2022.4 on a loaded CPU box once
    failed so at its start (``sem_open``: no such file) while the previous unit's nsys ended."""
    failed = outcome.status in (Status.FAILED, Status.NO_RESULT)
    return failed and rf.read_progress(out_dir) is None and not (out_dir / rf.RESULT).exists()


def _wait_or_detach(proc: Any, timeout_s: float, detach_when: Callable[[Any], bool]) -> bool:
    """Wait until ``proc`` ends (False) or ``detach_when(proc)`` holds (True); raises
    :class:`subprocess.TimeoutExpired` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None:
        if detach_when(proc):
            return True
        if time.monotonic() > deadline:
            raise subprocess.TimeoutExpired(proc.args, timeout_s)
        time.sleep(0.2)
    return False


def worker_has_ended(out_dir: Path) -> Callable[[Any], bool]:
    """For ``detach_when``: the worker under this nsys wrote its result.json and no
    ``harness.execution.worker`` process (nor torchrun launching one) is left below nsys."""

    def ended(proc: Any) -> bool:
        if not (out_dir / rf.RESULT).is_file():
            return False
        for pid in _descendants(proc.pid):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"harness.execution.worker" in cmdline:
                return False
        return True

    return ended


def crashed_after_report(outcome: Outcome, out_dir: Path, report_base: Path, label: str) -> Outcome:
    """A profiled worker that wrote its result, and whose nsys wrote the report, but that then
    died on its way out (a library's tear-down crashing: SIGSEGV, exit code 139) leaves good
    evidence: ``ok``, with what happened kept in ``error``. Anything else is left as it is."""
    report = report_base.with_suffix(rf.REPORT_SUFFIX)
    if outcome.status not in (Status.FAILED, Status.EVIDENCE_FAILED):
        return outcome
    if outcome.returncode in (None, 0) or not (out_dir / rf.RESULT).is_file():
        return outcome
    if not report.is_file():
        return outcome
    return replace(
        outcome,
        status=Status.OK,
        error=f"{label}: exited with code {outcome.returncode} after writing its result, and "
        f"nsys had written {report.name}: the crash came in the process's tear-down, after "
        "the measurement; the report is used",
    )


def finish(outcome: Outcome, out_dir: Path, timeout_s: float, label: str) -> Outcome:
    """Wait for the nsys a profiled outcome left writing its report (see ``detach_when``)."""
    proc = outcome.finishing
    if proc is None:
        return outcome
    t0 = time.perf_counter()
    try:
        rc = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        return replace(
            outcome,
            status=Status.EVIDENCE_FAILED,
            error=f"{label}: nsys was still writing its report {timeout_s:g} s after the "
            f"worker ended; killed. Last lines of its output:\n{tail(out_dir / rf.STDOUT)}",
            finalize_s=time.perf_counter() - t0,
            finishing=None,
        )
    done = replace(
        outcome,
        status=Status.OK,
        returncode=rc,
        finalize_s=time.perf_counter() - t0,
        finishing=None,
    )
    if rc != 0:
        return replace(
            done,
            status=Status.EVIDENCE_FAILED,
            error=f"{label}: nsys exited with code {rc} while writing its report. Last lines "
            f"of its output:\n{tail(out_dir / rf.STDOUT)}\n{tail(out_dir / rf.STDERR)}",
        )
    return done


def check_export(sqlite: Path) -> str:
    """Empty string when the export opens and holds NVTX step ranges; else what is wrong."""
    from analysis.trace import TraceError, nvtx_ranges, open_trace

    try:
        with open_trace(sqlite) as trace:
            ranges = nvtx_ranges(trace)
    except TraceError as exc:
        return f"the SQLite export is unusable: {exc}"
    if not (ranges["text"] == "step").any():
        return f"the SQLite export {sqlite.name} holds no NVTX 'step' range (capture window empty?)"
    return ""


def export_report(
    nsys: nsys_mod.Nsys, label: str, base: Path, outcome: Outcome, timeout_s: float
) -> Outcome:
    """Export ``base``.nsys-rep to SQLite and check it; ``outcome`` with ``export_s`` set, or
    ``evidence_failed`` saying what went wrong (importer, export, the SQLite file)."""
    t0 = time.perf_counter()
    done = _export_checked(nsys, label, base, outcome, timeout_s)
    return replace(done, export_s=time.perf_counter() - t0)


def _export_checked(
    nsys: nsys_mod.Nsys, label: str, base: Path, outcome: Outcome, timeout_s: float
) -> Outcome:
    rep, qdstrm, sqlite = (base.with_suffix(e) for e in rf.REPORT_SUFFIXES)
    out_dir = base.parent
    log = tail(out_dir / rf.STDOUT, 30) + "\n" + tail(out_dir / rf.STDERR, 30)

    def failed(msg: str) -> Outcome:
        return replace(outcome, status=Status.EVIDENCE_FAILED, error=msg, finishing=None)

    if not rep.is_file():
        if qdstrm.is_file():
            return failed(nsys_mod.qdstrm_message(nsys, qdstrm, log))
        return failed(f"{label}: nsys finished but wrote no report. nsys said: {log[-400:]}")
    # Written under a temporary name and renamed once nsys is done: an export cut short (the
    # run stopped mid-export) must not leave a file that a resume takes for a finished export.
    partial = sqlite.with_name(sqlite.stem + rf.PARTIAL_SQLITE_SUFFIX)
    cmd = nsys_mod.export_command(nsys, rep, partial)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        partial.unlink(missing_ok=True)
        return failed(
            f"{label}: nsys export took longer than nsys.export_timeout_s={timeout_s:g} s"
        )
    if proc.returncode != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        return failed(
            f"{label}: nsys export --type sqlite failed (exit {proc.returncode}): "
            f"{(proc.stdout + proc.stderr).strip()[-400:]}"
        )
    os.replace(partial, sqlite)
    problem = check_export(sqlite)
    return failed(f"{label}: {problem}") if problem else outcome


def _oom_advice(said: str, memory_cap_gb: float | None) -> str:
    """What to change, for the memory that ran out: the GPU's where the error names CUDA (or
    cuBLAS), else the host's (the worker's cap where one is set)."""
    if any(t in said.upper() for t in ("CUDA", "CUBLAS", "ACCELERATOR")):
        return (
            "The GPU's memory ran out (or another process holds it: nvidia-smi lists them): "
            "lower the scenario's batch size or severity."
        )
    if memory_cap_gb is not None:
        return (
            f"Each worker's address space is capped at harness.memory_cap_gb={memory_cap_gb} "
            "GiB: raise it or run a smaller size."
        )
    return "The host's memory ran out (harness.memory_cap_gb=null sets no cap): run a smaller size."
