"""The run's records: its folder, manifest.json, state.json, each unit's status.json, and the
tables rebuilt from them (runs, timings, wall time), with the failures they say.

Everything is written through :mod:`harness.core.runfolder` (the layout's one owner), and only
from files on disk, so a later crash, timeout or stop signal never loses finished work.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import OmegaConf

from harness.core import envinfo
from harness.core import runfolder as rf
from harness.core.config import UsageError
from harness.core.resume import task_overrides
from harness.core.runfolder import ResultWriteError, RunState, Status, Unit, read_json, write_json
from harness.execution.collect import (
    COLUMNS,
    build_runs_table,
    build_timings_table,
    wall_time_record,
)
from harness.execution.execute import Outcome
from harness.execution.plan import multinode_run_dir, now_utc
from harness.execution.settings import Settings

REPO_ROOT = Path(__file__).resolve().parent.parent


class Records:
    """Writes what the run did; ``retried(unit, status)``: whether a failed unit runs again (a
    profile forked from a traced server), so its failure is not counted."""

    def __init__(
        self,
        settings: Settings,
        say: Callable[[str], None],
        retried: Callable[[Unit, Status], bool] = lambda unit, status: False,
    ) -> None:
        self.settings = settings
        self.say = say
        self.retried = retried
        self.failures: list[str] = []
        #: Say a skipped variant's reason (once); off where the progress line log gives each
        #: skipped unit a line with it (said twice otherwise).
        self.say_skips = True
        self.started_utc = now_utc()
        self._write_lock = threading.Lock()
        #: Each scenario's runs.csv rows under the state of its files (build_runs_table).
        self._rows: dict[str, Any] = {}

    # -- the run folder and its manifest ------------------------------------------------------
    def resume_dir(self) -> Path | None:
        """The checked run folder to resume, or None for a new run."""
        cfg = self.settings.cfg
        if not cfg.harness.resume:
            return None
        path = Path(cfg.harness.resume)
        if not rf.manifest_path(path).is_file():
            raise UsageError(f"harness.resume={path}: not a run folder (no manifest.json)")
        return path

    def new_run_dir(self) -> Path:
        """A new run folder (several nodes: the one they share, by name)."""
        cfg = self.settings.cfg
        named = multinode_run_dir(cfg)
        if named is not None:
            if cfg.dist.node_rank:
                self.say(
                    f"node {cfg.dist.node_rank} of {cfg.dist.nnodes}: this node's logs "
                    f"and reports go to {named}; node 0 writes the tables in {named.parent}"
                )
            return named
        base = Path(cfg.harness.results_dir)
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        for i in range(100):
            path = base / (f"{stamp}_{self.settings.gpu.slug}" + (f"-{i}" if i else ""))
            try:
                path.mkdir(parents=True, exist_ok=False)
                return path
            except FileExistsError:
                continue
        raise RuntimeError(f"could not create a run folder under {base}")

    def manifest(self, run_dir: Path) -> dict[str, Any]:
        """A resumed run's manifest (its resume stamped), or a new run's."""
        manifest = read_json(rf.manifest_path(run_dir))
        if manifest is not None:
            manifest.setdefault("resumed_utc", []).append(now_utc())
            return manifest
        s = self.settings
        return {
            "created_utc": now_utc(),
            "run_dir": str(run_dir),
            "size": s.size,
            "device": s.device,
            "gpu": {
                "names": s.gpu.names,
                "count": len(s.gpu.names),
                "driver": s.gpu.driver,
                "memory_mib": s.gpu.memory_mib,
                "slug": s.gpu.slug,
            },
            "nsys": {"path": s.nsys.path, "version": s.nsys.version} if s.nsys else None,
            "git_sha": envinfo.git_sha(REPO_ROOT),
            **envinfo.host_facts(),
            "config": OmegaConf.to_container(s.raw, resolve=True),
            # the command line's KEY=VALUEs: harness.resume=DIR alone runs them again
            "overrides": task_overrides(),
            "scenarios": {
                name: {
                    "bottleneck": s.found[name].bottleneck,
                    "variants": s.found[name].variant_names,
                    "severity": s.cfg.scenario[name].severity,
                    "severity_unit": s.found[name].severity.unit,
                }
                for name in s.selected
            },
        }

    def kept(self, unit: Unit, run_dir: Path) -> bool:
        """On resume, whether ``unit`` finished before (it is kept, not run again)."""
        if not self.settings.cfg.harness.resume:
            return False
        status = rf.unit_status(unit.dir(run_dir))
        return status is not None and status.finished

    # -- state ---------------------------------------------------------------------------------
    def write_running(self, run_dir: Path) -> None:
        write_json(rf.state_path(run_dir), {"state": RunState.RUNNING, "updated_utc": now_utc()})

    def write_state(self, run_dir: Path, state: RunState) -> bool:
        """state.json on its own: small, and it must still say what happened."""
        record = {"state": state.value, "failures": len(self.failures), "updated_utc": now_utc()}
        for _ in range(2):
            try:
                write_json(rf.state_path(run_dir), record)
                return True
            except KeyboardInterrupt:
                record["state"] = RunState.INTERRUPTED.value
            except ResultWriteError as exc:
                self.write_failed(exc)
                return False
        return False

    def write_failed(self, exc: ResultWriteError) -> None:
        """Record and print a failed result write once (the final rewrite may repeat it)."""
        if str(exc) not in self.failures:
            self.failures.append(str(exc))
            self.say(f"FAILED writing results: {exc}")

    # -- units ---------------------------------------------------------------------------------
    def record(self, run_dir: Path, unit: Unit, outcome: Outcome) -> None:
        """Write a unit's status.json and report a failure or a skip (once per variant)."""
        out_dir = unit.dir(run_dir)
        with self._write_lock:
            write_json(
                out_dir / rf.STATUS, {**outcome.record(), "unit": asdict(unit), "at": now_utc()}
            )
            for marker in rf.transient_files(out_dir):
                marker.unlink(missing_ok=True)
        status = Status(outcome.status)
        if status == Status.SKIPPED:
            if self.say_skips and rf.first_timing(unit.phase):  # once per variant
                self.say(f"skipped {unit.scenario}/{unit.variant}: {outcome.error}")
        elif self.retried(unit, status):
            first = outcome.error.splitlines()[0] if outcome.error else outcome.status
            self.say(
                f"{unit.label}: profiling it as a child of its traced fork server failed "
                f"({first}); it runs again as its own nsys process after the others"
            )
        elif status.is_failure:
            self.failures.append(outcome.error)
            self.say(f"FAILED {unit.label}: {outcome.error}")

    # -- tables ----------------------------------------------------------------------------------
    def write_tables(self, run_dir: Path) -> pd.DataFrame:
        """runs.csv and runs.parquet, from the units' files (node k > 0: none, empty)."""
        s = self.settings
        if s.cfg.dist.node_rank:  # node k of a multi-node run: node 0 holds rank 0's results
            return pd.DataFrame(columns=COLUMNS)
        table = build_runs_table(
            run_dir, s.found, s.cfg, s.selected, s.cfg.harness.bootstrap, self._rows
        )
        rf.write_frame(rf.table_path(run_dir, "runs", ".parquet"), table)
        rf.write_frame(rf.table_path(run_dir, "runs"), table)
        return table

    def write_timings(
        self,
        run_dir: Path,
        walls: dict[str, float],
        total_s: float,
        *,
        warm: dict[str, Any] | None = None,
        say: bool = True,
    ) -> None:
        """timings.csv (where each worker's wall time went) and wall_time.json (the suite's
        phases, what ran beside what, the settings that change it, ``warm``: the compiler-cache
        warm-ups), so a slow suite shows what to fix; ``say``: print it as one line (once, at
        the end)."""
        try:
            table = build_timings_table(run_dir, self.settings.units())
            rf.write_frame(rf.table_path(run_dir, "timings"), table)
            record = wall_time_record(table, walls, total_s)
            record.update(self._calls(run_dir, total_s, walls.get("workers_s")))
            record["settings"] = self.settings.speed_settings()
            if warm is not None:
                record["warm_compile"] = warm
            write_json(rf.wall_time_path(run_dir), {**record, "updated_utc": now_utc()})
        except ResultWriteError as exc:
            self.write_failed(exc)
            return
        if say:
            parts = ", ".join(
                f"{k.removesuffix('_s')} {v:.0f} s" for k, v in record["worker_parts_s"].items()
            )
            hidden = record.get("workers_overlap_s") or 0.0
            self.say(
                f"wall time {total_s:.0f} s; worker processes: {parts}"
                + (f"; {hidden:.0f} s of it ran beside another worker" if hidden >= 0.5 else "")
            )

    def _calls(self, run_dir: Path, total_s: float, workers_s: float | None) -> dict[str, Any]:
        """Each ``harness run`` call's wall time into this run folder (a resumed run has
        several; a device's time limit cuts a long run in two): ``calls_s`` by the call's
        start, and their sum, ``all_calls_s``; each call's workers' span, ``workers_calls_s``
        (``workers_s`` is this call's: a resume that only ran the tail reads ~0 there)."""
        try:
            earlier = read_json(rf.wall_time_path(run_dir)) or {}
        except rf.CorruptFileError:
            earlier = {}
        calls = dict(earlier.get("calls_s") or {})
        calls[self.started_utc] = total_s
        spans = dict(earlier.get("workers_calls_s") or {})
        if workers_s is not None:
            spans[self.started_utc] = workers_s
        return {"calls_s": calls, "all_calls_s": sum(calls.values()), "workers_calls_s": spans}
