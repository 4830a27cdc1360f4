"""What a run will do: its units in order, the lock on its results folder, and how each unit
is launched on this node (one process, torchrun on one node, or torchrun across nodes).
"""

from __future__ import annotations

import datetime as dt
import os
import sys
from dataclasses import replace
from pathlib import Path

from harness.core import runfolder as rf
from harness.core.config import SuiteConfig, UsageError
from harness.core.runfolder import Status, Unit
from harness.execution.execute import Outcome


class RunLockedError(RuntimeError):
    """Another harness process is running into this results folder."""


class RunLock:
    """An exclusive lock file in the results folder; a stale one (dead pid) is taken over.

    It guards the results folder rather than one run folder: two suites at once on one machine
    would skew each other's timings, so the second is refused before it creates anything.
    """

    def __init__(self, results_dir: Path, name: str = rf.LOCK) -> None:
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
                if pid > 0 and rf.pid_alive(pid):
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
    return rf.node_suffix(cfg.dist.node_rank)


def lock_name(cfg: SuiteConfig) -> str:
    """The lock file's name: one per node, since each node's pid means nothing on the others."""
    return rf.lock_name(cfg.dist.node_rank)


def multinode_run_dir(cfg: SuiteConfig) -> Path | None:
    """The named run folder of a multi-node run on this node (created), or None on one node."""
    d = cfg.dist
    if not d.multinode:
        return None
    assert d.run_name is not None  # DistConfig requires it with nnodes > 1
    path = rf.node_dir(Path(cfg.harness.results_dir) / d.run_name, d.node_rank)
    if rf.manifest_path(path).exists():
        raise UsageError(
            f"{path} already holds a run (manifest.json); choose another dist.run_name, or "
            f"finish it with harness.resume={path} on this node"
        )
    path.mkdir(parents=True, exist_ok=True)
    return path


def torchrun_program(cfg: SuiteConfig, unit: Unit, world_size: int, spec: Path) -> list[str]:
    """``python -m torch.distributed.run ... -m harness.execution.worker --spec SPEC`` for this node."""
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
    return [*cmd, "-m", "harness.execution.worker", "--spec", str(spec)]


def distributed_skip(cfg: SuiteConfig, unit: Unit, world_size: int, gpus: int | None) -> str:
    """Why this node cannot run a unit ('' when it can), the reason alone (the status says
    'skipped'; the variant and round are columns); ``gpus`` is None on a CPU box."""
    if world_size <= 1:
        if cfg.dist.multinode:
            return (
                "a single-process scenario is not run in a multi-node run "
                f"(dist.nnodes={cfg.dist.nnodes})"
            )
        return ""
    nproc = nproc_per_node(cfg, world_size)
    if gpus is not None and gpus < nproc:
        return f"needs {nproc} GPUs on this node (one per process), this machine has {gpus}"
    return ""


def node_outcome(cfg: SuiteConfig, outcome: Outcome, label: str) -> Outcome:
    """A node without global rank 0 finishes a good unit with no result.json: that is 'ok'."""
    d = cfg.dist
    if not d.multinode or outcome.status != Status.NO_RESULT:
        return outcome
    if d.node_rank > 0:
        return replace(outcome, status=Status.OK, error="")
    return replace(
        outcome,
        status=Status.NO_RESULT,
        error=f"{label} exited 0 but global rank 0 (which writes result.json) ran on another "
        f"node: dist.rdzv_backend={d.rdzv_backend} orders nodes by host name, not node_rank; "
        "dist.rdzv_backend=static keeps rank 0 on node 0",
    )


def plan_units(
    cfg: SuiteConfig,
    selected: list[str],
    variants: dict[str, list[str]],
    profiled: bool,
    last: frozenset[str] = frozenset(),
    kineto: bool = False,
) -> list[Unit]:
    """Every unit of the run, in run order: the scenarios' timing rounds (:func:`timing_units`:
    spread over the group's scenarios, or each scenario's in a row), each interleaved
    across its variants (``timing-1`` of each variant, then ``timing-2``...; odd rounds in
    variant order, even ones reversed, so that no variant always runs first after a pause and
    a round's ratios pair neighbours in time: :func:`round_order`), then their profiles, so that nsys writing a scenario's reports in the background runs beside the next
    scenario's profiled workers, not beside a timing window. Scenarios in ``last`` (those whose
    compiler caches a background process fills meanwhile, harness.warm_compile) get the same
    two parts after all the others' (their timing rounds wait for the reports still being
    written: :meth:`harness.execution.scheduler.Scheduler.ready`), which gives the warm-ups the
    others' whole run to fill the caches in. With ``kineto`` (kineto.enabled) each group's
    PyTorch Profiler runs follow its nsys profiles, one per variant: a process of its own, since
    nsys and the PyTorch Profiler both want CUPTI."""
    out: list[Unit] = []
    spread = cfg.harness.timing.spread_rounds
    for group in ([n for n in selected if n not in last], [n for n in selected if n in last]):
        out += timing_units(group, variants, cfg.harness.repeats, spread)
        if profiled:
            for name in group:
                out += [Unit(name, v, rf.PROFILE) for v in variants[name]]
        if kineto:
            for name in group:
                out += [Unit(name, v, rf.KINETO) for v in variants[name]]
    return out


def timing_units(
    names: list[str], variants: dict[str, list[str]], repeats: int, spread: bool
) -> list[Unit]:
    """The planned timing rounds of ``names``: with ``spread`` (harness.timing.spread_rounds)
    round-major, round 1 of every scenario, then round 2 of every scenario..., so that a
    scenario's rounds lie minutes apart and meet the host's speed modes as the whole run does
    (docs/measurement.md, "Rounds spread over the run"); otherwise each scenario's rounds
    one after the other."""

    def one(name: str, r: int) -> list[Unit]:
        return [Unit(name, v, rf.timing_phase(r)) for v in round_order(variants[name], r)]

    rounds = range(1, repeats + 1)
    if spread:
        return [u for r in rounds for name in names for u in one(name, r)]
    return [u for name in names for r in rounds for u in one(name, r)]


def added_round_at(queue: list[Unit], spread: bool) -> int:
    """Where an added round goes in the queue: first, or with ``spread`` after the timing
    rounds queued first (the other scenarios' rounds of this pass)."""
    at = 0
    if spread:
        while at < len(queue) and rf.is_timing(queue[at].phase):
            at += 1
    return at


def round_order(variants: list[str], r: int) -> list[str]:
    """The variants of timing round ``r`` (1-based) in the order they run: forward in odd
    rounds, reversed in even ones. A variant that always ran first after a pause (the
    previous scenario's profiles, a report being written) would always meet the host in the
    same state; alternating spreads that over the rounds."""
    return list(variants) if r % 2 else list(reversed(variants))


def now_utc() -> str:
    """The time stamp of status, state and manifest records."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
