"""Do the intervals hold their 95%? Many rounds of one scenario, split into independent halves.

``python -m harness.execution.coverage RUN_DIR [RUN_DIR ...] [--k 2 3 5] [--draws 400]``
reads runs made with many timing rounds (``harness.repeats=20``, say) and, for every pair the
tables report (each variant against the baseline and against its removal:
:func:`harness.execution.rounds.pairs_of`), draws two disjoint sets of ``k`` rounds again and
again and counts:

- ``one_way``: how often one set's point lies inside the other set's 95% interval (the
  question a rerun asks: docs/measurement.md). A calibrated 95% interval does *not* reach 95%
  here, since the other point has its own noise: with normal rounds the rate is
  P(|T_{k-1}| < t_{0.975,k-1} / sqrt(2)), 93.0% for k = 2, 90.7% for 3, 87.9% for 5
  (``expected_one_way``);
- ``both_ways``: each set's point inside the other's interval;
- ``covers_rest``: the interval holds the point of every round outside the set (the closest
  thing to the truth the run has; expected P(|T_{k-1}| < t / sqrt(1 + k / (n - k))));
- ``adjacent``: as ``one_way``, for sets of consecutive rounds next to each other in time
  (a rerun right after: drift between rounds shows here, not in the random halves);
- with ``--bootstrap``, ``one_way_bootstrap``: the same for the percentile bootstrap the
  Student-t interval replaced (rounds resampled, then steps).

The table goes to stdout (and ``--out`` as CSV); the summary line per ``k`` is the one
docs/measurement.md quotes.
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from harness.core import runfolder as rf
from harness.core.results import read_variant
from harness.core.stats import log_t_interval, paired_rounds, t_cdf, t_quantile
from harness.execution.rounds import pairs_of

__all__ = ["expected_one_way", "expected_rest", "pair_coverage", "run_coverage"]


def expected_one_way(k: int, confidence: float = 0.95) -> float:
    """P(one set's point inside the other's t interval) for ``k`` normal rounds each."""
    q = t_quantile(0.5 + confidence / 2, k - 1) / math.sqrt(2.0)
    return 2.0 * t_cdf(q, k - 1) - 1.0


def expected_rest(k: int, n: int, confidence: float = 0.95) -> float:
    """P(the interval of ``k`` of ``n`` normal rounds holds the mean of the other n - k)."""
    q = t_quantile(0.5 + confidence / 2, k - 1) / math.sqrt(1.0 + k / (n - k))
    return 2.0 * t_cdf(q, k - 1) - 1.0


def _bootstrap(logs_steps: Sequence[tuple[np.ndarray, np.ndarray]], rng: np.random.Generator,
               resamples: int = 400) -> tuple[float, float]:  # fmt: skip
    """The percentile bootstrap the t interval replaced: rounds resampled, then each drawn
    round's steps on both sides; (low, high) of the ratio."""
    n = len(logs_steps)
    total = np.zeros(resamples)
    for _ in range(n):
        pick = rng.integers(0, n, size=resamples)
        for i, (num, den) in enumerate(logs_steps):
            rows = np.flatnonzero(pick == i)
            if rows.size == 0:
                continue
            a = num[rng.integers(0, num.size, size=(rows.size, num.size))].mean(axis=1)
            b = den[rng.integers(0, den.size, size=(rows.size, den.size))].mean(axis=1)
            total[rows] += np.log(a / b)
    lo, hi = np.quantile(np.exp(total / n), [0.025, 0.975])
    return float(lo), float(hi)


def pair_coverage(
    num: Mapping[int, Sequence[float]],
    den: Mapping[int, Sequence[float]],
    k: int,
    draws: int,
    seed: int = 0,
    bootstrap: bool = False,
) -> dict[str, float] | None:
    """The rates of the module docstring for one pair (its numerator's and denominator's
    steps by round); None with fewer than ``2 * k`` paired rounds."""
    rounds = paired_rounds(num, den)
    if len(rounds) < 2 * k or k < 2:
        return None
    steps = [(np.asarray(num[r], float), np.asarray(den[r], float)) for r in rounds]
    logs = np.array([math.log(a.mean() / b.mean()) for a, b in steps])
    rng = np.random.default_rng(seed)
    hits = {"one_way": 0, "both_ways": 0, "covers_rest": 0, "one_way_bootstrap": 0}
    for _ in range(draws):
        order = rng.permutation(len(rounds))
        a, b, rest = order[:k], order[k : 2 * k], order[k:]
        pa, la, ha = log_t_interval(logs[a])
        pb, lb, hb = log_t_interval(logs[b])
        hits["one_way"] += la <= pb <= ha
        hits["both_ways"] += (la <= pb <= ha) and (lb <= pa <= hb)
        hits["covers_rest"] += la <= math.exp(logs[rest].mean()) <= ha
        if bootstrap:
            blo, bhi = _bootstrap([steps[i] for i in a], rng)
            hits["one_way_bootstrap"] += blo <= pb <= bhi
    adjacent = _adjacent(logs, k)
    out = {key: hits[key] / draws for key in hits}
    if not bootstrap:
        out["one_way_bootstrap"] = math.nan
    out.update(adjacent=adjacent, rounds=len(rounds), k=k,
               expected_one_way=expected_one_way(k),
               expected_rest=expected_rest(k, len(rounds)))  # fmt: skip
    return out


def _adjacent(logs: np.ndarray, k: int) -> float:
    """One block of ``k`` consecutive rounds against the next: the share of such neighbours
    where the later block's point lies inside the earlier block's interval."""
    blocks = [logs[i : i + k] for i in range(0, len(logs) - k + 1, k)]
    pairs = list(itertools.pairwise(blocks))
    if not pairs:
        return math.nan
    hits = 0
    for a, b in pairs:
        _, lo, hi = log_t_interval(a)
        hits += lo <= math.exp(b.mean()) <= hi
    return hits / len(pairs)


def run_coverage(
    run_dir: Path, ks: Sequence[int], draws: int, bootstrap: bool = False
) -> pd.DataFrame:
    """One row per scenario x pair x k of a run folder."""
    from harness.core.config import discover_scenarios

    found = discover_scenarios()
    rows = []
    names = sorted({p.parent.parent.parent.name for p in rf.result_files(run_dir)})
    for name in names:
        scen = found.get(name)
        if scen is None:
            continue
        timed = {v: read_variant(run_dir, name, v) for v in scen.variant_names}
        have = [v for v, t in timed.items() if t.timed]
        for a, b in pairs_of(scen, have):
            for k in ks:
                got = pair_coverage(timed[a].rounds, timed[b].rounds, k, draws, bootstrap=bootstrap)
                if got is not None:
                    rows.append({"run": run_dir.name, "scenario": name, "pair": f"{a}/{b}", **got})
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.execution.coverage", description=__doc__)
    ap.add_argument("runs", nargs="+", type=Path, help="run folders with many timing rounds")
    ap.add_argument("--k", nargs="+", type=int, default=[2, 3, 5], help="rounds per set")
    ap.add_argument("--draws", type=int, default=400, help="random splits per pair and k")
    ap.add_argument("--bootstrap", action="store_true", help="also the replaced bootstrap")
    ap.add_argument("--out", type=Path, help="write the table here (CSV)")
    args = ap.parse_args(argv)
    table = pd.concat([run_coverage(r, args.k, args.draws, args.bootstrap) for r in args.runs])
    if table.empty:
        print("no pair has enough paired rounds for these k", file=sys.stderr)
        return 1
    pd.set_option("display.width", 200)
    print(table.round(3).to_string(index=False))
    cols = ["one_way", "both_ways", "covers_rest", "adjacent", "one_way_bootstrap",
            "expected_one_way", "expected_rest"]  # fmt: skip
    print("\nmean over pairs, by run and k:")
    print(table.groupby(["run", "k"])[cols].mean().round(3).to_string())
    if args.out:
        table.to_csv(args.out, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
