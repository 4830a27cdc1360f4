"""``harness SUBCOMMAND ...`` (also ``python -m harness`` and ``bottleneck-suite``): the
command line, argparse subcommands over the modules that do the work.

Each subcommand's own parser lives beside its code (``harness.judge.diagnose.parser``, ...);
this module puts them under one top-level parser and hands the arguments to the module's
``main``. ``run`` is Hydra's: Hydra's grammar takes no bare word, so ``run``'s arguments go to
Hydra as they are (which also gives ``--cfg job``, ``--help`` and ``-m`` multirun). A
subcommand whose module parses its own arguments (``run``; a ``main(argv)`` such as
``harness.kernels``'s) is listed in :data:`COMMANDS` with ``parser=None``. Any bad input ends
in one line naming it, and exit 2 (:mod:`harness.core.errors`).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.errors import OneLineParser, UsageError, say


def prog() -> str:
    """How the user called the command: ``harness`` (or ``bottleneck-suite``), else
    ``python -m harness``: what usage lines and hints say."""
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return name if name in ("harness", "bottleneck-suite") else "python -m harness"


@dataclass(frozen=True)
class Command:
    """One subcommand: its name, one line of help, and where its code is."""

    name: str
    help: str
    module: str
    """The module with its ``main(argv) -> int``."""
    parser: str | None = "parser"
    """The module's function returning its ArgumentParser; None: ``main`` parses its own
    arguments (they are passed on untouched)."""
    main: str = "main"

    def load(self, attr: str) -> Callable[..., Any]:
        if self.module == HERE:  # run as `python -m harness`, this module is __main__
            return globals()[attr]
        return getattr(importlib.import_module(self.module), attr)


#: This module's name when imported (``Command.module`` of the subcommands defined here).
HERE = "harness.__main__"


COMMANDS: tuple[Command, ...] = (
    Command("run", "run, time and profile scenarios: run +scenario=NAME|[a,b]|all [KEY=VALUE ...] "
            "(run --help: every key)", HERE, parser=None, main="_run"),
    Command("list", "list scenarios, their variants and bottleneck classes", HERE,
            parser="list_parser", main="_list"),
    Command("diagnose", "findings for any nsys report: diagnose PATH... [--format json]",
            "harness.judge.diagnose"),
    Command("score", "detectors (and --tool hta, nsys-ai, nsys-rules) against labelled exports: "
            "score corpus/wild", "harness.tools.cli"),
    Command("report", "report.html + report.md of a run folder (or a sweep): report RUN_DIR",
            "harness.report.cli"),
    Command("compare", "the speedup matrix of several runs side by side: compare RUN RUN...",
            "harness.report.compare"),
    Command("rediagnose", "judge a run folder again from its exports and timings: "
            "rediagnose RUN_DIR", "harness.rediagnose"),
    Command("kernels", "Nsight Compute on a run's heaviest kernels: kernels RUN_DIR [--top N]",
            "harness.kernels.cli", parser=None),
)  # fmt: skip


def available(cmd: Command) -> bool:
    """The subcommand's module is in this checkout (``kernels`` arrives with harness.kernels)."""
    if cmd.module == HERE:
        return True
    # by its file, not importlib.util.find_spec: that imports the parent packages, and
    # harness.report's alone (pandas, matplotlib) cost every command ~2 s of CPU before its first
    # line, a bad input's one-line answer included
    path = Path(__file__).resolve().parent.parent.joinpath(*cmd.module.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def build_parser(chosen: str | None = None) -> OneLineParser:
    """The top-level parser; ``chosen``'s subparser carries its module's options (the others'
    modules are not imported: ``harness list`` need not load the detectors)."""
    name = prog()
    top = OneLineParser(
        prog=name,
        description="A benchmark of GPU bottlenecks: run scenarios under Nsight Systems, "
        "diagnose any nsys report, score detectors and profiler tools, write reports.",
        epilog=f"{name} SUBCOMMAND --help says more (run --help: every config key and its "
        "default).",
    )
    sub = top.add_subparsers(dest="command", metavar="SUBCOMMAND", parser_class=OneLineParser)
    for cmd in filter(available, COMMANDS):
        own = cmd.load(cmd.parser)() if cmd.name == chosen and cmd.parser else None
        sub.add_parser(
            cmd.name,
            help=cmd.help,
            prog=f"{name} {cmd.name}",
            description=own.description if own else cmd.help,
            parents=[own] if own else [],
            add_help=own is None or not any(a.dest == "help" for a in own._actions),
        )
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """The console command: parse, dispatch, and answer any bad input in one line (exit 2)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:  # a bad input as any other: one line
        names = ", ".join(c.name for c in COMMANDS if available(c))
        return say(f"{prog()}: a subcommand is needed: {names} ({prog()} --help says more)")
    if argv[0] in ("-h", "--help", "help"):
        build_parser().print_help(sys.stdout)
        return 0
    byname = {c.name: c for c in COMMANDS if available(c)}
    cmd = byname.get(argv[0])
    try:
        if cmd is None or cmd.parser is not None:  # argparse's errors: one line, exit 2
            _, extra = build_parser(argv[0] if cmd else None).parse_known_args(argv)
            if extra:
                raise UsageError(f"{prog()} {argv[0]}: unrecognized arguments: {' '.join(extra)}")
        assert cmd is not None
        return int(cmd.load(cmd.main)(argv[1:]) or 0)
    except UsageError as exc:
        return say(exc)
    except BrokenPipeError:  # `harness list | head`
        sys.stderr.close()
        return 0


def _run(argv: list[str]) -> int:
    import hydra
    from omegaconf import DictConfig

    from harness.core.atomic import ResultWriteError
    from harness.core.config import (
        UsageError,
        check_scenario_overrides,
        config_dir,
        discover_scenarios,
        register_configs,
        to_suite,
    )
    from harness.core.overrides import check_overrides, overrides_first, run_help
    from harness.core.resume import resume_argv
    from harness.execution.runner import RunLockedError, Suite

    found = discover_scenarios()
    if any(a in ("-h", "--help") for a in argv):
        print(run_help(found), end="")
        return 0
    register_configs(found)
    try:
        resumed = resume_argv(argv, list(found))
        if resumed != list(argv):
            added = [a for a in resumed if a not in argv]
            print(f"resuming with the run's own settings: {' '.join(added)}", file=sys.stderr)
        argv = resumed
        check_scenario_overrides([a for a in argv if not a.startswith("-")], found)
        check_overrides(argv, found)
        argv = overrides_first(argv)  # Hydra's own parser takes no override after a flag
    except UsageError as exc:
        return say(exc)
    codes: list[int] = []
    sweeps: list[Path] = []

    @hydra.main(config_path=str(config_dir()), config_name="config", version_base="1.3")
    def task(cfg: DictConfig) -> None:
        before = _run_folders(cfg)
        try:
            suite = to_suite(cfg, found)
            codes.append(Suite(suite, cfg).run())
        except (UsageError, RunLockedError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            codes.append(2)
        except ResultWriteError as exc:  # disk full before the first variant ran
            print(f"error: {exc}", file=sys.stderr)
            codes.append(1)
        except ValueError as exc:  # __post_init__ validation: names the key and the range
            print(f"error: invalid configuration: {exc}", file=sys.stderr)
            codes.append(2)
        finally:
            _mark_sweep_job(cfg, before, sweeps)
        if codes and codes[-1] != 0 and _remote_launcher():
            # submitit (SLURM) runs each job in a process of its own and sees only whether the
            # task raised: say it here, or a job whose variants failed reads as a success.
            raise SuiteFailed(f"harness run exited with code {codes[-1]}; see the run folder")

    saved = sys.argv
    sys.argv = [f"{saved[0]} run", *argv]
    try:
        task()
    finally:
        sys.argv = saved
    if sweeps:  # `run -m`: the dose-response over the jobs' run folders, in the sweep folder
        from harness.report import report_after_sweep

        problem = report_after_sweep(sweeps[0], lambda m: print(m, file=sys.stderr))
        if problem:
            codes.append(130 if problem == "interrupted" else 1)
    return max(codes) if codes else 0


class SuiteFailed(RuntimeError):
    """A job of a remote multirun (SLURM) whose run failed: raised so the launcher says so."""


def _remote_launcher() -> bool:
    """True inside a multirun whose launcher runs jobs in other processes (submitit)."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hc = HydraConfig.get()
        return hc.mode == RunMode.MULTIRUN and "submitit" in str(hc.launcher.get("_target_", ""))
    except Exception:  # not under Hydra (tests calling the task directly)
        return False


def _run_folders(cfg: object) -> set[Path]:
    """Run folders (with a manifest.json) now in the results folder ``cfg`` writes to."""
    try:
        base = Path(str(cfg.harness.results_dir))  # type: ignore[attr-defined]
        return {p.parent.resolve() for p in base.glob("*/manifest.json")}
    except Exception:  # a bad value is reported by the run itself
        return set()


def _mark_sweep_job(cfg: object, before: set[Path], sweeps: list[Path]) -> None:
    """In a multirun, note in the Hydra job folder which run folder this job made.

    ``<sweep dir>/<job>/harness-run.json`` (one file per job: launchers may run jobs at once)
    names the run folder relative to itself and absolutely; ``harness report SWEEP_DIR`` reads
    them. Outside a multirun, or when the job made no run folder, nothing is written.
    """
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hc = HydraConfig.get()
        if hc.mode != RunMode.MULTIRUN:
            return
        made = sorted(_run_folders(cfg) - before)
        resume = cfg.harness.resume  # type: ignore[attr-defined]
        if not made and resume:
            made = [Path(str(resume)).resolve()]
        job_dir = Path(str(hc.runtime.output_dir)).resolve()
        sweep_dir = Path(str(hc.sweep.dir)).resolve()
        if sweep_dir not in sweeps:
            sweeps.append(sweep_dir)
        if not made:
            return
        from harness.core.atomic import write_json
        from harness.report import SWEEP_MARKER

        write_json(
            job_dir / SWEEP_MARKER,
            {
                "job": hc.job.num,
                "overrides": list(hc.overrides.task),
                "runs": [
                    {"relative": os.path.relpath(p, job_dir), "absolute": str(p)} for p in made
                ],
            },
        )
    except Exception as exc:  # bookkeeping for the sweep report must never cost a run
        print(f"note: could not record this job for the sweep report: {exc}", file=sys.stderr)


def list_parser() -> argparse.ArgumentParser:
    """``harness list``'s command line (it takes no options)."""
    return OneLineParser(
        prog=f"{prog()} list",
        description="Lists every scenario: its bottleneck class and title, what its severity "
        "knob means with its unit and range, and each variant (baseline, fixes, ideal) with "
        "what it does.",
    )


def list_text(found: dict[str, Any]) -> str:
    """The scenarios as ``harness list`` prints them, variant columns as wide as the longest,
    every line within the terminal's 100 columns (a long text wraps under its own column)."""
    from harness.core.console import WIDTH, wrap

    def hang(first: str, text: str, indent: int) -> list[str]:
        body = wrap(text, WIDTH - max(len(first), indent))
        return [first + body[0], *(" " * indent + b for b in body[1:])]

    kind_w = max((len(v.kind) for s in found.values() for v in s.variants), default=0)
    name_w = max((len(v.name) for s in found.values() for v in s.variants), default=0)
    lines = []
    for name, scen in sorted(found.items()):
        sev = scen.severity
        lines += hang(f"{name}  [{scen.bottleneck}]  ", scen.title, 4)
        lines += hang("    severity: ", f"{sev.meaning} ({sev.unit}, {sev.low:g}..{sev.high:g})", 6)
        for v in scen.variants:
            first = f"    {v.kind:{kind_w}}  {v.name:{name_w}}  "
            lines += hang(first, v.summary, len(first))
    return "\n".join(lines) + "\n"


def _list(argv: list[str]) -> int:
    from harness.core.config import discover_scenarios

    list_parser().parse_args(argv)
    print(list_text(discover_scenarios()), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
