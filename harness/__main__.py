"""``python -m harness SUBCOMMAND [hydra overrides]``.

Hydra's grammar cannot take a bare word such as ``run``, so the subcommand is popped first and
the rest is handed to Hydra (which also gives ``--cfg job``, ``--help`` and ``-m`` multirun).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

USAGE = """usage: python -m harness SUBCOMMAND [overrides]

subcommands:
  run       run, time and profile scenarios:  python -m harness run +scenario=all
            (+scenario=NAME | +scenario=[a,b] | +scenario=all; size=smoke|full|auto;
             harness.resume=RUN_DIR; scenario.NAME.severity=...; --cfg job shows the config)
  list      list scenarios, their variants and bottleneck classes
  diagnose  findings for any nsys report:  python -m harness diagnose PATH... [--format json]
  score     detectors vs labels on labelled exports:  python -m harness score corpus/wild
            (a corpus folder with labels.yaml, or a run folder; --out DIR; --tool hta
             --tool nsys-ai --tool nsys-rules: per class and tool precision/recall/F1)
  report    report.html + report.md of a run folder:  python -m harness report RUN_DIR
            (a sweep folder of `run -m`, or several run folders: dose-response across
             severities; --out DIR, --steps N, --no-timelines)
  compare   the speedup matrix by GPU:  python -m harness compare RUN_DIR RUN_DIR... [--out DIR]

python -m harness SUBCOMMAND --help says more (run --help: every config key and its default).
"""


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
    from harness.core.overrides import check_overrides, run_help
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
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
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
    return argparse.ArgumentParser(
        prog="python -m harness list",
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


def _diagnose(argv: list[str]) -> int:
    from harness.judge.diagnose import main as diagnose_main

    return diagnose_main(argv)


def _score(argv: list[str]) -> int:
    from harness.tools.cli import main as score_main

    return score_main(argv)


def _report(argv: list[str]) -> int:
    from harness.report import main as report_main

    return report_main(argv)


def _compare(argv: list[str]) -> int:
    from harness.report.compare import main as compare_main

    return compare_main(argv)


COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "run": _run,
    "list": _list,
    "diagnose": _diagnose,
    "score": _score,
    "report": _report,
    "compare": _compare,
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if argv else 2
    sub, rest = argv[0], argv[1:]
    if sub not in COMMANDS:
        print(f"error: unknown subcommand {sub!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    return COMMANDS[sub](rest)


if __name__ == "__main__":
    sys.exit(main())
