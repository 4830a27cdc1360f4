"""Finding ``ncu`` and the one command line the row runs it with.

Stdlib only, so the GPU probe (``scripts/device/ncu-probe.sh``) builds the very same command
with the machine's python3: ``python3 -m harness.kernels.command --log L [--report R]
[--name N ...] -- PROGRAM...`` prints it, one argument per line. Every command is an argument
list; nothing goes through a shell.

What each option is for:

- ``--clock-control none``: ncu's default locks the GPU's clocks at base; the suite leaves a
  machine's settings alone, and the kernels should run at the clocks the timing saw;
- ``--profile-from-start off``: only kernels inside the worker's measured window, its
  cudaProfilerStart/Stop range (a unit under ncu starts it right before the window's steps).
  That range holds for the whole process; an NVTX push/pop range does not: it belongs to the
  thread that pushed it, and autograd runs the backward pass on a thread of its own, so an
  NVTX filter on ``measure`` would leave out every backward kernel;
- ``--kernel-name-base mangled --kernel-name regex:^(...)$``: exactly the planned kernels, by
  the mangled names nsys recorded (a template's demangled name can run to thousands of
  characters; a mangled one is the symbol itself);
- ``--filter-mode per-launch-config --launch-skip K --launch-count 1``: one launch of each
  (kernel, grid, block) configuration, the (K+1)-th inside the window;
- ``--csv --page raw --print-units base --print-kernel-base <the same base> --log-file``: one
  CSV row per profiled launch with every metric, units in a second header row, names printed as
  the plan gave them, written to a file apart from the program's own output;
- ``--apply-rules no``: ncu's analysis rules write advice the row does not read;
- ``-o``: the ``.ncu-rep`` report beside it, for ncu-ui.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from harness.core.kernels_config import KernelsConfig
from harness.core.nsys import tool_candidates

#: Where ncu usually lives, after $NCU and PATH.
SEARCH_GLOBS = (
    "/usr/local/cuda/bin/ncu",
    "/opt/nvidia/nsight-compute/*/ncu",
    "/usr/local/cuda-*/bin/ncu",
)

#: ``--kernel-name-base`` values the plan can give names in.
NAME_BASES = ("mangled", "demangled", "function")

_REGEX_SPECIAL = re.compile(r"([^A-Za-z0-9_])")


def candidates(configured: str | None = None) -> list[str]:
    """Places to look for ncu, in order, without duplicates."""
    return tool_candidates(configured, "NCU", "ncu", SEARCH_GLOBS)


def find_ncu(configured: str | None = None) -> str | None:
    """The first executable ncu, or None."""
    for path in candidates(configured):
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def ncu_version(ncu: str, timeout_s: float = 30.0) -> str | None:
    """``ncu --version``'s last line (e.g. 'Version 2025.3.1.0 (build ...)'), or None."""
    try:
        proc = subprocess.run(
            [ncu, "--version"], capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [ln.strip() for ln in proc.stdout.splitlines() if ln.strip()]
    return lines[-1] if proc.returncode == 0 and lines else None


def name_regex(names: Sequence[str]) -> str:
    """``regex:^(a|b)$`` matching exactly these names; every character but letters, digits and
    underscores escaped (mangled names may hold ``.`` or ``$``)."""
    if not names:
        raise ValueError("no kernel names to match")
    alts = "|".join(_REGEX_SPECIAL.sub(r"\\\1", n) for n in dict.fromkeys(names))
    return f"regex:^({alts})$"


def ncu_argv(
    ncu: str,
    cfg: KernelsConfig,
    *,
    log: Path,
    program: Sequence[str],
    names: Sequence[str] | None = None,
    name_base: str = "mangled",
    report: Path | None = None,
) -> list[str]:
    """The ncu command over ``program``: the options of the module's docstring, ``names`` as
    the kernel filter (None: every kernel inside the window, one launch per configuration)."""
    if name_base not in NAME_BASES:
        raise ValueError(f"name_base must be one of {NAME_BASES}, got {name_base!r}")
    argv = [
        ncu,
        "--clock-control", "none",
        "--target-processes", "application-only",
        "--profile-from-start", "off",
        "--apply-rules", "no",
    ]  # fmt: skip
    if names:
        argv += ["--kernel-name-base", name_base, "--kernel-name", name_regex(names)]
    argv += [
        "--filter-mode", "per-launch-config",
        "--launch-skip", str(cfg.launch_skip),
        "--launch-count", "1",
    ]  # fmt: skip
    for section in cfg.sections:
        argv += ["--section", section]
    if cfg.metrics:
        argv += ["--metrics", ",".join(cfg.metrics)]
    argv += [
        "--csv", "--page", "raw", "--print-units", "base", "--print-kernel-base", name_base,
        "--log-file", str(log),
    ]  # fmt: skip
    if report is not None:
        argv += ["-o", str(report), "-f"]
    argv += list(cfg.extra_args)
    return [*argv, *program]


def main(argv: list[str] | None = None) -> int:
    """Print the row's ncu command (one argument per line) for the GPU probe."""
    args = list(sys.argv[1:] if argv is None else argv)
    program: list[str] = []
    if "--" in args:
        cut = args.index("--")
        args, program = args[:cut], args[cut + 1 :]
    parser = argparse.ArgumentParser(prog="python -m harness.kernels.command")
    parser.add_argument("--ncu", default=None, help="ncu binary (default: searched)")
    parser.add_argument("--log", required=True, help="ncu's CSV output file")
    parser.add_argument("--report", default=None, help="the .ncu-rep report to write")
    parser.add_argument("--name", action="append", default=[], help="a kernel name to profile")
    parser.add_argument("--name-base", default="mangled", choices=NAME_BASES)
    ns = parser.parse_args(args)
    if not program:
        parser.error("give the program after --")
    ncu = ns.ncu or find_ncu() or "ncu"
    cmd = ncu_argv(
        ncu, KernelsConfig(), log=Path(ns.log), program=program, names=ns.name or None,
        name_base=ns.name_base, report=Path(ns.report) if ns.report else None,
    )  # fmt: skip
    print("\n".join(cmd))
    return 0


if __name__ == "__main__":
    sys.exit(main())
