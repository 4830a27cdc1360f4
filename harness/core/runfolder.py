"""The run folder's format, in one place: paths, unit discovery, states, reading and writing.

A run folder is ``<results_dir>/<utc-time>_<gpu>/`` with the run's tables at its top and one
folder per worker process, ``<scenario>/<variant>/<phase>/``, where ``<phase>`` is
``timing-<r>`` (an unprofiled timing round) or ``profile`` (the run under nsys). Node ``k`` of a
multi-node run writes a run folder of its own inside node 0's, ``node<k>/``.

Every other module asks this one for a path, a phase name, a status or a table name, so the
layout can change in one file. Nothing here imports torch, pandas or the scenarios.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.atomic import ResultWriteError, write_bytes, write_frame, write_json, write_text
from harness.core.enums import StrEnum
from harness.core.errors import InputError

__all__ = [
    "ResultWriteError",
    "write_bytes",
    "write_frame",
    "write_json",
    "write_text",
]

# -- states ---------------------------------------------------------------------------------


class Status(StrEnum):
    """How one unit (worker process) ended: ``status.json``'s ``status`` and ``runs.csv``'s."""

    OK = "ok"
    """Finished; its result.json (and, for a profile, its export) is good."""
    SKIPPED = "skipped"
    """Not run on this machine (needs a GPU, more GPUs, or one node); the reason is the error."""
    FAILED = "failed"
    """The worker exited non-zero (runs.csv: any phase of the variant failed)."""
    OOM = "oom"
    """The worker ran out of memory (host cap or CUDA)."""
    TIMEOUT = "timeout"
    """The worker ran past harness.timeout_s; its process group was killed."""
    EVIDENCE_FAILED = "evidence_failed"
    """The profile's worker finished but nsys's report or its SQLite export is unusable."""
    NO_RESULT = "no_result"
    """The worker exited 0 without writing result.json."""
    FINALIZING = "finalizing"
    """A profile whose nsys still writes its report in the background (never final)."""
    MISSING = "missing"
    """runs.csv only: the variant has neither a result nor an error (not run yet)."""

    @property
    def finished(self) -> bool:
        """A resumed run does not run this unit again."""
        return self in (Status.OK, Status.SKIPPED)

    @property
    def is_failure(self) -> bool:
        """Counts as a failure of the run (non-zero exit)."""
        return self not in (Status.OK, Status.SKIPPED, Status.FINALIZING, Status.MISSING)


class RunState(StrEnum):
    """``state.json``'s ``state``: where the whole run stands."""

    RUNNING = "running"
    COMPLETE = "complete"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


class TruthState(StrEnum):
    """diagnosis.csv's ``truth_state``: a variant's measured truth for a class
    (:mod:`harness.judge.truth` measures it; every reader compares against these)."""

    FIRES = "fires"
    CLEAR = "clear"
    EITHER = "either"
    NOT_TAKEN = "not_taken"
    NO_REMOVAL = "no_removal"
    OVERSUBSCRIBED = "oversubscribed"

    @property
    def decided(self) -> bool:
        """The class should fire or should not: the findings are judged against it."""
        return self in (TruthState.FIRES, TruthState.CLEAR)


class OffTargetState(StrEnum):
    """diagnosis.csv's ``<class>_off_target``: a fired class other than the scenario's
    own, held to the measured gap (:func:`harness.judge.truth.off_targets`)."""

    SECOND_CAUSE = "second_cause"
    """Its predicted saving fits within the gap (its interval reaches the gap's)."""
    FALSE_POSITIVE = "false_positive"
    """Its predicted saving exceeds the gap beyond both intervals."""
    UNCHECKED = "unchecked"
    """No measured gap to hold it to."""


# -- names ----------------------------------------------------------------------------------

MANIFEST = "manifest.json"
STATE = "state.json"
WALL_TIME = "wall_time.json"
LOCK = ".lock"

#: Files in a unit's folder.
SPEC = "spec.json"
RESULT = "result.json"
STATUS = "status.json"
STDOUT = "stdout.log"
STDERR = "stderr.log"
#: Where a running worker says how far it got (one JSON object, rewritten atomically), and the
#: file the parent creates to let a worker held before its warm-up go on (see WorkerState).
PROGRESS = ".progress.json"
GO = ".go"
#: Created by the parent in a running profiled worker's folder: leave normally, not through
#: os._exit (the run found that nsys lost the GPU activity of a worker that did).
EXIT_NORMALLY = ".exit-normally"
#: Forked ranks of a distributed unit (harness.fork_ranks): rank 0 writes the port its
#: rendezvous store listens on here, the other ranks read it (the store torchrun's agent hosts).
RDZV = ".rdzv.json"
#: ``.ready-<rank>``: a rank of a gated distributed unit has set up (see :func:`ready_marker`).
READY_PREFIX = ".ready-"


def ready_marker(rank: int) -> str:
    """The file a rank of a distributed unit creates once it has set up: rank 0 says ``held``
    only once every rank has, so a held unit never has a rank still setting up."""
    return f"{READY_PREFIX}{rank}"


def transient_files(out_dir: Path) -> list[Path]:
    """The files a running worker and the parent talk through (progress, gate, rendezvous,
    ready markers): removed before a unit starts and once it has ended."""
    names = [PROGRESS, GO, EXIT_NORMALLY, RDZV]
    return [out_dir / n for n in names] + sorted(out_dir.glob(f"{READY_PREFIX}*"))


#: Compiler-cache warm-up runs (harness.warm_compile): ``<run>/warm/<scenario>__<variant>/``
#: (two levels, so no unit glob ``*/*/<phase>/`` ever finds them).
WARM = "warm"
SERVERS = "servers"
#: The log of a traced fork server (nsys's output and the server's) in its server_dir.
SERVER_LOG = "server.log"

PROFILE = "profile"
TIMING_PREFIX = "timing-"
#: The PyTorch Profiler's run of a variant (``kineto.enabled``): its own process, since nsys and
#: the PyTorch Profiler both want CUPTI; its unit folder holds one Kineto trace per rank.
KINETO = "kineto"
#: A Kineto trace's suffix (what HTA and TensorBoard look for).
KINETO_SUFFIX = ".pt.trace.json.gz"


class WorkerState(StrEnum):
    """How far a running worker got (``.progress.json``'s ``state``), in the order it passes
    them: the parent reads it to show progress, to hold the worker before its warm-up, and to
    start the next worker once this one's measured window is over."""

    IMPORT = "import"
    """Importing torch, the scenarios and the preload modules."""
    SETUP = "setup"
    """Building and setting up the workload (``stage`` names the set-up stage)."""
    HELD = "held"
    """Set up, waiting before its warm-up until the parent creates ``.go``."""
    WARMUP = "warmup"
    """Running warm-up steps (measured phases start here: nothing else may run beside it)."""
    WINDOW = "window"
    """Inside the measured window."""
    STOPPING = "stopping"
    """The window's steps are over; a profiled worker now stops the capture range (nsys
    writes the capture while cudaProfilerStop returns)."""
    TEARDOWN = "teardown"
    """Writing its result and leaving."""

    @property
    def measuring(self) -> bool:
        """Warm-up or window: the phases nothing else may run beside."""
        return self in (WorkerState.WARMUP, WorkerState.WINDOW)

    @property
    def past_window(self) -> bool:
        """The measured window is over."""
        return self in (WorkerState.STOPPING, WorkerState.TEARDOWN)


#: The run's tables (``<name>.csv`` in the run folder; ``runs`` also as Parquet).
TABLE_NAMES = (
    "runs",
    "timings",
    "diagnosis",
    "findings",
    "verdicts",
    "confusion",
    "detector_scores",
    "gpu_work",
    "expert_rules",
    "crosscheck",
    "tools_calls",
    "tools_scores",
    "tools_f1",
    "kernels",
    "kernel_limits",
)

#: A profile's report files, by suffix.
REPORT_SUFFIX = ".nsys-rep"
QDSTRM_SUFFIX = ".qdstrm"
SQLITE_SUFFIX = ".sqlite"
#: An SQLite export while nsys writes it; renamed to ``SQLITE_SUFFIX`` once complete.
PARTIAL_SQLITE_SUFFIX = ".partial.sqlite"
REPORT_SUFFIXES = (REPORT_SUFFIX, QDSTRM_SUFFIX, SQLITE_SUFFIX)


def timing_phase(r: int) -> str:
    """The phase name of timing round ``r`` (1-based)."""
    if r < 1:
        raise ValueError(f"timing rounds count from 1, not {r}")
    return f"{TIMING_PREFIX}{r}"


def is_timing(phase: str) -> bool:
    return phase.startswith(TIMING_PREFIX)


def timing_round(phase: str) -> int | None:
    """The round number of a timing phase (``timing-3`` -> 3); None for any other phase or
    folder name: speedups are paired by it (harness.core.stats.paired_ratio_ci)."""
    rest = phase[len(TIMING_PREFIX) :] if is_timing(phase) else ""
    return int(rest) if rest.isdigit() and int(rest) >= 1 else None


def is_profile(phase: str) -> bool:
    return phase == PROFILE


def is_kineto(phase: str) -> bool:
    """The PyTorch Profiler's run of a variant (``kineto.enabled``)."""
    return phase == KINETO


def phase_kind(phase: str) -> str:
    """'timing', 'profile' or 'kineto': the kind of process a phase is, for tables that sum
    or plot them apart (timings.csv's parts, the host probes)."""
    if is_profile(phase):
        return PROFILE
    return KINETO if is_kineto(phase) else "timing"


def first_timing(phase: str) -> bool:
    """The first timing round: things said once per variant are said here."""
    return phase == timing_phase(1)


def phase_order(phase: str) -> tuple[int, int, str]:
    """Sort key of phase folder names in run order: ``timing-1, timing-2, ..., profile,
    kineto``, then any other folder by name."""
    if is_timing(phase) and phase[len(TIMING_PREFIX) :].isdigit():
        return (0, int(phase[len(TIMING_PREFIX) :]), "")
    if is_profile(phase):
        return (1, 0, "")
    if is_kineto(phase):
        return (1, 1, "")
    return (2, 0, phase)


def phases(repeats: int, profiled: bool) -> list[str]:
    """A variant's phases in run order: ``timing-1..repeats``, then ``profile``."""
    return [timing_phase(r) for r in range(1, repeats + 1)] + ([PROFILE] if profiled else [])


def table_path(run_dir: Path, name: str, suffix: str = ".csv") -> Path:
    """``<run>/<name>.csv`` (or another suffix) of one of :data:`TABLE_NAMES`."""
    if name not in TABLE_NAMES:
        raise ValueError(f"unknown table {name!r}; the run's tables are {', '.join(TABLE_NAMES)}")
    return Path(run_dir) / f"{name}{suffix}"


def manifest_path(run_dir: Path) -> Path:
    return Path(run_dir) / MANIFEST


def state_path(run_dir: Path) -> Path:
    return Path(run_dir) / STATE


def wall_time_path(run_dir: Path) -> Path:
    return Path(run_dir) / WALL_TIME


# -- units ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Unit:
    """One worker process: a scenario's variant in one phase ('timing-<r>', 'profile' or
    'kineto')."""

    scenario: str
    variant: str
    phase: str

    def dir(self, run_dir: Path) -> Path:
        return unit_dir(run_dir, self.scenario, self.variant, self.phase)

    @property
    def label(self) -> str:
        return f"{self.scenario}/{self.variant} [{self.phase}]"

    @property
    def is_profile(self) -> bool:
        return is_profile(self.phase)

    @property
    def is_kineto(self) -> bool:
        return is_kineto(self.phase)


def variant_dir(run_dir: Path, scenario: str, variant: str) -> Path:
    return Path(run_dir) / scenario / variant


def unit_dir(run_dir: Path, scenario: str, variant: str, phase: str) -> Path:
    """``<run>/<scenario>/<variant>/<phase>/``."""
    return variant_dir(run_dir, scenario, variant) / phase


def profile_dir(run_dir: Path, scenario: str, variant: str) -> Path:
    return unit_dir(run_dir, scenario, variant, PROFILE)


def node_suffix(node_rank: int) -> str:
    """'' on node 0 (and single-node runs), '-node<k>' on node k: tells the nodes' reports apart."""
    return f"-node{node_rank}" if node_rank else ""


def node_dir(run_dir: Path, node_rank: int) -> Path:
    """Node k's own run folder inside node 0's (node 0: the run folder itself)."""
    return Path(run_dir) / f"node{node_rank}" if node_rank else Path(run_dir)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (a lock's holder, a held worker's harness); one owned by
    another user counts as alive."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def lock_name(node_rank: int = 0) -> str:
    """The lock file's name: one per node, since each node's pid means nothing on the others."""
    return LOCK + (f".node{node_rank}" if node_rank else "")


def report_base(run_dir: Path, unit: Unit, node_rank: int = 0) -> Path:
    """A profile's report path without its suffix (add one of :data:`REPORT_SUFFIXES`)."""
    return unit.dir(run_dir) / f"{unit.scenario}__{unit.variant}{node_suffix(node_rank)}"


def profile_file(run_dir: Path, scenario: str, variant: str, suffix: str) -> Path | None:
    """The profile's first file ending in ``suffix`` (``.nsys-rep``, ``.sqlite``), or None."""
    folder = profile_dir(run_dir, scenario, variant)
    return next(iter(sorted(folder.glob(f"*{suffix}"))), None) if folder.is_dir() else None


def kineto_dir(run_dir: Path, scenario: str, variant: str) -> Path:
    """``<run>/<scenario>/<variant>/kineto/``: the variant's PyTorch Profiler unit."""
    return unit_dir(run_dir, scenario, variant, KINETO)


def kineto_trace(unit_folder: Path, scenario: str, variant: str, rank: int) -> Path:
    """One rank's Kineto trace in a kineto unit's folder."""
    return Path(unit_folder) / f"{scenario}__{variant}-rank{rank}{KINETO_SUFFIX}"


def kineto_traces(run_dir: Path, scenario: str, variant: str) -> tuple[Path, ...]:
    """The variant's Kineto traces, one per rank (none without a kineto run)."""
    folder = kineto_dir(run_dir, scenario, variant)
    return tuple(sorted(folder.glob(f"*{KINETO_SUFFIX}"))) if folder.is_dir() else ()


def has_exports(run_dir: Path) -> bool:
    """Any profile of this run exported to SQLite."""
    return any(Path(run_dir).glob(f"*/*/{PROFILE}/*{SQLITE_SUFFIX}"))


def discover_units(run_dir: Path) -> list[Unit]:
    """Every unit folder on disk (one holding a spec, status or result), sorted."""
    found = set()
    for name in (SPEC, STATUS, RESULT):
        for path in Path(run_dir).glob(f"*/*/*/{name}"):
            scen, var, phase = path.parent.relative_to(run_dir).parts
            if is_timing(phase) or is_profile(phase) or is_kineto(phase):
                found.add(Unit(scen, var, phase))
    return sorted(found, key=lambda u: (u.scenario, u.variant, u.phase))


def result_files(run_dir: Path) -> list[Path]:
    """Every unit's result.json, sorted."""
    return sorted(Path(run_dir).glob(f"*/*/*/{RESULT}"))


def phase_dirs(run_dir: Path, scenario: str, variant: str) -> list[Path]:
    """A variant's phase folders on disk in run order (:func:`phase_order`)."""
    vdir = variant_dir(run_dir, scenario, variant)
    if not vdir.is_dir():
        return []
    return sorted((p for p in vdir.iterdir() if p.is_dir()), key=lambda p: phase_order(p.name))


def server_dir(run_dir: Path, scenario: str) -> Path:
    """Where a scenario's traced fork server (``nsys.profile_server``) keeps its log and
    writes its reports before each goes to its variant's profile folder."""
    return Path(run_dir) / SERVERS / scenario


def warm_dir(run_dir: Path, scenario: str, variant: str) -> Path:
    """Where the compiler-cache warm-up of a variant keeps its spec, logs and status."""
    return Path(run_dir) / WARM / f"{scenario}__{variant}"


# -- reading ----------------------------------------------------------------------------------


class CorruptFileError(InputError):
    """A run-folder file that exists but cannot be read or parsed (``str()``: ``FILE: WHY``)."""


def read_json(path: Path | str, *, required: bool = False) -> Any:
    """The one reader of the run folder's JSON files (manifest, state, status, result,
    progress, a spec): the parsed JSON; None when there is no such file, unless ``required``;
    :class:`CorruptFileError` (naming the file) when it is required and missing, cannot be
    read, or is not JSON."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if required:
            raise CorruptFileError(path, "no such file") from None
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise CorruptFileError(path, f"cannot be read: {exc}") from exc
    try:
        return json.loads(text)
    except ValueError as exc:
        raise CorruptFileError(path, f"not valid JSON: {exc}") from exc


def read_status(unit_path: Path) -> dict[str, Any] | None:
    """A unit folder's status.json; None when it has none (not run, or interrupted)."""
    data = read_json(Path(unit_path) / STATUS)
    return data if isinstance(data, dict) else None


def unit_status(unit_path: Path) -> Status | None:
    """How the unit in this folder ended; None when it has no (readable) status: a resume
    runs it again."""
    try:
        data = read_status(unit_path)
    except CorruptFileError:
        return None
    try:
        return Status(data["status"]) if data else None
    except (KeyError, ValueError):
        return None


def read_progress(unit_path: Path) -> dict[str, Any] | None:
    """A running worker's ``.progress.json`` (``state``, ``stage``, ``at``); None when it has
    written none yet or the file cannot be read (it is rewritten atomically, so a read never
    sees half of it)."""
    try:
        data = read_json(Path(unit_path) / PROGRESS)
    except CorruptFileError:
        return None
    return data if isinstance(data, dict) else None


def worker_state(unit_path: Path) -> WorkerState | None:
    """The state in a worker's progress file, or None."""
    data = read_progress(unit_path)
    try:
        return WorkerState(data["state"]) if data else None
    except (KeyError, ValueError):
        return None


def read_result(unit_path: Path) -> dict[str, Any] | None:
    """A unit folder's result.json, or None."""
    return read_json(Path(unit_path) / RESULT)


def iter_statuses(run_dir: Path) -> Iterator[tuple[Unit, Status | None]]:
    """(unit, status) of every unit folder on disk."""
    for unit in discover_units(run_dir):
        yield unit, unit_status(unit.dir(run_dir))
