"""Time the wild corpus: every script with `none` and each of its fixes, one process each.

    python3 corpus/timer.py --repeats 2 --csv corpus-timing.csv --logs DIR < specs

``specs``: one line per script, ``NAME PROCS LIMIT_S FIX...`` (capture-corpus.sh writes them
from labels.csv through corpus/plan.py). ``--script-args`` are appended to every run's command
line (the tests pass ``--seconds 0`` to run each script's shortest loop). Rounds are interleaved (round 1 of every script and fix, then round 2), so a
slow spell of the machine lands on all variants alike.

Why a timer of its own: a script's timed loop is 1.5 s, but a fresh ``python3 script.py`` on the
GPU machine spent about 8 s before it (importing torch, then torch._dynamo and sympy on the
optimizer's first step), so timing the corpus took four 10-minute device calls. Here a parent
imports those modules once, never touches CUDA, and forks one child per timed run: each run
is still a process of its own (its own CUDA context, allocator and DataLoader workers), started
in its own session so a timeout or Ctrl-C stops it with everything it started. Scripts of 2
processes run through ``python3 -m torch.distributed.run --standalone --nproc_per_node=2``. Stdlib only, plus the modules preloaded.
"""

from __future__ import annotations

import argparse
import importlib
import os
import runpy
import shlex
import signal
import subprocess
import sys
import time
import traceback
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
    """Import ``modules`` (those installed); seconds spent. Refuses if CUDA got initialized:
    a forked child could not use it."""
    t0 = time.perf_counter()
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            continue
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        raise SystemExit("timer: CUDA was initialized while preloading; children could not fork")
    return time.perf_counter() - t0


def _child(script: Path, argv: list[str], log: Path) -> None:
    """In the forked child: run ``script *argv`` as ``__main__`` with output to ``log``."""
    code = 1
    try:
        os.setsid()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
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
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _start(script: Path, procs: int, argv: list[str], log: Path) -> int:
    """Start one timed run; its pid, which is also its process group."""
    if procs > 1:
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


def read_specs(lines: list[str]) -> list[tuple[str, int, float, list[str]]]:
    """(name, procs, limit_s, fixes) per non-empty line ``NAME PROCS LIMIT_S FIX...``."""
    specs = []
    for line in lines:
        parts = line.split()
        if parts:
            specs.append((parts[0], int(parts[1]), float(parts[2]), parts[3:]))
    return specs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--csv", type=Path, required=True, help="corpus-timing.csv, appended to")
    p.add_argument("--logs", type=Path, required=True, help="one log per run: NAME.FIX.rR.log")
    p.add_argument("--deadline", type=float, default=0.0, help="epoch seconds: start no run after")
    p.add_argument("--no-preload", action="store_true", help="children import everything")
    p.add_argument("--dir", type=Path, default=HERE / "wild", help="where NAME.py are")
    p.add_argument("--script-args", default="", help="appended to every run, e.g. '--seconds 0'")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, _stop)  # like Ctrl-C: the running child's group goes too
    specs = read_specs(sys.stdin.read().splitlines())
    args.logs.mkdir(parents=True, exist_ok=True)
    if not args.no_preload:
        print(f"timer: preloaded {', '.join(PRELOAD)} in {preload(PRELOAD):.1f} s", flush=True)
    if not args.csv.exists():
        args.csv.write_text(",".join(measure.TIMING_FIELDS) + "\n")
    for r in range(1, args.repeats + 1):
        for name, procs, limit_s, fixes in specs:
            for fix in ["none", *fixes]:
                if args.deadline and time.time() > args.deadline:
                    print(f"timer: DEADLINE reached, r{r} {name} {fix} and later runs not made")
                    return 3
                log = args.logs / f"{name}.{fix}.r{r}.log"
                t0 = time.perf_counter()
                argv = ["--fix", fix, *shlex.split(args.script_args)]
                rc = wait_run(_start(args.dir / f"{name}.py", procs, argv, log), limit_s)
                row = measure.timing_row(name, fix, str(r), str(rc), str(log))
                with args.csv.open("a") as fh:
                    fh.write(",".join(row) + "\n")
                text = log.read_text(errors="replace") if log.exists() else ""
                res = [ln for ln in text.splitlines() if ln.startswith("RESULT")][-1:]
                wall_ms = (time.perf_counter() - t0) * 1e3
                print(f"  r{r} {name:<26} {fix:<12} rc={rc:<3} {wall_ms:6.0f} ms  {' '.join(res)}")
                if rc != 0:
                    print("\n".join("    | " + ln for ln in text.splitlines()[-5:]))
                sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
