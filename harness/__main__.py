"""``python -m harness SUBCOMMAND [hydra overrides]``.

Hydra's grammar cannot take a bare word such as ``run``, so the subcommand is popped first and
the rest is handed to Hydra (which also gives ``--cfg job``, ``--help`` and ``-m`` multirun).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

USAGE = """usage: python -m harness SUBCOMMAND [overrides]

subcommands:
  run       run, time and profile scenarios:  python -m harness run +scenario=all
            (+scenario=NAME | +scenario=[a,b] | +scenario=all; size=smoke|full|auto;
             harness.resume=RUN_DIR; scenario.NAME.severity=...; --cfg job shows the config)
  list      list scenarios, their variants and bottleneck classes
  diagnose  findings for any nsys report:  python -m harness diagnose PATH... [--format json]
"""


def _run(argv: list[str]) -> int:
    import hydra
    from omegaconf import DictConfig

    from harness.atomic import ResultWriteError
    from harness.config import (
        UsageError,
        check_scenario_overrides,
        config_dir,
        discover_scenarios,
        register_configs,
        to_suite,
    )
    from harness.runner import RunLockedError, Suite

    found = discover_scenarios()
    register_configs(found)
    try:
        check_scenario_overrides([a for a in argv if not a.startswith("-")], found)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    codes: list[int] = []

    @hydra.main(config_path=str(config_dir()), config_name="config", version_base="1.3")
    def task(cfg: DictConfig) -> None:
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

    saved = sys.argv
    sys.argv = [f"{saved[0]} run", *argv]
    try:
        task()
    finally:
        sys.argv = saved
    return max(codes) if codes else 0


def _list(argv: list[str]) -> int:
    from harness.config import discover_scenarios

    for name, scen in sorted(discover_scenarios().items()):
        sev = scen.severity
        print(f"{name}  [{scen.bottleneck}]  {scen.title}")
        print(f"    severity: {sev.meaning} ({sev.unit}, {sev.low:g}..{sev.high:g})")
        for v in scen.variants:
            print(f"    {v.kind:8s} {v.name:20s} {v.summary}")
    return 0


def _diagnose(argv: list[str]) -> int:
    from harness.diagnose import main as diagnose_main

    return diagnose_main(argv)


COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "run": _run,
    "list": _list,
    "diagnose": _diagnose,
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
