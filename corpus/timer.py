"""Time the wild corpus: every script with `none` and each of its fixes, one process each.

    python3 corpus/timer.py --repeats 2 --csv corpus-timing.csv --logs DIR < specs

``specs``: one line per corpus entry, ``NAME PROCS LIMIT_S [source=SRC] [device=DEV] FIX...``
(capture-corpus.sh writes them from labels.csv through corpus/plan.py): the entry runs
``SRC.py`` (default ``NAME.py``) with ``--device DEV`` (default: none passed), and its rows and
logs carry NAME. ``--script-args`` are appended to every run's command line (the tests pass
``--seconds 0`` to run each script's shortest loop). Rounds are interleaved (round 1 of every
entry and fix, then round 2), so a slow spell of the machine lands on all variants alike.

Why a timer of its own: a script's timed loop is 1.5 s, but a fresh ``python3 script.py`` on the
GPU machine spent about 8 s before it (importing torch, then torch._dynamo and sympy on the
optimizer's first step), so timing the corpus took four 10-minute device calls. Here a parent
imports those modules once, never touches CUDA, and forks one child per timed run: each run
is still a process of its own (its own CUDA context, allocator and DataLoader workers), started
in its own session so a timeout or Ctrl-C stops it with everything it started. A script of
PROCS > 1 processes is forked the same way: one leader process (the run's session) forks PROCS
ranks and gives each the environment ``torch.distributed.run --standalone`` gives its workers
(RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT, ...); it waits for them and, like torchrun,
stops the others when one fails. Two fresh interpreters through torch.distributed.run spent
~10 s a run before the script's first line; ``--torchrun`` runs them that way again. The timed
step is measured inside the script, so the launcher does not enter it; profiles still run under
torch.distributed.run (capture-corpus.sh). Stdlib only, plus the modules preloaded.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import runpy
import shlex
import signal
import socket
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import measure  # corpus/measure.py, beside this file

HERE = Path(__file__).resolve().parent
#: Imported once in the parent so each child starts with them loaded (none touches CUDA).
PRELOAD = ("numpy", "torch", "torch._dynamo", "torch.utils.data", "PIL.Image")
#: Seconds between SIGTERM and SIGKILL when a run outlives its limit (like `timeout -k 10`).
KILL_AFTER_S = 10.0
#: Exit code of a run stopped at its limit (as `timeout` reports it).
TIMED_OUT = 124


def preload(modules: tuple[str, ...]) -> float:
    """Import ``modules`` (those installed), then collect and freeze the heap they made;
    seconds spent. Refuses if CUDA got initialized: a forked child could not use it.

    Frozen, the preloaded objects are left out of every child's garbage collections: without
    it a child's first full collection walks the whole torch and inductor heap (copying the
    pages it touches from the parent) and may land in the script's timed loop. The harness's
    workers freeze their set-up heap the same way."""
    t0 = time.perf_counter()
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            continue
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        raise SystemExit("timer: CUDA was initialized while preloading; children could not fork")
    gc.collect()
    gc.freeze()
    return time.perf_counter() - t0


def _enter_session(log: Path) -> None:
    """In a forked run: a session of its own, default signal handling, output to ``log``."""
    os.setsid()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _run_main(script: Path, argv: list[str]) -> int:
    """Run ``script *argv`` as ``__main__`` in this (forked) process; its exit code."""
    code = 1
    try:
        sys.argv = [str(script), *argv]
        sys.path[0] = str(script.parent)
        runpy.run_path(str(script), run_name="__main__")
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
        if isinstance(exc.code, str):  # what the interpreter would print on its way out
            print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    return code


def _exit(code: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _child(script: Path, argv: list[str], log: Path) -> None:
    """In the forked child: run ``script *argv`` as ``__main__`` with output to ``log``."""
    code = 1
    try:
        _enter_session(log)
        code = _run_main(script, argv)
    except BaseException:
        traceback.print_exc()
    finally:
        _exit(code)


def rank_env(rank: int, procs: int, port: int) -> dict[str, str]:
    """What ``torch.distributed.run --standalone --nproc_per_node=PROCS`` sets for worker
    ``rank`` (torch's LocalElasticAgent), less its own store and run id; OMP_NUM_THREADS=1 as
    torchrun sets it for PROCS > 1 unless given."""
    env = {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "GROUP_RANK": "0",
        "ROLE_RANK": str(rank),
        "ROLE_NAME": "default",
        "LOCAL_WORLD_SIZE": str(procs),
        "WORLD_SIZE": str(procs),
        "GROUP_WORLD_SIZE": "1",
        "ROLE_WORLD_SIZE": str(procs),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
    }
    if procs > 1:
        env["OMP_NUM_THREADS"] = os.environ.get("OMP_NUM_THREADS", "1")
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_ranks(pids: dict[int, int]) -> int:
    """Wait for every rank ({pid: rank}); 0, or the first failure's exit code (a rank killed
    by a signal: 1, named in the log). Once one fails the others are stopped, as torchrun
    does: a rank left alone would wait in a collective until the run's limit."""
    code = 0
    while pids:
        pid, status = os.wait()
        rank = pids.pop(pid, None)
        if rank is None:
            continue
        rc = os.waitstatus_to_exitcode(status)
        if rc < 0:
            print(f"timer: rank {rank} (pid {pid}) died with {signal.Signals(-rc).name}")
        if rc != 0 and code == 0:
            code = rc if rc > 0 else 1
            for other in pids:
                _kill_pid(other, signal.SIGTERM)
    return code


def _kill_pid(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _leader(script: Path, procs: int, argv: list[str], log: Path) -> None:
    """In the forked leader of a ``procs``-rank run: fork the ranks, wait for them."""
    code = 1
    try:
        _enter_session(log)
        port = _free_port()
        pids = {}
        for rank in range(procs):
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                rc = 1
                try:
                    os.environ.update(rank_env(rank, procs, port))
                    threads = os.environ.get("OMP_NUM_THREADS", "")
                    torch = sys.modules.get("torch")
                    if torch is not None and threads.isdigit():  # read at import, in the parent
                        torch.set_num_threads(int(threads))
                    rc = _run_main(script, argv)
                finally:
                    _exit(rc)
            pids[pid] = rank
        code = _wait_ranks(pids)
    except BaseException:
        traceback.print_exc()
    finally:
        _exit(code)


def _start(script: Path, procs: int, argv: list[str], log: Path, *, torchrun: bool) -> int:
    """Start one timed run; its pid, which is also its process group."""
    if procs > 1 and torchrun:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        cmd += [f"--nproc_per_node={procs}", str(script), *argv]
        with log.open("wb") as fh:
            return subprocess.Popen(
                cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True
            ).pid
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        if procs > 1:
            _leader(script, procs, argv, log)
        _child(script, argv, log)
    return pid


def _kill(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def wait_run(pid: int, limit_s: float) -> int:
    """Wait for run ``pid`` (at most ``limit_s``); its exit code, TIMED_OUT if it was stopped.
    Whatever it left behind in its group (DataLoader workers, compile workers) is killed."""
    deadline = time.monotonic() + limit_s
    term_at = None
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                rc = os.waitstatus_to_exitcode(status)
                return TIMED_OUT if term_at is not None else rc
            now = time.monotonic()
            if term_at is None and now > deadline:
                _kill(pid, signal.SIGTERM)
                term_at = now
            elif term_at is not None and now > term_at + KILL_AFTER_S:
                _kill(pid, signal.SIGKILL)
            time.sleep(0.05)
    finally:
        _kill(pid, signal.SIGKILL)


def _stop(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


@dataclass(frozen=True, kw_only=True)
class Spec:
    """One entry to time (a spec line)."""

    name: str
    """The entry: its rows and logs are named after it."""
    procs: int
    """Processes: 1, or ranks forked by a leader (or torchrun with ``--torchrun``)."""
    limit_s: float
    """A run is stopped after this many seconds."""
    fixes: tuple[str, ...]
    """Its --fix switches (``none`` is timed first, always)."""
    source: str
    """The script file's stem (``SOURCE.py`` under ``--dir``)."""
    device: str = ""
    """The ``--device`` every run passes; empty: none passed."""

    def argv(self, fix: str) -> list[str]:
        return ["--fix", fix, *(["--device", self.device] if self.device else [])]


#: Options a spec line may give between LIMIT_S and the fixes.
SPEC_OPTIONS = ("source", "device")


def read_specs(lines: list[str]) -> list[Spec]:
    """One Spec per non-empty line ``NAME PROCS LIMIT_S [source=SRC] [device=DEV] FIX...``;
    ``device=auto`` passes none. A fix never holds ``=``."""
    specs = []
    for line in lines:
        parts = line.split()
        if not parts:
            continue
        opts, fixes = {}, []
        for tok in parts[3:]:
            key, sep, value = tok.partition("=")
            if sep and key in SPEC_OPTIONS and not fixes:
                opts[key] = value
            elif sep:
                raise ValueError(f"spec {line!r}: {tok!r} is neither an option nor a fix")
            else:
                fixes.append(tok)
        specs.append(
            Spec(
                name=parts[0],
                procs=int(parts[1]),
                limit_s=float(parts[2]),
                fixes=tuple(fixes),
                source=opts.get("source") or parts[0],
                device="" if opts.get("device", "auto") == "auto" else opts["device"],
            )
        )
    return specs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--csv", type=Path, required=True, help="corpus-timing.csv, appended to")
    p.add_argument("--logs", type=Path, required=True, help="one log per run: NAME.FIX.rR.log")
    p.add_argument("--deadline", type=float, default=0.0, help="epoch seconds: start no run after")
    p.add_argument("--no-preload", action="store_true", help="children import everything")
    p.add_argument(
        "--preload",
        action="append",
        default=[],
        metavar="MODULE",
        help="one more module to preload (repeatable), e.g. torch._inductor.compile_fx where no "
        "GPU is visible: torch.compile's ~3 s of imports once, not in every compiling run",
    )
    p.add_argument("--dir", type=Path, default=HERE / "wild", help="where NAME.py are")
    p.add_argument("--script-args", default="", help="appended to every run, e.g. '--seconds 0'")
    p.add_argument(
        "--torchrun",
        action="store_true",
        help="run PROCS > 1 scripts through python -m torch.distributed.run (not forked)",
    )
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, _stop)  # like Ctrl-C: the running child's group goes too
    specs = read_specs(sys.stdin.read().splitlines())
    args.logs.mkdir(parents=True, exist_ok=True)
    if not args.no_preload:
        modules = (*PRELOAD, *args.preload)
        print(f"timer: preloaded {', '.join(modules)} in {preload(modules):.1f} s", flush=True)
    if not args.csv.exists():
        args.csv.write_text(",".join(measure.TIMING_FIELDS) + "\n")
    for r in range(1, args.repeats + 1):
        for spec in specs:
            for fix in ["none", *spec.fixes]:
                if args.deadline and time.time() > args.deadline:
                    print(
                        f"timer: DEADLINE reached, r{r} {spec.name} {fix} and later runs not made"
                    )
                    return 3
                log = args.logs / f"{spec.name}.{fix}.r{r}.log"
                t0 = time.perf_counter()
                run_argv = [*spec.argv(fix), *shlex.split(args.script_args)]
                script = args.dir / f"{spec.source}.py"
                pid = _start(script, spec.procs, run_argv, log, torchrun=args.torchrun)
                rc = wait_run(pid, spec.limit_s)
                row = measure.timing_row(spec.name, fix, str(r), str(rc), str(log))
                with args.csv.open("a") as fh:
                    fh.write(",".join(row) + "\n")
                text = log.read_text(errors="replace") if log.exists() else ""
                res = [ln for ln in text.splitlines() if ln.startswith("RESULT")][-1:]
                wall_ms = (time.perf_counter() - t0) * 1e3
                print(
                    f"  r{r} {spec.name:<26} {fix:<12} rc={rc:<3} {wall_ms:6.0f} ms  {' '.join(res)}"
                )
                if rc != 0:
                    print("\n".join("    | " + ln for ln in text.splitlines()[-5:]))
                sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
