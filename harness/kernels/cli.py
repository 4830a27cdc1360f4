"""``python -m harness kernels RUN [--top N] [--variants ...]``: the Nsight Compute row of a
finished run folder (``kernels.csv``, ``kernel_limits.csv``, ``kernels_run.json``).

Exit code 0 when the step ran or was skipped with its reason (no GPU, no ncu, nothing
profiled); 1 when a variant failed or the step could not write its tables; 2 for a bad
command line; 130 on Ctrl-C (finished variants' unit folders are kept).
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from harness.core.errors import InputError, OneLineParser, say
from harness.core.kernels_config import VARIANT_POLICIES


def parser() -> argparse.ArgumentParser:
    """The subcommand's command line."""
    from harness.__main__ import prog

    p = OneLineParser(
        prog=f"{prog()} kernels",
        description="Profile the top kernels of a run's profiled variants with Nsight Compute "
        "(one launch each, --clock-control none), mark each compute-, memory- or latency-bound "
        "and give each step's roofline limit. Needs a GPU and ncu; skips with the reason "
        "otherwise.",
    )
    p.add_argument("run_dir", type=Path, help="a run folder of `harness run` (with exports)")
    p.add_argument("--top", type=int, default=None, help="kernels per variant (kernels.top)")
    p.add_argument(
        "--variants", nargs="+", default=None, metavar="NAME",
        help="only these: scenario/variant, a scenario or a variant name",
    )  # fmt: skip
    p.add_argument("--policy", choices=VARIANT_POLICIES, default=None,
                   help="kernels.variants: witness (default), all, or baselines and removals")  # fmt: skip
    p.add_argument("--budget-s", type=float, default=None, help="kernels.budget_s (0: none)")
    p.add_argument("--parallel", type=int, default=None, help="kernels.parallel")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the step on one run folder; the exit code (module docstring)."""
    args = parser().parse_args(argv)
    if not args.run_dir.is_dir():
        return say(InputError(args.run_dir, "no such folder" if not args.run_dir.exists()
                              else "not a folder"))  # fmt: skip
    if not (args.run_dir / "runs.csv").is_file():
        return say(InputError(args.run_dir, "not a run folder (no runs.csv)"))
    unknown = _unknown_names(args.run_dir, args.variants or [])
    if unknown:
        return say(unknown)
    from harness.core.kernels_config import kernels_config
    from harness.kernels.step import StepState, run_kernels
    from harness.kernels.tables import RowState

    try:
        cfg = kernels_config(None, top=args.top, variants=args.policy, budget_s=args.budget_s,
                             parallel=args.parallel)  # fmt: skip
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    tell = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    try:
        result = run_kernels(args.run_dir, cfg, say=tell, variants=args.variants)
    except KeyboardInterrupt:
        tell("kernels: stopped; finished variants' ncu folders are kept")
        return 130
    if result.state == StepState.SKIPPED:
        return 0
    if result.state == StepState.FAILED:
        return 1
    print(summary(result.limits))
    failed = result.limits["state"].isin([RowState.FAILED.value, RowState.TIMEOUT.value])
    return 1 if bool(failed.any()) else 0


def _unknown_names(run_dir: Path, names: list[str]) -> InputError | None:
    """The first ``--variants`` name that is no scenario, variant or scenario/variant of the
    run's runs.csv (or the table unreadable), as the error to print; None when all are."""
    try:
        with open(run_dir / "runs.csv", newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in ("scenario", "variant") if c not in (reader.fieldnames or [])]
            rows = [] if missing else [(r["scenario"], r["variant"]) for r in reader]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        return InputError(run_dir / "runs.csv", f"unreadable ({exc})")
    if missing:
        return InputError(run_dir / "runs.csv", f"no column {missing[0]}")
    known = {n for s, v in rows for n in (s, v, f"{s}/{v}")}
    for name in names:
        if name not in known:
            labels = ", ".join(sorted({f"{s}/{v}" for s, v in rows}))
            return InputError(f"--variants {name}", f"no such scenario or variant in {run_dir} "
                              f"(it has {labels})")  # fmt: skip
    return None


def summary(limits) -> str:  # type: ignore[no-untyped-def]
    """kernel_limits.csv as a short text table: per variant its state, the launches its own
    run profiled and the kernels it read from another variant's, bound shares and roofline
    limit beside its measured GPU time."""
    lines = [f"{'variant':40} {'state':11} {'own':>4} {'read':>4} {'cmp/mem/lat %':>14} "
             f"{'roofline ms':>11} {'busy ms':>8}"]  # fmt: skip
    for r in limits.to_dict("records"):
        shares = "/".join(
            "-" if r.get(k) != r.get(k) else f"{100 * r[k]:.0f}"
            for k in ("compute_bound_share", "memory_bound_share", "latency_bound_share")
        )
        roof, busy = r.get("roofline_ms_per_step"), r.get("gpu_busy_ms_per_step")
        lines.append(
            f"{r['scenario'] + '/' + r['variant']:40.40} {r['state']:11} "
            f"{_int(r.get('kernels_profiled')):>4} {_int(r.get('kernels_reused')):>4} "
            f"{shares:>14} {_num(roof):>11} {_num(busy):>8}"
        )
    return "\n".join(lines)


def _num(v: object) -> str:
    try:
        f = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "-"
    return "-" if f != f else f"{f:.2f}"


def _int(v: object) -> str:
    try:
        f = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "-"
    return "-" if f != f else str(int(f))


if __name__ == "__main__":
    sys.exit(main())
