"""Fix the rules that read Holistic Trace Analysis's numbers as classes on the suite's own run.

    python -m scripts.fit_hta_rules RUN_DIR [--out CSV]

HTA reports numbers, not causes; ``tools.hta`` (:class:`harness.core.tools_config.HtaRules`) says
which numbers point at which class. Its thresholds are fitted here, on a run of the suite's own
variants (every variant's Kineto trace against the run's measured truth), and only then scored
on code the suite did not write (``harness score corpus/wild --tool hta``): never tuned on what
they are scored on.

The fit: HTA runs once per variant (its numbers are cached in ``RUN_DIR/hta_numbers.json``);
then, threshold by threshold (two passes), each candidate value (the midpoints between the
values the variants showed, and the current default) is scored with the same precision/recall
machinery the tools table uses, and the one with the highest summed F1 over the classes HTA can
judge is kept; ties go to the value nearest the current default. The tables printed (and written
with ``--out``, and ``--out``'s ``_f1`` sibling) give each threshold's default and fitted value,
and per class the counts and F1 before and after.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from dataclasses import fields, replace
from pathlib import Path

import pandas as pd

from harness.core.tools_config import HtaRules
from harness.tools.hta import HtaNumbers, cached_numbers, hta_calls, hta_numbers, write_cache
from harness.tools.table import tool_scores
from harness.tools.truth import items_of, kineto_of, truth_table

#: Which HtaNumbers value each threshold compares against (for the candidate grid).
SOURCE = {
    "min_idle_pct": "mean_idle_pct",
    "stall_min_idle_pct": "mean_idle_pct",
    "stall_min_host_wait_share": "host_wait_share",
    "launch_min_short_share": "short_launch_share",
    "sync_max_queue_p75": "queue_p75",
    "comm_max_overlap_pct": "comm_overlap_pct",
    "imbalance_min_idle_spread_pct": "idle_spread_pct",
}


def numbers_of(run: Path) -> dict[str, HtaNumbers]:
    """HTA's numbers for every variant with Kineto traces (cached in the run folder)."""
    cached = cached_numbers(run)
    items = items_of(run)
    todo = {it.name: kineto_of(run, it) for it in items if it.name not in cached}
    todo = {k: v for k, v in todo.items() if v}
    if todo:
        fresh = {}
        for i, (name, paths) in enumerate(sorted(todo.items()), 1):
            print(f"[{i}/{len(todo)}] HTA on {name}", flush=True)
            fresh[name] = (paths, hta_numbers(paths))
        old = {k: ((), v) for k, v in cached.items()}
        write_cache(run, {**old, **fresh})
        cached = cached_numbers(run)
    return cached


def value(n: HtaNumbers, what: str) -> float | None:
    """One number a threshold compares against (an HtaNumbers field or property)."""
    v = getattr(n, what)
    return None if v is None else float(v)


def score(numbers: dict[str, HtaNumbers], truth: pd.DataFrame, rules: HtaRules) -> pd.DataFrame:
    """tool_scores of HTA's calls under ``rules``."""
    rows = [
        {"report": name, "tool": "hta", "class": k, "flag": str(c.flag), "evidence": c.evidence}
        for name, n in numbers.items()
        for k, c in hta_calls(n, rules).items()
    ]
    return tool_scores(pd.DataFrame(rows), truth)


def total_f1(scores: pd.DataFrame) -> float:
    return float(scores["f1"].fillna(0).sum())


def fit(
    numbers: dict[str, HtaNumbers], truth: pd.DataFrame
) -> tuple[HtaRules, pd.DataFrame, pd.DataFrame]:
    """Coordinate search over the thresholds (module docstring)."""
    rules = HtaRules()
    default = HtaRules()
    log = []
    for _ in range(2):
        for f in fields(HtaRules):
            seen = sorted({v for n in numbers.values()
                           if (v := value(n, SOURCE[f.name])) is not None})  # fmt: skip
            cands = {getattr(default, f.name)} | {(a + b) / 2 for a, b in itertools.pairwise(seen)}
            top = 1.0 if f.name.endswith("_share") else (1e9 if f.name.endswith("_p75") else 100.0)
            cands = sorted(c for c in cands if 0 <= c <= top)
            best = max(cands, key=lambda c: (total_f1(score(numbers, truth,
                                                            replace(rules, **{f.name: c}))),
                                             -abs(c - getattr(default, f.name))))  # fmt: skip
            rules = replace(rules, **{f.name: best})
    before, after = score(numbers, truth, default), score(numbers, truth, rules)
    for f in fields(HtaRules):
        log.append({"threshold": f.name, "default": getattr(default, f.name),
                    "fitted": round(getattr(rules, f.name), 4)})  # fmt: skip
    f1 = before[["class", "tp", "fp", "fn", "f1"]].merge(
        after[["class", "tp", "fp", "fn", "f1"]], on="class", suffixes=("_default", "_fitted")
    )
    return rules, pd.DataFrame(log), f1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    numbers = numbers_of(args.run_dir)
    if not numbers:
        print(f"{args.run_dir}: no Kineto traces (kineto.enabled=true)", file=sys.stderr)
        return 2
    truth = truth_table(args.run_dir, items_of(args.run_dir))
    truth = truth[truth["report"].isin(numbers)]
    _, table, f1 = fit(numbers, truth)
    with pd.option_context("display.width", 160):
        print(table.to_string(index=False))
        print(f1.to_string(index=False))
    if args.out:
        table.to_csv(args.out, index=False)
        f1.to_csv(args.out.with_name(args.out.stem + "_f1.csv"), index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
