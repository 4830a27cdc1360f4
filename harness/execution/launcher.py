"""Starting a unit's worker: forked from the fork server, under its own ``nsys profile``, from
its scenario's traced fork server, or as torchrun's ranks; and the background compiler-cache
warm-ups, which start workers of their own.

A unit that cannot run here is not started: its outcome says why (skipped).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.core import nsys as nsys_mod
from harness.core import runfolder as rf
from harness.core.hostmem import OomWatch
from harness.core.runfolder import Status, Unit
from harness.execution.execute import (
    Outcome,
    launch,
    never_started,
    tail,
    worker_has_ended,
)
from harness.execution.forkserver import ForkServer, ForkServerError
from harness.execution.memcheck import size_said
from harness.execution.plan import nproc_per_node, torchrun_program
from harness.execution.ranks import launch_ranks
from harness.execution.runloop import Live
from harness.execution.servers import TracedServers
from harness.execution.settings import Settings, shares_capture_stop
from harness.execution.warmer import CompileWarmer


class Launcher:
    """Starts workers; owns the fork server of unprofiled workers."""

    def __init__(
        self, settings: Settings, traced: TracedServers, say: Callable[[str], None]
    ) -> None:
        self.settings = settings
        self.traced = traced
        self.say = say
        self.forks: ForkServer | None = None
        self._forks_failed = False
        #: Profiles run again because their nsys failed before the worker started.
        self._relaunched: set[Unit] = set()

    def forkserver(self) -> ForkServer | None:
        """The fork server for unprofiled workers (started on first use), or None when
        ``harness.fork_server`` is off or it could not start (said once; workers then start
        the usual way)."""
        if not self.settings.cfg.harness.fork_server or self._forks_failed:
            return None
        if self.forks is not None and self.forks.alive:
            return self.forks
        try:
            self.forks = ForkServer(
                self.settings.server_env(), preload=self.settings.fork_preload()
            )
        except (ForkServerError, OSError) as exc:
            self._forks_failed = True
            self.say(f"fork server unavailable ({exc}); workers start as new interpreters")
            return None
        return self.forks

    def close(self) -> None:
        """Stop the fork server, if started."""
        if self.forks is not None:
            self.forks.close()
            self.forks = None

    def start(self, unit: Unit, run_dir: Path) -> Live | Outcome:
        """Start the unit's worker (its own session; forked, under nsys or torchrun), or the
        outcome of a unit that does not run here (skipped)."""
        s = self.settings
        out_dir = unit.dir(run_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        for stale in [out_dir / rf.RESULT, out_dir / rf.STATUS, *rf.transient_files(out_dir)]:
            stale.unlink(missing_ok=True)
        why = s.skip_reason(unit)
        if why:
            return Outcome(Status.SKIPPED, why)
        world = s.found[unit.scenario].world_size
        if unit.is_profile and self.traced.served(unit):
            served = self.traced.start_served(unit, out_dir)
            if served is not None:
                return served
        forked = not unit.is_profile and (world <= 1 or s.forking_ranks)
        forks = self.forkserver() if forked else None
        spec = s.spec(unit, out_dir, forked=forks is not None)
        worker = [sys.executable, "-m", "harness.execution.worker", "--spec", str(spec)]
        program = torchrun_program(s.cfg, unit, world, spec) if world > 1 else worker
        detach = None
        if unit.is_profile:
            program = self._profile_command(unit, run_dir, program)
            if s.cfg.nsys.background_finalize:
                detach = worker_has_ended(out_dir)
        env = s.worker_env()
        if world > 1:  # torchrun's own default, set here so it does not print its banner
            env.setdefault("OMP_NUM_THREADS", "1")
        watch = OomWatch.start(size_said(s, unit.scenario))
        if world > 1 and forks is not None:  # its ranks forked (torchrun where that fails)
            nproc = nproc_per_node(s.cfg, world)
            proc = launch_ranks(forks, worker, program, out_dir, env, nproc, unit.label)
        else:
            proc = launch(program, out_dir, env, forks)
        one_node = not s.cfg.dist.multinode
        return Live(
            unit,
            proc,
            out_dir,
            s.cfg.harness.timeout_s,
            gated=one_node,
            overlaps=one_node,
            memory_cap_gb=s.cfg.harness.memory_cap_gb,
            oom_watch=watch,
            detach_when=detach,
            quiet_stop=shares_capture_stop(
                profiled=unit.is_profile,
                one_node=one_node,
                world=world,
                overlap_capture_stop=s.overlap_capture_stop,
            ),
        )

    def _profile_command(self, unit: Unit, run_dir: Path, program: list[str]) -> list[str]:
        """``nsys profile ... program`` writing the unit's report (stale reports removed)."""
        s = self.settings
        assert s.nsys is not None
        base = s.report_base(unit, run_dir)
        for ext in rf.REPORT_SUFFIXES:
            base.with_suffix(ext).unlink(missing_ok=True)
        return nsys_mod.profile_command(
            s.nsys,
            base,
            program,
            trace=s.trace_for(unit.scenario),
            gpu=s.device == "cuda",
            cuda_memory_usage=s.cfg.nsys.cuda_memory_usage,
            cuda_graph_trace=s.cfg.nsys.cuda_graph_trace,
            extra_args=s.cfg.nsys.extra_args,
        )

    def relaunch(self, unit: Unit, outcome: Outcome, run_dir: Path) -> bool:
        """A profile under its own ``nsys profile`` whose nsys failed before the worker
        started (:func:`harness.execution.execute.never_started`) runs again, once, at once (a
        served one is run again by its own rule)."""
        served = self.traced.in_served_attempt(unit)
        if not unit.is_profile or served or unit in self._relaunched:
            return False
        if not never_started(outcome, unit.dir(run_dir)):
            return False
        self._relaunched.add(unit)
        said = tail(unit.dir(run_dir) / rf.STDERR, 1) or f"exit code {outcome.returncode}"
        self.say(f"{unit.label}: nsys failed before the worker started ({said}); once more")
        return True

    def warmer(self, todo: list[Unit], run_dir: Path) -> CompileWarmer | None:
        """The background compiler-cache warm-ups of the variants that compile and still run
        (harness.warm_compile); None when there are none."""
        s = self.settings
        if not s.warming:
            return None
        targets: list[tuple[str, str]] = []
        for unit in todo:
            key = (unit.scenario, unit.variant)
            if key not in targets and unit.variant in s.compiling(unit.scenario):
                targets.append(key)
        if not targets:
            return None

        def start(scenario: str, variant: str) -> tuple[Any, Path]:
            folder = rf.warm_dir(run_dir, scenario, variant)
            folder.mkdir(parents=True, exist_ok=True)
            unit = Unit(scenario, variant, rf.timing_phase(1))
            spec = s.spec(unit, folder, forked=False, warm_only=True)
            cmd = [sys.executable, "-m", "harness.execution.worker", "--spec", str(spec)]
            return launch(cmd, folder, s.worker_env()), folder

        return CompileWarmer(
            targets, start, self.say, s.cfg.harness.timeout_s, s.cfg.harness.warm_parallel
        )
