"""The ncu processes: one per variant, each over the variant's own worker, ``parallel`` at once.

Each variant gets a unit folder ``<run>/<scenario>/<variant>/ncu/``: ``spec.json`` (its profiled
run's spec, pointed at this folder, with a zero warm-up budget, ``window_steps`` measured steps
and no host probes), ``stdout.log`` / ``stderr.log`` (the worker's output and ncu's messages),
``ncu.csv`` (the raw page), ``kernels.ncu-rep`` (the report, for ncu-ui) and ``outcome.json``.
The folder holds no status.json, so the run's tables never read it as a timing or profile unit.

Every process starts in a session of its own; one past ``timeout_s`` has its process group (ncu
and the worker under it) stopped with SIGTERM, then SIGKILL. No process starts once the budget
is spent. A stop signal (KeyboardInterrupt) stops every process this module started, then
propagates. The parent only waits and reads files: it never touches CUDA.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core import atomic
from harness.core import runfolder as rf
from harness.core.kernels_config import KernelsConfig
from harness.kernels.command import ncu_argv
from harness.kernels.plan import Plan
from harness.kernels.select import Candidate
from harness.kernels.tables import RowState

#: The unit folder's name beside a variant's timing and profile folders.
UNIT = "ncu"
CSV = "ncu.csv"
REPORT = "kernels"  # ncu adds .ncu-rep
OUTCOME = "outcome.json"
#: How often the parent looks at its processes (seconds).
POLL_S = 0.1
#: Seconds between SIGTERM and SIGKILL for a process group past its timeout.
KILL_GRACE_S = 5.0


@dataclass
class Job:
    """One variant's ncu process."""

    cand: Candidate
    plan: Plan
    unit_dir: Path
    argv: list[str]
    env: dict[str, str]
    state: RowState | None = None
    reason: str = ""
    rc: int | None = None
    wall_s: float = 0.0
    proc: Any = field(default=None, repr=False)
    started: float = 0.0
    start_s: float = float("nan")
    """When it started, seconds after the step began."""
    launches: int = 0
    """Launches it is to profile (its chosen names' configurations in one step; ``top`` for
    a blind run)."""

    @property
    def csv(self) -> Path:
        return self.unit_dir / CSV


def unit_spec(cand: Candidate, unit_dir: Path, cfg: KernelsConfig) -> dict[str, Any]:
    """The profiled run's spec for a run under ncu: out_dir this folder, no gate, zero warm-up
    budget, ``window_steps`` steps, no capture lead steps, no host probes, no Kineto."""
    spec = dict(cand.spec)
    config = dict(spec.get("config") or {})
    size = str(spec.get("size", "full"))
    if isinstance(config.get(size), dict):
        config[size] = {**config[size], "steps": cfg.window_steps}
    spec.update(
        config=config, phase=UNIT, out_dir=str(unit_dir), gate=False, parent_pid=None,
        report_progress=True, max_warmup_s=cfg.warmup_s, max_window_s=None, min_steps=1,
        capture_lead_steps=0, probe_launches=0, kineto=None, emit_nvtx=False,
        exit_after_capture=False, warm_only=False,
    )  # fmt: skip
    return spec


def prepare(
    cand: Candidate, plan: Plan, names: list[str], ncu: str, run_dir: Path, cfg: KernelsConfig,
    launches: int = 0,
) -> Job:  # fmt: skip
    """The unit folder, its spec.json and the ncu command of one variant over ``names`` (its
    chosen kernels). No names (a graph-level trace, whose plan has no kernel rows): the
    window's first ``top`` launches instead."""
    unit_dir = rf.variant_dir(run_dir, cand.scenario, cand.variant) / UNIT
    unit_dir.mkdir(parents=True, exist_ok=True)
    for stale in (CSV, OUTCOME, REPORT + ".ncu-rep", rf.RESULT):
        (unit_dir / stale).unlink(missing_ok=True)
    spec_path = unit_dir / rf.SPEC
    atomic.write_json(spec_path, unit_spec(cand, unit_dir, cfg))
    program = [sys.executable, "-m", "harness.execution.worker", "--spec", str(spec_path)]
    argv = ncu_argv(ncu, cfg, log=unit_dir / CSV, program=program, names=names or None,
                    name_base=plan.name_base, report=unit_dir / REPORT)  # fmt: skip
    if not names:
        _first_launches(argv, cfg.top)
        launches = cfg.top
    cache = Path(str(cand.spec.get("cache_dir") or Path.home() / ".cache" / "bottleneck-suite"))
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache / "torchinductor"))
    env.setdefault("TRITON_CACHE_DIR", str(cache / "triton"))
    return Job(cand=cand, plan=plan, unit_dir=unit_dir, argv=argv, env=env, launches=launches)


def _first_launches(argv: list[str], count: int) -> None:
    """In place: every launch counts (``--filter-mode global``), the first ``count``."""
    for i, arg in enumerate(argv[:-1]):
        if arg == "--filter-mode":
            argv[i + 1] = "global"
        elif arg == "--launch-count":
            argv[i + 1] = str(count)


def _start(job: Job) -> None:
    out = (job.unit_dir / rf.STDOUT).open("wb")
    err = (job.unit_dir / rf.STDERR).open("wb")
    try:
        job.proc = subprocess.Popen(job.argv, stdout=out, stderr=err, env=job.env,
                                    stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    except OSError as exc:
        job.state, job.reason = RowState.FAILED, f"could not start ncu: {exc}"
    finally:
        out.close()
        err.close()
    job.started = time.monotonic()


def _stop(job: Job) -> None:
    """SIGTERM to the job's process group, SIGKILL after the grace time; waits for it."""
    proc = job.proc
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def run_jobs(
    jobs: list[Job],
    cfg: KernelsConfig,
    say: Callable[[str], None],
    t0: float | None = None,
    *,
    stop: threading.Event | None = None,
) -> None:
    """Run every job (``parallel`` at once, each within ``timeout_s``, none started past
    ``budget_s`` from ``t0``); each ends with its state, return code and wall time. ``stop``
    set (from another thread: a stop signal there) stops the running ones and raises
    KeyboardInterrupt."""
    t0 = time.monotonic() if t0 is None else t0
    waiting, running = list(jobs), []
    try:
        while waiting or running:
            if stop is not None and stop.is_set():
                raise KeyboardInterrupt
            over = cfg.budget_s > 0 and time.monotonic() - t0 >= cfg.budget_s
            while waiting and len(running) < cfg.parallel and not over:
                job = waiting.pop(0)
                _start(job)
                job.start_s = job.started - t0
                if job.proc is not None:
                    running.append(job)
            if over:
                for job in waiting:
                    job.state, job.reason = RowState.OVER_BUDGET, "the row's budget was spent"
                waiting = []
            for job in list(running):
                if _finished(job, cfg, say):
                    running.remove(job)
            time.sleep(POLL_S)
    except BaseException:
        for job in running:
            _stop(job)
        raise


def _finished(job: Job, cfg: KernelsConfig, say: Callable[[str], None]) -> bool:
    """Whether ``job`` has ended (stopping it past its timeout); records how."""
    rc = job.proc.poll()
    elapsed = time.monotonic() - job.started
    if rc is None and elapsed <= cfg.timeout_s:
        return False
    if rc is None:
        _stop(job)
        job.state, job.reason = RowState.TIMEOUT, f"past kernels.timeout_s={cfg.timeout_s:g} s"
    job.rc, job.wall_s = job.proc.returncode, time.monotonic() - job.started
    say(f"kernels: {job.cand.label} ended in {job.wall_s:.1f} s (ncu exit {job.rc})")
    return True


#: The worker's timing parts (its result.json ``timing``) an outcome records, by column.
WORKER_PARTS = {
    "worker_cuda_init_s": "cuda_init_s",
    "worker_setup_s": "setup_s",
    "worker_warmup_s": "warmup_s",
    "worker_window_s": "window_s",
}


def worker_parts(job: Job) -> dict[str, float]:
    """The worker's own timing of its parts under ncu (NaN where it wrote no result.json):
    what the row's time model is fitted to."""
    try:
        timing = (rf.read_result(job.unit_dir) or {}).get("timing") or {}
    except rf.CorruptFileError:
        timing = {}
    return {
        col: float(timing[key]) if isinstance(timing.get(key), int | float) else float("nan")
        for col, key in WORKER_PARTS.items()
    }


def tail(path: Path, lines: int = 6) -> str:
    """The last lines of a log, for a failure's reason."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    kept = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return " | ".join(kept[-lines:])[-600:]


class _Held:
    """A ``say`` whose lines wait until :meth:`release` (then pass straight on): the row's
    lines do not break into the lines of the work beside it."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say, self.lock, self.open = say, threading.Lock(), False
        self.lines: list[str] = []

    def __call__(self, msg: str) -> None:
        with self.lock:
            if not self.open:
                self.lines.append(msg)
                return
        self.say(msg)

    def release(self) -> None:
        with self.lock:
            self.open, lines, self.lines = True, self.lines, []
        for msg in lines:
            self.say(msg)


def beside(
    work: Callable[[threading.Event, Callable[[str], None]], None],
    meanwhile: Callable[[], None] | None,
    say: Callable[[str], None],
) -> float:
    """``work(stop, say)`` on a thread of its own while ``meanwhile()`` runs on this one (the
    thread that gets stop signals), its lines held until ``meanwhile`` returns. The seconds
    ``work`` sat finished while ``meanwhile`` still ran (0 when it ended last). An exception on
    this thread (a stop signal) sets ``stop``, waits for ``work`` to stop its processes and is
    raised; then one of ``work``'s own."""
    if meanwhile is None:
        work(threading.Event(), say)
        return 0.0
    stop, held = threading.Event(), _Held(say)
    failed: list[BaseException] = []
    ended: list[float] = []

    def target() -> None:
        try:
            work(stop, held)
        except BaseException as exc:  # raised on the caller's thread below
            failed.append(exc)
        finally:
            ended.append(time.monotonic())

    thread = threading.Thread(target=target, name="kernels-row", daemon=True)
    thread.start()
    try:
        meanwhile()
        done = time.monotonic()
        held.release()
        _join(thread, stop)
    except BaseException:
        stop.set()
        _join(thread, stop)
        held.release()
        raise
    if failed:
        raise failed[0]
    return max(0.0, done - ended[0])


def _join(thread: threading.Thread, stop: threading.Event) -> None:
    """Wait for ``thread``; a stop signal while waiting sets ``stop`` and waits on (its
    processes get SIGTERM, then SIGKILL after the grace time)."""
    while thread.is_alive():
        try:
            thread.join(POLL_S)
        except BaseException:
            stop.set()
            if not thread.is_alive():
                raise
            thread.join()
            raise
