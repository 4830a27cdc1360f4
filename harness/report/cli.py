"""``python -m harness report PATH... [--out DIR]``, and the reports ``harness run`` writes when
it ends: one run folder gets its report, several (or a folder holding them) a sweep report."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.core.errors import InputError, check_out, say
from harness.report.fmt import BY_RUN
from harness.report.load import find_run_folders, is_run_folder, marker_runs
from harness.report.run import write_run_report
from harness.report.sweep import write_sweep_report

__all__ = ["main", "parser", "report_after_run", "report_after_sweep"]


def report_after_run(
    run_dir: Path, say: Callable[[str], None], found: dict[str, Any] | None = None
) -> str | None:
    """Write the report at the end of ``harness run``; never raises.

    Returns None when written (or when there is nothing to report), ``"interrupted"`` after
    Ctrl-C, else the error message (the caller counts it as a failure; the results are intact).
    """
    run_dir = Path(run_dir)
    try:
        if not (run_dir / "runs.csv").is_file():
            return None
        html, _ = write_run_report(run_dir, found=found, writer=BY_RUN)
        say(f"report: {html} (and report.md)")
        return None
    except KeyboardInterrupt:
        say(
            f"report interrupted; the results in {run_dir} are complete. "
            f"Write it with `python -m harness report {run_dir}`"
        )
        return "interrupted"
    except Exception as exc:
        msg = (
            f"writing the report failed ({type(exc).__name__}: {exc}); the run's results in "
            f"{run_dir} are complete and untouched. Retry with `python -m harness report {run_dir}`"
        )
        say(f"FAILED {msg}")
        return msg


def report_after_sweep(sweep_dir: Path, say: Callable[[str], None]) -> str | None:
    """The sweep report at the end of ``harness run -m``; never raises (as :func:`report_after_run`)."""
    try:
        run_dirs = marker_runs(Path(sweep_dir))
        if not run_dirs:
            return None
        html, _ = write_sweep_report(run_dirs, Path(sweep_dir), writer=f"{BY_RUN} -m")
        say(f"sweep report: {html} ({len(run_dirs)} runs)")
        return None
    except KeyboardInterrupt:
        say(f"sweep report interrupted; write it with `python -m harness report {sweep_dir}`")
        return "interrupted"
    except Exception as exc:
        msg = (
            f"writing the sweep report failed ({type(exc).__name__}: {exc}); every run folder is "
            f"intact. Retry with `python -m harness report {sweep_dir}`"
        )
        say(f"FAILED {msg}")
        return msg


def parser() -> argparse.ArgumentParser:
    """``harness report``'s command line."""
    ap = argparse.ArgumentParser(
        prog="python -m harness report",
        description="Writes report.html (one self-contained page) and report.md with its "
        "pictures in report/ for a run folder; for several run folders, a sweep folder of "
        "`harness run -m` or a folder holding run folders, a sweep report with the "
        "dose-response across severities.",
    )
    ap.add_argument(
        "paths", nargs="+", type=Path, help="run folder(s), a sweep folder, or a results folder"
    )
    ap.add_argument(
        "--out",
        type=Path,
        default=None,
        help="write the report here (default: the folder given; for several, a "
        "sweep-report-<time> folder beside them)",
    )
    ap.add_argument(
        "--steps", type=int, default=2, help="steady-state steps per timeline, 1..10 (default 2)"
    )
    ap.add_argument(
        "--no-timelines", action="store_true", help="leave the timeline pictures out (faster)"
    )
    return ap


def _run_dirs(paths: list[Path]) -> list[Path] | str:
    """Every run folder the paths stand for, or the usage error."""
    run_dirs: list[Path] = []
    for p in paths:
        if not p.is_dir():
            return f"{p}: {'not a folder' if p.exists() else 'no such folder'}"
        found = find_run_folders(p)
        if not found:
            return (
                f"{p} is not a run folder (no manifest.json or runs.csv) and holds none "
                "(looked two levels down and in harness run -m markers)"
            )
        run_dirs += [f for f in found if f not in run_dirs]
    return run_dirs


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    if not 1 <= args.steps <= 10:
        print("error: --steps must be 1..10", file=sys.stderr)
        return 2
    run_dirs = _run_dirs(args.paths)
    if isinstance(run_dirs, str):
        print(f"error: {run_dirs}", file=sys.stderr)
        return 2
    try:
        check_out(args.out)
    except InputError as exc:
        return say(exc)
    try:
        if len(args.paths) == 1 and is_run_folder(args.paths[0]):
            html, md = write_run_report(
                args.paths[0], args.out, steps=args.steps, timelines=not args.no_timelines
            )
        else:
            out = args.out
            if out is None and len(args.paths) == 1:
                out = args.paths[0]
            elif out is None:
                common = Path(os.path.commonpath([str(p.resolve()) for p in run_dirs]))
                out = common / f"sweep-report-{dt.datetime.now(dt.timezone.utc):%Y%m%dT%H%M%SZ}"
            html, md = write_sweep_report(run_dirs, out)
    except OSError as exc:
        print(f"error: could not write the report: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {html}\nwrote {md}")
    return 0
