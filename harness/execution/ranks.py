"""Forked ranks: a distributed timing unit's processes forked from the fork server, not torchrun.

Under torchrun every rank of every variant is a fresh interpreter that imports torch and the
scenarios: minutes of imports and start-up over the workers of the distributed scenarios
(docs/measurement.md). The unprofiled fork server (:mod:`harness.execution.forkserver`) has
imported them once and never touches CUDA, so on one node (``dist.nnodes=1``,
``harness.fork_ranks``) the N ranks of a timing unit are forked from it instead: each a
process of its own, in a session of its own, with its own CUDA context made after the fork and
its own process group, and the environment torchrun gives a rank (:func:`rank_env`). Rank 0
hosts the rendezvous store on a port the kernel picks (``harness.execution.worker.forked_rendezvous``)
and writes ``result.json`` as under torchrun. All ranks write to the unit's ``stdout.log`` and
``stderr.log`` (appended, as torchrun's ranks share its output).

The parent treats the ranks as one worker (:class:`RankGroup`): timed, polled and killed as
one. As torchrun does, once any rank fails (a non-zero exit or a signal) the others are
stopped at once; a hang is the unit's time limit, which kills every rank; a stop signal kills
every rank. Profiled units stay ``nsys profile ... torchrun`` (nsys must start them: several
processes sharing one traced server's capture ranges is untested on the GPU), and multi-node
runs keep torchrun's rendezvous.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from pathlib import Path
from typing import Any

from harness.core import runfolder as rf
from harness.core import signals
from harness.execution.execute import kill_group, popen, stop_group, worker_env
from harness.execution.forkserver import ForkServer, ForkServerError
from harness.execution.worker import RDZV_FILE_ENV

#: How often :meth:`RankGroup.wait` looks at its ranks (seconds).
POLL_S = 0.02


def rank_env(env: dict[str, str], rank: int, world: int, run_id: str, rdzv: Path) -> dict[str, str]:
    """A rank's environment: ``env`` plus what torchrun's agent sets for a rank on one node
    (``--standalone``: its store shared with the workers), and the rendezvous file. The NCCL
    and CUDA variables of ``env`` pass through untouched. ``MASTER_PORT`` is set in the rank
    once rank 0's store listens (the port is the kernel's pick, never raced for)."""
    own = {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "GROUP_RANK": "0",
        "ROLE_RANK": str(rank),
        "ROLE_NAME": "default",
        "LOCAL_WORLD_SIZE": str(world),
        "WORLD_SIZE": str(world),
        "GROUP_WORLD_SIZE": "1",
        "ROLE_WORLD_SIZE": str(world),
        "MASTER_ADDR": "127.0.0.1",
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_RUN_ID": run_id,
        "TORCHELASTIC_USE_AGENT_STORE": "True",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": env.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
        RDZV_FILE_ENV: str(rdzv),
    }
    return {**{k: v for k, v in env.items() if k != "MASTER_PORT"}, **own}


class RankGroup:
    """The ranks of one unit as one worker, with the part of :class:`subprocess.Popen` the
    runner uses (``pid``, ``poll``, ``wait``, ``returncode``); :func:`harness.execution.execute.kill_group`
    stops every rank (:attr:`members`)."""

    def __init__(self, ranks: list[Any], args: list[str], out_dir: Path) -> None:
        self.members = ranks
        """One process per rank, rank 0 first (each leads a session of its own)."""
        self.args = args
        self.out_dir = out_dir
        self.returncode: int | None = None
        self.failed_rank: int | None = None
        """The rank whose failure ended the unit (None: none failed)."""

    @property
    def pid(self) -> int:
        """Rank 0's pid (it writes result.json; status.json records it)."""
        return int(self.members[0].pid)

    @property
    def orphaned(self) -> bool:
        """A rank's server ended while it ran: its exit code is not known."""
        return any(getattr(p, "orphaned", False) for p in self.members)

    @property
    def note(self) -> str:
        """What ended the unit, where one rank failed ('' otherwise)."""
        if self.failed_rank is None:
            return ""
        code = self.members[self.failed_rank].returncode
        return (
            f"rank {self.failed_rank} of {len(self.members)} ended first, with exit code "
            f"{code}; the other ranks were stopped then"
        )

    def poll(self) -> int | None:
        """The unit's exit code once it has ended, else None. The first rank seen failing
        ends it: the others are killed at once (torchrun's guarantee) and its code is the
        unit's. Every rank exiting 0 is 0."""
        if self.returncode is not None:
            return self.returncode
        codes = [p.poll() for p in self.members]
        bad = [r for r, code in enumerate(codes) if code not in (None, 0)]
        if bad:
            self.failed_rank = bad[0]
            failed = codes[bad[0]]
            if any(code is None for code in codes):
                stop_group(self, self.out_dir)
            self.returncode = failed
            return failed
        if all(code == 0 for code in codes):
            self.returncode = 0
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """The unit's exit code (see :meth:`poll`); TimeoutExpired after ``timeout`` s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            time.sleep(POLL_S)
        return code


def spawn_ranks(
    server: ForkServer, cmd: list[str], out_dir: Path, env: dict[str, str], world: int, run_id: str
) -> RankGroup:
    """Fork ``world`` ranks of ``cmd`` (``python -m harness.execution.worker ...``) from ``server``, all
    logging to the unit's logs (emptied first). ForkServerError when one could not be forked
    (the ranks already forked are killed first)."""
    rdzv = out_dir / rf.RDZV
    rdzv.unlink(missing_ok=True)
    for log in (rf.STDOUT, rf.STDERR):
        (out_dir / log).write_bytes(b"")
    ranks: list[Any] = []
    try:
        for rank in range(world):
            ranks.append(
                server.spawn(
                    cmd, out_dir / rf.STDOUT, out_dir / rf.STDERR,
                    rank_env(env, rank, world, run_id, rdzv), append=True,
                )
            )  # fmt: skip
    except BaseException:
        if ranks:
            kill_group(RankGroup(ranks, cmd, out_dir))
        raise
    return RankGroup(ranks, cmd, out_dir)


def launch_ranks(
    server: ForkServer,
    cmd: list[str],
    fallback: list[str],
    out_dir: Path,
    extra_env: dict[str, str],
    world: int,
    run_id: str,
) -> Any:
    """Start a distributed unit's ``world`` ranks forked from ``server`` (a :class:`RankGroup`),
    or, where the server cannot fork them, ``fallback`` (its torchrun command) as a new process
    in a session of its own."""
    env = worker_env(extra_env)
    group: list[RankGroup] = []
    try:  # held against stop signals: no rank starts unseen
        with contextlib.suppress(ForkServerError), signals.deferred():
            group.append(spawn_ranks(server, cmd, out_dir, env, world, run_id))
    except BaseException:  # a stop signal held back during the forks arrives now
        for item in group:
            kill_group(item)
        raise
    return group[0] if group else popen(fallback, out_dir, env)
