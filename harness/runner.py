"""The parent: runs every selected variant in its own process, profiles it, and keeps tables.

Order per scenario: ``repeats`` unprofiled timing rounds, interleaved across variants (so every
variant sees the same machine state and speedups are side-by-side ratios), then one profiled run
per variant under nsys with its SQLite export. After every unit the run folder's tables are
rebuilt from the files on disk, so a later crash, timeout or Ctrl-C never loses finished work.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from harness import envinfo
from harness import nsys as nsys_mod
from harness.atomic import ResultWriteError, read_json, write_frame, write_json
from harness.config import SuiteConfig, UsageError, discover_scenarios
from harness.forkserver import ForkServer, ForkServerError
from harness.stats import speedup_ci, summarize
from harness.worker import LAUNCHED_AT_ENV, OOM_EXIT_CODE, OOM_MARKER, WorkerSpec
from scenarios import Scenario

REPO_ROOT = Path(__file__).resolve().parent.parent

NO_GPU_NOTE = (
    "No NVIDIA GPU found (nvidia-smi is missing or lists none): running the smoke sizes on the "
    "CPU. Timings are CPU timings and say nothing about GPU speedups; bf16 autocast, "
    "channels_last, DALI's GPU decoder and cudaProfilerApi capture are off, and nsys (if present) "
    "records NVTX and OS-runtime activity only, no kernels or copies."
)


@dataclass(frozen=True)
class Unit:
    """One worker process: a scenario's variant in one phase ('timing-<r>' or 'profile')."""

    scenario: str
    variant: str
    phase: str

    def dir(self, run_dir: Path) -> Path:
        return run_dir / self.scenario / self.variant / self.phase

    @property
    def label(self) -> str:
        return f"{self.scenario}/{self.variant} [{self.phase}]"


class RunLockedError(RuntimeError):
    """Another harness process is running into this results folder."""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RunLock:
    """An exclusive lock file in the results folder; a stale one (dead pid) is taken over.

    It guards the results folder rather than one run folder: two suites at once on one machine
    would skew each other's timings, so the second is refused before it creates anything.
    """

    def __init__(self, results_dir: Path, name: str = ".lock") -> None:
        self.path = results_dir / name

    def __enter__(self) -> RunLock:
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                try:
                    pid = int(self.path.read_text().split()[0])
                except (OSError, ValueError, IndexError):
                    pid = -1
                if pid > 0 and _pid_alive(pid):
                    raise RunLockedError(
                        f"results folder {self.path.parent} is in use by harness process {pid} "
                        f"(lock file {self.path}); two suites at once would skew each other's "
                        "timings. Wait for it to finish or choose another harness.results_dir. "
                        "Nothing was changed."
                    ) from None
                self.path.unlink(missing_ok=True)
                continue
            with os.fdopen(fd, "w") as fh:
                fh.write(f"{os.getpid()} {dt.datetime.now(dt.timezone.utc).isoformat()}\n")
            return self
        raise RunLockedError(f"could not take the lock {self.path}")

    def __exit__(self, *exc: object) -> None:
        self.path.unlink(missing_ok=True)


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


def _signal_all(pgid: int, pids: list[int], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _kill_group(proc: Any, grace_s: float = 5.0) -> None:
    """Terminate the worker's process group (loader workers, nsys) and every descendant that
    left it: torchrun starts each rank in a session of its own, out of the group's reach.

    Descendants are listed before the first signal, since once their parent dies they are
    re-parented and can no longer be told apart. SIGTERM first (workers unwind and clean up),
    SIGKILL for whatever is left once the leader is gone or the grace time is over.
    """
    family = _descendants(proc.pid)
    _signal_all(proc.pid, family, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)
    family += [pid for pid in _descendants(proc.pid) if pid not in family]
    _signal_all(proc.pid, family, signal.SIGKILL)
    proc.wait()


def _remove_partial(out_dir: Path) -> None:
    """Drop temp files of atomic writes a killed worker could not clean up (SIGKILL)."""
    for tmp in out_dir.glob(".*.tmp"):
        tmp.unlink(missing_ok=True)


def _tail(path: Path, n: int = 15) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


@dataclass
class Outcome:
    status: str  # ok | skipped | failed | oom | timeout | evidence_failed | no_result | finalizing
    error: str = ""
    returncode: int | None = None
    wall_s: float = 0.0
    export_s: float | None = None
    """Seconds ``nsys export`` took (profile phase); None: not exported (yet)."""
    finalize_s: float | None = None
    """Seconds nsys went on writing its report after the worker had ended, in the background
    (nsys.background_finalize); None: waited for in line (included in ``wall_s``)."""
    finishing: Any = field(default=None, repr=False, compare=False)
    """The nsys process still writing its report (not recorded)."""

    def record(self) -> dict[str, Any]:
        """The JSON-safe fields, for status.json."""
        return {k: v for k, v in asdict(replace(self, finishing=None)).items() if k != "finishing"}


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
    """Run one worker command (argument list) in its own session with a timeout; through the
    fork server when one is given (``python -m harness.worker`` commands only).

    ``detach_when(proc)``: polled while the command runs; once it is true the command is left
    to finish on its own and returned as the outcome's ``finishing`` (an nsys writing its
    report after the profiled worker has ended), to be waited for with :func:`finish`.
    """
    env = dict(os.environ, PYTHONUNBUFFERED="1", **{LAUNCHED_AT_ENV: repr(time.time())})
    for key, value in (extra_env or {}).items():
        env.setdefault(key, value)  # the user's own setting wins
    t0 = time.perf_counter()
    stdout, stderr = out_dir / "stdout.log", out_dir / "stderr.log"
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        proc: Any = None
        if forkserver is not None:
            with contextlib.suppress(ForkServerError):  # gone: start this one the usual way
                proc = forkserver.spawn(cmd, stdout, stderr, env)
        if proc is None:
            proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, start_new_session=True)
        try:
            if detach_when is not None and _wait_or_detach(proc, timeout_s, detach_when):
                return Outcome("finalizing", "", None, time.perf_counter() - t0, finishing=proc)
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            _remove_partial(out_dir)
            return Outcome(
                "timeout",
                f"{label} did not finish within harness.timeout_s={timeout_s:g} s; its process "
                f"group was killed. Last lines of stderr:\n{_tail(out_dir / 'stderr.log')}",
                None,
                time.perf_counter() - t0,
            )
        except BaseException:
            _kill_group(proc)
            _remove_partial(out_dir)
            raise
    wall = time.perf_counter() - t0
    tail = _tail(out_dir / "stderr.log")
    if rc == OOM_EXIT_CODE or OOM_MARKER in tail:
        said = next((ln for ln in tail.splitlines() if OOM_MARKER in ln), "")
        return Outcome(
            "oom",
            f"{label} ran out of memory after {wall:.1f} s "
            f"({said.split(OOM_MARKER, 1)[-1].strip() or f'exit code {rc}'}). On the CPU each "
            f"worker's address space is capped by harness.memory_cap_gb={memory_cap_gb} GiB "
            "(null: no cap); raise it or run a smaller size. On a GPU this is CUDA running out of "
            "device memory: lower the scenario's batch size or severity. Other variants' results "
            f"are kept; full stderr in {out_dir / 'stderr.log'}.",
            rc,
            wall,
        )
    if rc != 0:
        return Outcome(
            "failed",
            f"{label} exited with code {rc} after {wall:.1f} s. Last lines of stderr "
            f"({out_dir / 'stderr.log'}):\n{_tail(out_dir / 'stderr.log')}",
            rc,
            wall,
        )
    if not (out_dir / "result.json").is_file():
        return Outcome("no_result", f"{label} exited 0 but wrote no result.json", rc, wall)
    return Outcome("ok", "", rc, wall)


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
    ``harness.worker`` process (nor torchrun launching one) is left below nsys."""

    def ended(proc: Any) -> bool:
        if not (out_dir / "result.json").is_file():
            return False
        for pid in _descendants(proc.pid):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"harness.worker" in cmdline:
                return False
        return True

    return ended


def finish(outcome: Outcome, out_dir: Path, timeout_s: float, label: str) -> Outcome:
    """Wait for the nsys a profiled outcome left writing its report (see ``detach_when``)."""
    proc = outcome.finishing
    if proc is None:
        return outcome
    t0 = time.perf_counter()
    try:
        rc = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return replace(
            outcome,
            status="evidence_failed",
            error=f"{label}: nsys was still writing its report {timeout_s:g} s after the "
            f"worker ended; killed. Last lines of its output:\n{_tail(out_dir / 'stdout.log')}",
            finalize_s=time.perf_counter() - t0,
            finishing=None,
        )
    done = replace(
        outcome, status="ok", returncode=rc, finalize_s=time.perf_counter() - t0, finishing=None
    )
    if rc != 0:
        return replace(
            done,
            status="evidence_failed",
            error=f"{label}: nsys exited with code {rc} while writing its report. Last lines "
            f"of its output:\n{_tail(out_dir / 'stdout.log')}\n{_tail(out_dir / 'stderr.log')}",
        )
    return done


# -- distributed launch (torchrun, one or several nodes) ------------------------------------------
#
# A scenario with world_size > 1 runs its worker under torchrun. On one node: --standalone with
# dist.nproc_per_node (default: the scenario's world_size) processes. On several nodes every node
# runs the same `harness run` with its own dist.node_rank, in lockstep over the same units: each
# unit is one torchrun per node meeting at dist.rdzv_endpoint under a rendezvous id of its own, and
# each node profiles its own ranks under its own nsys. Node 0 writes the usual run folder
# <results_dir>/<run_name>/ (manifest, runs.csv, diagnosis; global rank 0 and its result.json live
# there); node k writes a run folder of its own inside it, <run_name>/node<k>/ (manifest, state,
# per-unit logs and status, reports <scenario>__<variant>-node<k>.nsys-rep), so no file is written
# by two nodes: on a shared file system the folder is complete, otherwise copying each node's
# node<k>/ into node 0's run folder gathers it. Each node locks <results_dir>/.lock[.node<k>].


def nproc_per_node(cfg: SuiteConfig, world_size: int) -> int:
    """Processes torchrun starts on this node for a scenario of ``world_size``."""
    return cfg.dist.nproc_per_node or world_size


def node_suffix(cfg: SuiteConfig) -> str:
    """'' on node 0 (and single-node runs), '-node<k>' on node k: tells the nodes' reports apart."""
    return f"-node{cfg.dist.node_rank}" if cfg.dist.node_rank else ""


def lock_name(cfg: SuiteConfig) -> str:
    """The lock file's name: one per node, since each node's pid means nothing on the others."""
    return ".lock" + (f".node{cfg.dist.node_rank}" if cfg.dist.node_rank else "")


def multinode_run_dir(cfg: SuiteConfig) -> Path | None:
    """The named run folder of a multi-node run on this node (created), or None on one node."""
    d = cfg.dist
    if not d.multinode:
        return None
    assert d.run_name is not None  # DistConfig requires it with nnodes > 1
    path = Path(cfg.harness.results_dir) / d.run_name
    if d.node_rank:
        path = path / f"node{d.node_rank}"
    if (path / "manifest.json").exists():
        raise UsageError(
            f"{path} already holds a run (manifest.json); choose another dist.run_name, or "
            f"finish it with harness.resume={path} on this node"
        )
    path.mkdir(parents=True, exist_ok=True)
    return path


def torchrun_program(cfg: SuiteConfig, unit: Unit, world_size: int, spec: Path) -> list[str]:
    """``python -m torch.distributed.run ... -m harness.worker --spec SPEC`` for this node."""
    d = cfg.dist
    cmd = [sys.executable, "-m", "torch.distributed.run"]
    nproc = f"--nproc-per-node={nproc_per_node(cfg, world_size)}"
    if not d.multinode:
        cmd += ["--standalone", nproc]
    else:
        timeout = max(1, round(d.rdzv_timeout_s))
        # One rendezvous per unit: a node that is behind never joins another variant's group.
        rdzv_id = f"{d.rdzv_id or d.run_name}-{unit.scenario}-{unit.variant}-{unit.phase}"
        cmd += [
            f"--nnodes={d.nnodes}",
            nproc,
            f"--rdzv-backend={d.rdzv_backend}",
            f"--rdzv-endpoint={d.rdzv_endpoint}",
            f"--rdzv-id={rdzv_id}",
            "--max-restarts=0",
        ]
        if d.rdzv_backend == "static":
            # Node k's ranks are k*nproc..: global rank 0 (result.json) is on node 0, which
            # hosts the store at rdzv_endpoint; the others wait up to `timeout` to connect.
            cmd += [f"--node-rank={d.node_rank}", f"--rdzv-conf=timeout={timeout}"]
        else:  # c10d ignores --node-rank; node 0 hosts the store by configuration, not by name
            host = "true" if d.node_rank == 0 else "false"
            cmd.append(f"--rdzv-conf=is_host={host},join_timeout={timeout},read_timeout={timeout}")
    return [*cmd, "-m", "harness.worker", "--spec", str(spec)]


def distributed_skip(cfg: SuiteConfig, unit: Unit, world_size: int, gpus: int | None) -> str:
    """Why this node cannot run a unit ('' when it can); ``gpus`` is None on a CPU box."""
    if world_size <= 1:
        if cfg.dist.multinode:
            return (
                f"{unit.label} skipped: a single-process scenario is not run in a multi-node run "
                f"(dist.nnodes={cfg.dist.nnodes})"
            )
        return ""
    nproc = nproc_per_node(cfg, world_size)
    if gpus is not None and gpus < nproc:
        return (
            f"{unit.label} skipped: needs {nproc} GPUs on this node (one per process), this "
            f"machine has {gpus}"
        )
    return ""


def node_outcome(cfg: SuiteConfig, outcome: Outcome, label: str) -> Outcome:
    """A node without global rank 0 finishes a good unit with no result.json: that is 'ok'."""
    d = cfg.dist
    if not d.multinode or outcome.status != "no_result":
        return outcome
    if d.node_rank > 0:
        return Outcome("ok", "", outcome.returncode, outcome.wall_s)
    return Outcome(
        "no_result",
        f"{label} exited 0 but global rank 0 (which writes result.json) ran on another node: "
        f"dist.rdzv_backend={d.rdzv_backend} orders nodes by host name, not node_rank; "
        "dist.rdzv_backend=static keeps rank 0 on node 0",
        outcome.returncode,
        outcome.wall_s,
    )


class Suite:
    """One invocation of ``harness run``."""

    def __init__(self, suite: SuiteConfig, raw: DictConfig) -> None:
        self.cfg = suite
        self.raw = raw
        self.found: dict[str, Scenario] = discover_scenarios()
        if not suite.scenario:
            raise UsageError(
                "no scenario selected; add +scenario=NAME, +scenario=[a,b] or +scenario=all "
                f"(available: {', '.join(sorted(self.found))})"
            )
        self.selected = list(suite.scenario)
        self.gpu = envinfo.detect_gpus()
        self.size = (
            suite.size if suite.size != "auto" else ("full" if self.gpu.present else "smoke")
        )
        self.device = "cuda" if self.gpu.present else "cpu"
        self.nsys: nsys_mod.Nsys | None = None
        self.failures: list[str] = []
        #: Profiled units whose .nsys-rep waits for ``nsys export`` (run after the last worker).
        self.pending_exports: list[Unit] = []
        #: Profiled units whose nsys still writes its report (nsys.background_finalize).
        self.finishing: dict[Unit, Outcome] = {}
        self.forks: ForkServer | None = None
        self._forks_failed = False
        self._write_lock = threading.Lock()

    # -- set-up ---------------------------------------------------------------------------
    def _say(self, msg: str) -> None:
        tqdm.write(msg, file=sys.stderr)

    def _find_nsys(self) -> None:
        if not self.cfg.nsys.enabled:
            self._say("nsys.enabled=false: variants run unprofiled (profiled=false).")
            return
        self.nsys = nsys_mod.find(self.cfg.nsys.path)
        if self.nsys is None:
            looked = ", ".join(nsys_mod.candidates(self.cfg.nsys.path) or ["PATH"])
            self._say(
                "nsys not found (looked at nsys.path, $NSYS, PATH, "
                f"{', '.join(nsys_mod.SEARCH_GLOBS)}{'; ' + looked if looked != 'PATH' else ''}): "
                "running unprofiled, profiled=false. On a CPU box, scripts/install-nsys-cpu.sh "
                "installs it."
            )

    def _resume_dir(self) -> Path | None:
        """The checked run folder to resume, or None for a new run."""
        if not self.cfg.harness.resume:
            return None
        path = Path(self.cfg.harness.resume)
        if not (path / "manifest.json").is_file():
            raise UsageError(f"harness.resume={path}: not a run folder (no manifest.json)")
        return path

    def _new_run_dir(self) -> Path:
        named = multinode_run_dir(self.cfg)  # several nodes: the folder they share, by name
        if named is not None:
            if self.cfg.dist.node_rank:
                self._say(
                    f"node {self.cfg.dist.node_rank} of {self.cfg.dist.nnodes}: this node's logs "
                    f"and reports go to {named}; node 0 writes the tables in {named.parent}"
                )
            return named
        base = Path(self.cfg.harness.results_dir)
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        for i in range(100):
            path = base / (f"{stamp}_{self.gpu.slug}" + (f"-{i}" if i else ""))
            try:
                path.mkdir(parents=True, exist_ok=False)
                return path
            except FileExistsError:
                continue
        raise RuntimeError(f"could not create a run folder under {base}")

    def _manifest(self, run_dir: Path) -> dict[str, Any]:
        path = run_dir / "manifest.json"
        if path.is_file():
            manifest = read_json(path)
            manifest.setdefault("resumed_utc", []).append(_now())
            return manifest
        return {
            "created_utc": _now(),
            "run_dir": str(run_dir),
            "size": self.size,
            "device": self.device,
            "gpu": {
                "names": self.gpu.names,
                "count": len(self.gpu.names),
                "driver": self.gpu.driver,
                "memory_mib": self.gpu.memory_mib,
                "slug": self.gpu.slug,
            },
            "nsys": {"path": self.nsys.path, "version": self.nsys.version} if self.nsys else None,
            "git_sha": envinfo.git_sha(REPO_ROOT),
            **envinfo.host_facts(),
            "config": OmegaConf.to_container(self.raw, resolve=True),
            "scenarios": {
                name: {
                    "bottleneck": self.found[name].bottleneck,
                    "variants": self.found[name].variant_names,
                    "severity": self.cfg.scenario[name].severity,
                    "severity_unit": self.found[name].severity.unit,
                }
                for name in self.selected
            },
        }

    def units(self) -> list[Unit]:
        out: list[Unit] = []
        for name in self.selected:
            variants = self.cfg.scenario[name].variants or self.found[name].variant_names
            for r in range(1, self.cfg.harness.repeats + 1):
                out += [Unit(name, v, f"timing-{r}") for v in variants]
            if self.nsys is not None:
                out += [Unit(name, v, "profile") for v in variants]
        return out

    # -- running --------------------------------------------------------------------------
    def _spec(self, unit: Unit, out_dir: Path) -> Path:
        scen_cfg = OmegaConf.to_container(self.raw.scenario[unit.scenario], resolve=True)
        spec = WorkerSpec(
            scenario=unit.scenario,
            variant=unit.variant,
            phase=unit.phase,
            size=self.size,
            device=self.device,
            config=scen_cfg,  # type: ignore[arg-type]
            seed=self.cfg.harness.seed,
            cache_dir=str(self.cfg.harness.cache_path()),
            out_dir=str(out_dir),
            emit_nvtx=self.cfg.nsys.emit_nvtx and unit.phase == "profile",
            memory_cap_gb=self.cfg.harness.memory_cap_gb,
            max_window_s=self.cfg.harness.window_budget_s(unit.phase),
            min_steps=self.cfg.harness.min_steps,
            max_warmup_s=self.cfg.harness.max_warmup_s,
        )
        path = out_dir / "spec.json"
        write_json(path, asdict(spec))
        return path

    def _forkserver(self) -> ForkServer | None:
        """The fork server for unprofiled workers (started on first use), or None when
        ``harness.fork_server`` is off or it could not start (said once; workers then start
        the usual way)."""
        if not self.cfg.harness.fork_server or self._forks_failed:
            return None
        if self.forks is not None and self.forks.alive:
            return self.forks
        try:
            self.forks = ForkServer()
        except (ForkServerError, OSError) as exc:
            self._forks_failed = True
            self._say(f"fork server unavailable ({exc}); workers start as new interpreters")
            return None
        return self.forks

    def close(self) -> None:
        """Stop the fork server, if one was started; kill any nsys still writing a report
        (only left when the run is interrupted: an exported report is waited for first)."""
        for outcome in self.finishing.values():
            _kill_group(outcome.finishing, grace_s=30.0)
        self.finishing.clear()
        if self.forks is not None:
            self.forks.close()
            self.forks = None

    def worker_env(self) -> dict[str, str]:
        """Compiler caches in the harness cache folder, shared by every worker and kept between
        runs: only the first process that compiles a graph pays for it (about 60 s for
        kernel_flood's compiled variants on the H100, 6 s warm). Variables already set win."""
        cache = self.cfg.harness.cache_path()
        return {
            "TORCHINDUCTOR_CACHE_DIR": str(cache / "torchinductor"),
            "TRITON_CACHE_DIR": str(cache / "triton"),
        }

    def report_base(self, unit: Unit, run_dir: Path) -> Path:
        """The profile's report path without its suffix (.nsys-rep, .qdstrm, .sqlite)."""
        return unit.dir(run_dir) / f"{unit.scenario}__{unit.variant}{node_suffix(self.cfg)}"

    def run_unit(self, unit: Unit, run_dir: Path, *, defer_export: bool = False) -> Outcome:
        """Run one worker process; ``defer_export`` queues a good profile's ``nsys export`` on
        :attr:`pending_exports` instead of running it now (see :meth:`run_exports`)."""
        out_dir = unit.dir(run_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        for stale in ("result.json", "status.json"):
            (out_dir / stale).unlink(missing_ok=True)
        needs = self.found[unit.scenario].variant(unit.variant).needs_gpu
        if needs and self.device != "cuda":
            return Outcome("skipped", f"{unit.label} skipped on a CPU box: {needs}")
        world = self.found[unit.scenario].world_size
        why = distributed_skip(
            self.cfg, unit, world, len(self.gpu.names) if self.device == "cuda" else None
        )
        if why:
            return Outcome("skipped", why)
        spec = self._spec(unit, out_dir)
        program = [sys.executable, "-m", "harness.worker", "--spec", str(spec)]
        if world > 1:
            program = torchrun_program(self.cfg, unit, world, spec)
        cap = self.cfg.harness.memory_cap_gb
        if unit.phase != "profile":
            outcome = run_process(
                program,
                out_dir,
                self.cfg.harness.timeout_s,
                unit.label,
                cap,
                self.worker_env(),
                self._forkserver() if world <= 1 else None,
            )
            return node_outcome(self.cfg, outcome, unit.label)
        assert self.nsys is not None
        report_base = self.report_base(unit, run_dir)
        for ext in (".nsys-rep", ".qdstrm", ".sqlite"):
            report_base.with_suffix(ext).unlink(missing_ok=True)
        cmd = nsys_mod.profile_command(
            self.nsys,
            report_base,
            program,
            trace=self.cfg.nsys.trace,
            gpu=self.device == "cuda",
            cuda_memory_usage=self.cfg.nsys.cuda_memory_usage,
            cuda_graph_trace=self.cfg.nsys.cuda_graph_trace,
            extra_args=self.cfg.nsys.extra_args,
        )
        background = defer_export and self.cfg.nsys.background_finalize
        outcome = run_process(
            cmd,
            out_dir,
            self.cfg.harness.timeout_s,
            unit.label,
            cap,
            self.worker_env(),
            detach_when=worker_has_ended(out_dir) if background else None,
        )
        if outcome.finishing is not None:  # nsys writes the report while the next one runs
            self.finishing[unit] = outcome
            self.pending_exports.append(unit)
            return outcome
        outcome = node_outcome(self.cfg, outcome, unit.label)
        if outcome.status != "ok":
            return outcome
        if defer_export and report_base.with_suffix(".nsys-rep").is_file():
            self.pending_exports.append(unit)
            return outcome
        return self._export(unit, report_base, out_dir, outcome)

    def finish_reports(self, run_dir: Path) -> None:
        """Wait for every nsys still writing a report in the background and record how it
        ended; a failed one leaves the export queue."""
        while self.finishing:
            unit, outcome = next(iter(self.finishing.items()))
            del self.finishing[unit]
            done = finish(outcome, unit.dir(run_dir), self.cfg.harness.timeout_s, unit.label)
            done = node_outcome(self.cfg, done, unit.label)
            self.record(run_dir, unit, done)
            if done.status != "ok" and unit in self.pending_exports:
                self.pending_exports.remove(unit)

    def _export(self, unit: Unit, base: Path, out_dir: Path, outcome: Outcome) -> Outcome:
        """Export ``base``.nsys-rep to SQLite and check it; records how long that took."""
        t0 = time.perf_counter()
        done = self._export_checked(unit, base, out_dir, outcome)
        return replace(done, export_s=time.perf_counter() - t0)

    def run_exports(self, run_dir: Path) -> None:
        """Export every queued report, ``harness.export_workers`` at once. This runs after a
        scenario's last worker so that no export competes with a measurement for CPU or disk."""
        self.finish_reports(run_dir)
        pending, self.pending_exports = self.pending_exports, []
        if not pending:
            return
        workers = min(self.cfg.harness.export_workers, len(pending))
        self._say(f"exporting {len(pending)} nsys reports to SQLite ({workers} at a time)")

        def export(unit: Unit) -> Outcome:
            out_dir = unit.dir(run_dir)
            status = read_json(out_dir / "status.json")
            done = Outcome(
                "ok",
                "",
                status.get("returncode"),
                float(status.get("wall_s") or 0.0),
                finalize_s=status.get("finalize_s"),
            )
            return self._export(unit, self.report_base(unit, run_dir), out_dir, done)

        with ThreadPoolExecutor(workers) as pool:
            futures = {pool.submit(export, unit): unit for unit in pending}
            bar = tqdm(
                as_completed(futures),
                total=len(futures),
                unit="export",
                disable=not self.cfg.harness.progress,
            )
            for fut in bar:
                unit = futures[fut]
                self.record(run_dir, unit, fut.result())
        self.write_tables(run_dir)

    def record(self, run_dir: Path, unit: Unit, outcome: Outcome) -> None:
        """Write a unit's status.json and report a failure or a skip (once per variant)."""
        status_path = unit.dir(run_dir) / "status.json"
        with self._write_lock:
            write_json(status_path, {**outcome.record(), "unit": asdict(unit), "at": _now()})
        if outcome.status == "skipped":
            if unit.phase == "timing-1":  # once per variant, not once per phase
                self._say(outcome.error)
        elif outcome.status not in ("ok", "finalizing"):
            self.failures.append(outcome.error)
            self._say(f"FAILED {unit.label}: {outcome.error}")

    def _export_checked(self, unit: Unit, base: Path, out_dir: Path, outcome: Outcome) -> Outcome:
        assert self.nsys is not None
        rep, qdstrm, sqlite = (base.with_suffix(e) for e in (".nsys-rep", ".qdstrm", ".sqlite"))
        log = _tail(out_dir / "stdout.log", 30) + "\n" + _tail(out_dir / "stderr.log", 30)
        if not rep.is_file():
            if qdstrm.is_file():
                msg = nsys_mod.qdstrm_message(self.nsys, qdstrm, log)
            else:
                msg = f"{unit.label}: nsys finished but wrote no report. nsys said: {log[-400:]}"
            return Outcome("evidence_failed", msg, outcome.returncode, outcome.wall_s)
        cmd = nsys_mod.export_command(self.nsys, rep, sqlite)
        try:
            proc = subprocess.run(
                cmd,
                capture_output=True,
                text=True,
                timeout=self.cfg.nsys.export_timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return Outcome(
                "evidence_failed",
                f"{unit.label}: nsys export took longer than nsys.export_timeout_s="
                f"{self.cfg.nsys.export_timeout_s:g} s",
                outcome.returncode,
                outcome.wall_s,
            )
        if proc.returncode != 0 or not sqlite.is_file():
            return Outcome(
                "evidence_failed",
                f"{unit.label}: nsys export --type sqlite failed (exit {proc.returncode}): "
                f"{(proc.stdout + proc.stderr).strip()[-400:]}",
                outcome.returncode,
                outcome.wall_s,
            )
        problem = check_export(sqlite)
        if problem:
            return Outcome(
                "evidence_failed", f"{unit.label}: {problem}", outcome.returncode, outcome.wall_s
            )
        return outcome

    # -- main loop ------------------------------------------------------------------------
    def run(self) -> int:
        t_start = time.perf_counter()
        walls: dict[str, float] = {}
        if not self.gpu.present:
            self._say(NO_GPU_NOTE)
        self._find_nsys()
        resume = self._resume_dir()
        # A resumed run takes the lock of the results folder it was made in.
        lock_dir = resume.resolve().parent if resume else Path(self.cfg.harness.results_dir)
        lock_dir.mkdir(parents=True, exist_ok=True)
        with RunLock(lock_dir, lock_name(self.cfg)):
            run_dir = resume or self._new_run_dir()
            manifest = self._manifest(run_dir)
            write_json(run_dir / "manifest.json", manifest)
            write_json(run_dir / "state.json", {"state": "running", "updated_utc": _now()})
            units = self.units()
            self._say(f"run folder: {run_dir}  ({len(units)} worker runs, size={self.size})")
            bar = tqdm(total=len(units), unit="run", disable=not self.cfg.harness.progress)
            state = "complete"
            try:
                exports_s = 0.0
                for i, unit in enumerate(units):
                    bar.set_description(unit.label)
                    status_path = unit.dir(run_dir) / "status.json"
                    if self.cfg.harness.resume and _status(status_path) in ("ok", "skipped"):
                        if self._export_missing(unit, run_dir):
                            self.pending_exports.append(unit)
                    else:
                        outcome = self.run_unit(unit, run_dir, defer_export=True)
                        self.record(run_dir, unit, outcome)
                        self.write_tables(run_dir)
                    bar.update(1)
                    # A scenario's reports are exported once its last worker is done: never
                    # beside a measurement, and a run cut off later keeps these exports.
                    if i + 1 == len(units) or units[i + 1].scenario != unit.scenario:
                        t0 = time.perf_counter()
                        self.run_exports(run_dir)
                        exports_s += time.perf_counter() - t0
                bar.close()
                walls["exports_s"] = exports_s
                walls["workers_s"] = time.perf_counter() - t_start - exports_s
            except KeyboardInterrupt:
                state = "interrupted"
                self._say(
                    f"interrupted: finished variants are kept in {run_dir}; finish the rest with "
                    f"harness.resume={run_dir}"
                )
            except ResultWriteError as exc:
                state = "failed"
                self._write_failed(exc)
            finally:
                bar.close()
                try:  # an interrupted run still keeps the reports nsys is writing
                    self.finish_reports(run_dir)
                except KeyboardInterrupt:
                    state = "interrupted"
                except ResultWriteError as exc:
                    state = "failed"
                    self._write_failed(exc)
                self.close()
                if state == "complete" and self.failures:
                    state = "failed"
                table: pd.DataFrame | None = None
                try:
                    table = self.write_tables(run_dir)
                    manifest["worker_env"] = _first_env(run_dir)
                    write_json(run_dir / "manifest.json", manifest)
                except ResultWriteError as exc:
                    table = None
                    if state != "interrupted":
                        state = "failed"
                    self._write_failed(exc)
                try:  # state.json on its own: small, and it must still say what happened
                    write_json(
                        run_dir / "state.json",
                        {"state": state, "failures": len(self.failures), "updated_utc": _now()},
                    )
                except ResultWriteError as exc:
                    table = None
                    self._write_failed(exc)
        if table is None:
            self._say(f"results in {run_dir} are incomplete; finished variants' files are intact.")
            return 130 if state == "interrupted" else 1
        print_summary(table, run_dir)
        t0 = time.perf_counter()
        if state != "interrupted" and table["profiled"].any():
            try:
                self.write_diagnosis(run_dir, table)
            except Exception as exc:  # the tables above are safe; say what broke and fail
                self.failures.append(f"diagnosis failed: {type(exc).__name__}: {exc}")
                self._say(f"FAILED diagnosing the exports in {run_dir}: {exc}")
        walls["diagnosis_s"] = time.perf_counter() - t0
        self.write_timings(run_dir, walls, time.perf_counter() - t_start)
        if state != "interrupted":  # report.html/.md; never raises, the results above are kept
            from harness.report import report_after_run

            t0 = time.perf_counter()
            problem = report_after_run(run_dir, self._say, self.found)
            walls["report_s"] = time.perf_counter() - t0
            self.write_timings(run_dir, walls, time.perf_counter() - t_start)
            if problem == "interrupted":
                return 130
            if problem:
                self.failures.append(problem)
        if state == "interrupted":
            return 130
        return 1 if self.failures else 0

    def write_timings(self, run_dir: Path, walls: dict[str, float], total_s: float) -> None:
        """timings.csv (where each worker's wall time went) and wall_time.json (the suite's
        phases), so a slow suite shows what to fix; printed as one line."""
        try:
            table = build_timings_table(run_dir, self.units())
            write_frame(run_dir / "timings.csv", table)
            sums = {f"{c}": float(table[c].sum()) for c in TIMING_PARTS if c in table}
            write_json(
                run_dir / "wall_time.json",
                {"total_s": total_s, **walls, "worker_parts_s": sums, "updated_utc": _now()},
            )
        except ResultWriteError as exc:
            self._write_failed(exc)
            return
        parts = ", ".join(f"{k.removesuffix('_s')} {v:.0f} s" for k, v in sums.items())
        self._say(f"wall time {total_s:.0f} s; worker processes: {parts}")

    def _export_missing(self, unit: Unit, run_dir: Path) -> bool:
        """A finished profile whose report was never exported (the run stopped before)."""
        base = self.report_base(unit, run_dir)
        return (
            unit.phase == "profile"
            and base.with_suffix(".nsys-rep").is_file()
            and not base.with_suffix(".sqlite").is_file()
        )

    def _write_failed(self, exc: ResultWriteError) -> None:
        """Record and print a failed result write once (the final rewrite may repeat it)."""
        if str(exc) not in self.failures:
            self.failures.append(str(exc))
            self._say(f"FAILED writing results: {exc}")

    # -- diagnosis ------------------------------------------------------------------------
    def write_diagnosis(self, run_dir: Path, table: pd.DataFrame) -> None:
        """diagnosis.csv, verdicts.csv, confusion.csv from the exports; print the verdicts."""
        from harness import verdicts as V

        diag = V.diagnose_run(run_dir, self.found, table)
        verdict = V.verdicts(diag, table, self.found)
        matrix, scores = V.confusion(diag)
        write_frame(run_dir / "diagnosis.csv", diag)
        write_frame(run_dir / "verdicts.csv", verdict)
        work = V.gpu_work_table(run_dir, self.found, table)
        write_frame(run_dir / "gpu_work.csv", work)
        limits = work[work["share_of_limit"].notna()] if "share_of_limit" in work else work.iloc[:0]
        write_frame(run_dir / "confusion.csv", matrix.reset_index(names="injected"))
        write_frame(run_dir / "detector_scores.csv", scores)
        with pd.option_context("display.width", 160, "display.max_colwidth", 90):
            print("\nverdicts:")
            print(verdict[["scenario", "verdict", "reason"]].to_string(index=False))
            print("\nconfusion (rows: injected, columns: primary finding):")
            print(matrix.to_string())
            if not limits.empty:
                print("\nanalytic limits (sum of the baseline's kernel durations per step):")
                cols = ["scenario", "variant", "kernels_per_step", "kernel_ms_per_step"]
                cols += ["step_ms_mean", "limit_ms_per_step", "share_of_limit"]
                print(limits[cols].to_string(index=False, float_format=lambda x: f"{x:.3g}"))

    # -- tables ---------------------------------------------------------------------------
    def write_tables(self, run_dir: Path) -> pd.DataFrame:
        if self.cfg.dist.node_rank:  # node k of a multi-node run: node 0 holds rank 0's results
            return pd.DataFrame(columns=COLUMNS)
        table = build_runs_table(
            run_dir, self.found, self.cfg, self.selected, self.cfg.harness.bootstrap
        )
        write_frame(run_dir / "runs.parquet", table)
        write_frame(run_dir / "runs.csv", table)
        return table


#: Where a worker's wall time goes (timings.csv columns, seconds).
TIMING_PARTS = (
    "startup_s",
    "import_s",
    "cuda_init_s",
    "setup_s",
    "warmup_s",
    "window_s",
    "teardown_s",
    "finalize_s",
    "export_s",
)


def build_timings_table(run_dir: Path, units: list[Unit]) -> pd.DataFrame:
    """One row per worker process: its wall time split into start-up (interpreter and wrappers
    such as nsys or torchrun), imports, set-up, warm-up, the measured window, tear-down (the
    rest, including nsys writing its report when it is waited for in line), nsys writing its
    report in the background (``finalize_s``, not part of ``wall_s``) and the SQLite export."""
    rows: list[dict[str, Any]] = []
    for unit in units:
        out_dir = unit.dir(run_dir)
        status = _read_optional(out_dir / "status.json")
        if status is None:
            continue
        row: dict[str, Any] = {**asdict(unit), "status": status.get("status")}
        wall = float(status.get("wall_s") or 0.0)
        row["wall_s"] = wall
        result = _read_optional(out_dir / "result.json") or {}
        timing = result.get("timing") or {}
        known = 0.0
        for key in TIMING_PARTS[:-3]:  # the worker's own parts, up to its measured window
            value = timing.get("launch_to_main_s" if key == "startup_s" else key)
            row[key] = value
            known += float(value or 0.0)
        row["teardown_s"] = max(0.0, wall - known) if timing else None
        row["finalize_s"] = status.get("finalize_s")
        row["export_s"] = status.get("export_s")
        rows.append(row)
    columns = ["scenario", "variant", "phase", "status", "wall_s", *TIMING_PARTS]
    return pd.DataFrame(rows, columns=columns)


def _read_optional(path: Path) -> dict[str, Any] | None:
    try:
        return read_json(path)
    except (OSError, ValueError):
        return None


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _status(path: Path) -> str | None:
    try:
        return read_json(path).get("status")
    except (OSError, ValueError):
        return None


def _first_env(run_dir: Path) -> dict[str, Any]:
    for res in sorted(run_dir.glob("*/*/*/result.json")):
        try:
            return read_json(res).get("env", {})
        except (OSError, ValueError):
            continue
    return {}


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


COLUMNS = [
    "scenario",
    "variant",
    "kind",
    "bottleneck",
    "size",
    "device",
    "severity",
    "status",
    "n_steps",
    "repeats",
    "step_ms_median",
    "step_ms_p10",
    "step_ms_p90",
    "step_ms_mean",
    "throughput_samples_per_s",
    "samples_per_step",
    "speedup",
    "speedup_ci_low",
    "speedup_ci_high",
    "share_of_ideal",
    "setup_s",
    "profiled",
    "profile_step_ms_mean",
    "probe_effect",
    "report",
    "error",
]


def _load_results(
    vdir: Path,
) -> tuple[list[dict[str, Any]], dict[str, Any] | None, list[str], bool]:
    """Timing results, the profile result, error messages, and whether a phase ran out of memory."""
    timings, profile, errors = [], None, []
    skipped, oom = "", False
    for phase_dir in sorted(p for p in vdir.iterdir() if p.is_dir()) if vdir.is_dir() else []:
        status = _status(phase_dir / "status.json")
        if status is None:
            continue
        if status == "skipped":
            skipped = read_json(phase_dir / "status.json")["error"]
            continue
        res_path = phase_dir / "result.json"
        if status == "oom":
            oom = True
        if status != "ok":
            try:
                errors.append(f"{phase_dir.name}: {read_json(phase_dir / 'status.json')['error']}")
            except (OSError, ValueError, KeyError):
                errors.append(f"{phase_dir.name}: {status}")
        if not res_path.is_file():
            continue
        res = read_json(res_path)
        if phase_dir.name.startswith("timing-") and status == "ok":
            timings.append(res)
        elif phase_dir.name == "profile":
            profile = {**res, "_status": status, "_dir": phase_dir}
    if skipped and not (timings or errors):
        errors = [f"skipped: {skipped}"]
    return timings, profile, errors, oom


def build_runs_table(
    run_dir: Path,
    found: dict[str, Scenario],
    cfg: SuiteConfig,
    selected: list[str],
    bootstrap: int = 2000,
) -> pd.DataFrame:
    """One row per scenario x variant, from the result files on disk (tidy, units in names)."""
    rows: list[dict[str, Any]] = []
    for name in selected:
        scen = found[name]
        variants = cfg.scenario[name].variants or scen.variant_names
        steps: dict[str, list[float]] = {}
        for vname in variants:
            timings, profile, errors, oom = _load_results(run_dir / name / vname)
            row: dict[str, Any] = dict.fromkeys(COLUMNS)
            row.update(
                scenario=name,
                variant=vname,
                kind=scen.variant(vname).kind,
                bottleneck=scen.bottleneck,
                severity=cfg.scenario[name].severity,
                repeats=len(timings),
                profiled=False,
                error=" | ".join(errors) or None,
            )
            if timings:
                pooled = [ms for t in timings for ms in t["step_ms"]]
                steps[vname] = pooled
                row.update(summarize(pooled))
                window = sum(t["window_s"] for t in timings)
                row.update(
                    size=timings[0]["size"],
                    device=timings[0]["device"],
                    n_steps=len(pooled),
                    samples_per_step=timings[0]["samples_per_step"],
                    throughput_samples_per_s=timings[0]["samples_per_step"] * len(pooled) / window,
                    setup_s=float(sum(t["setup_s"] for t in timings) / len(timings)),
                )
            if profile is not None:
                rep = next(profile["_dir"].glob("*.nsys-rep"), None)
                row["profiled"] = profile["_status"] == "ok"
                row["profile_step_ms_mean"] = float(
                    sum(profile["step_ms"]) / len(profile["step_ms"])
                )
                if row["step_ms_mean"]:
                    row["probe_effect"] = row["profile_step_ms_mean"] / row["step_ms_mean"]
                row["report"] = str(rep.relative_to(run_dir)) if rep else None
            if errors and errors[0].startswith("skipped: "):
                row["status"] = "skipped"
            elif oom:
                row["status"] = "oom"
            else:
                row["status"] = (
                    "ok" if not errors and timings else ("failed" if errors else "missing")
                )
            rows.append(row)
        base = steps.get(scen.baseline.name)
        ideal = next((v.name for v in scen.variants if v.kind == "ideal"), None)
        for row in rows:
            if row["scenario"] != name or row["variant"] not in steps:
                continue
            mine = steps[row["variant"]]
            if base:
                sp, lo, hi = speedup_ci(base, mine, resamples=bootstrap, seed=cfg.harness.seed)
                row.update(speedup=sp, speedup_ci_low=lo, speedup_ci_high=hi)
            if ideal and ideal in steps:
                row["share_of_ideal"] = (sum(steps[ideal]) / len(steps[ideal])) / (
                    sum(mine) / len(mine)
                )
    frame = pd.DataFrame(rows, columns=COLUMNS)
    for col in ("n_steps", "repeats", "samples_per_step"):
        frame[col] = frame[col].astype("Int64")
    frame["profiled"] = frame["profiled"].astype(bool)
    return frame


def print_summary(table: pd.DataFrame, run_dir: Path) -> None:
    """A compact table on stdout: the numbers a performance engineer reads first."""
    if table.empty:
        print(f"no results in {run_dir}")
        return
    view = table[
        [
            "scenario",
            "variant",
            "status",
            "step_ms_median",
            "throughput_samples_per_s",
            "speedup",
            "speedup_ci_low",
            "speedup_ci_high",
            "share_of_ideal",
            "probe_effect",
        ]
    ].rename(
        columns={
            "step_ms_median": "step_ms",
            "throughput_samples_per_s": "samples/s",
            "speedup_ci_low": "ci_low",
            "speedup_ci_high": "ci_high",
            "share_of_ideal": "of_ideal",
            "probe_effect": "probe",
        }
    )
    with pd.option_context("display.width", 160, "display.max_columns", 20):
        print(view.to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    print(f"\nrun folder: {run_dir}")
