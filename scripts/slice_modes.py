"""Set each timing round's and each slice pair's ratio beside the host's speed around it.

Reads runs made with ``harness.timing.slice_probes=true`` (scripts/device/slice-modes.sh) and
prints, per scenario and pair (the baseline over each other variant):

- per round: the ratio of mean steps (what runs.csv's interval is made of) and the medians of
  the slice probes of both sides (Python loop on the loop's core, on a helper core, the copy);
- per slice pair (a baseline slice and the other variant's slice next to it in time): the
  mean log ratio where both probes read the host's fast mode, where both read the slow one,
  and the correlation of the log ratio with the probes' log over all pairs.

A probe reads "slow" above the run's threshold: the geometric midpoint of its 10th and 90th
percentiles over every slice of the run (the host's two modes are about 1.9x apart).
Usage: python scripts/slice_modes.py RUN_DIR [RUN_DIR ...]
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

KEYS = ("python_ms", "helper_python_ms", "copy_ms", "launch_us")


def _slices(result: dict) -> list[dict]:
    """Each slice of one worker: its start, mean step (ms) and probes (mean of before/after)."""
    s, steps = result["slices"], result["step_ms"]
    out, i = [], 0
    for k, n in enumerate(s["steps"]):
        probe = s.get("probes", [None] * len(s["steps"]))[k] or {}
        row = {"start": s["start_s"][k], "step": float(np.mean(steps[i : i + n]))}
        for key in KEYS:
            got = [probe[w][key] for w in ("before", "after") if probe.get(w, {}).get(key)]
            row[key] = float(np.mean(got)) if got else math.nan
        out.append(row)
        i += n
    return out


def _load(run: Path) -> dict:
    """{scenario: {round: {variant: (result, slices)}}}."""
    got: dict = {}
    for path in sorted(run.glob("*/*/timing-*/result.json")):
        res = json.loads(path.read_text())
        if not res.get("slices") or not res.get("step_ms"):
            continue
        rnd = int(path.parent.name.split("-")[1])
        got.setdefault(res["scenario"], {}).setdefault(rnd, {})[res["variant"]] = (
            res,
            _slices(res),
        )
    return got


def _threshold(runs: dict, key: str) -> float:
    values = [
        sl[key]
        for rounds in runs.values()
        for variants in rounds.values()
        for _, slices in variants.values()
        for sl in slices
        if not math.isnan(sl[key])
    ]
    if not values:
        return math.nan
    lo, hi = np.percentile(values, [10, 90])
    return math.sqrt(lo * hi)


def _pairs(base: list[dict], other: list[dict]) -> list[tuple[float, dict, dict]]:
    """(log ratio, baseline slice, other slice) for each baseline slice and the other's slice
    nearest to it in time."""
    out = []
    starts = np.array([o["start"] for o in other])
    for b in base:
        o = other[int(np.argmin(np.abs(starts - b["start"])))]
        out.append((math.log(b["step"] / o["step"]), b, o))
    return out


def report(run: Path) -> None:
    runs = _load(run)
    cut = {key: _threshold(runs, key) for key in KEYS}
    print(f"== {run}  slow above: " + ", ".join(f"{k} {v:.3f}" for k, v in cut.items()))
    for scen, rounds in sorted(runs.items()):
        names = sorted({v for r in rounds.values() for v in r})
        for other in [n for n in names if n != "baseline"]:
            print(f"-- {scen}: baseline / {other}")
            every = []
            for rnd, variants in sorted(rounds.items()):
                if "baseline" not in variants or other not in variants:
                    continue
                (rb, sb), (ro, so) = variants["baseline"], variants[other]
                ratio = np.mean(rb["step_ms"]) / np.mean(ro["step_ms"])
                med = {k: np.nanmedian([s[k] for s in sb + so]) for k in KEYS}
                pairs = _pairs(sb, so)
                every += pairs
                slow = {k: np.mean([(b[k] > cut[k]) + (o[k] > cut[k]) for _, b, o in pairs]) / 2
                        for k in KEYS}  # fmt: skip
                print(f"  round {rnd}: ratio {ratio:.3f}  probes " + "  ".join(
                    f"{k} {med[k]:.3f} (slow {slow[k]:.0%})" for k in KEYS))  # fmt: skip
            _by_mode(every, cut)


def _by_mode(pairs: list[tuple[float, dict, dict]], cut: dict) -> None:
    if not pairs:
        return
    logs = np.array([p[0] for p in pairs])
    line = [f"  slice pairs {len(pairs)}: all {math.exp(logs.mean()):.3f}"]
    for key in KEYS:
        fast = [r for r, b, o in pairs if b[key] <= cut[key] and o[key] <= cut[key]]
        slow = [r for r, b, o in pairs if b[key] > cut[key] and o[key] > cut[key]]
        x = np.log([b[key] for _, b, _ in pairs])
        ok = ~np.isnan(x)
        corr = np.corrcoef(x[ok], logs[ok])[0, 1] if ok.sum() > 2 and x[ok].std() > 0 else math.nan
        fmt = lambda v: f"{math.exp(np.mean(v)):.3f} ({len(v)})" if v else "-"  # noqa: E731
        line.append(f"{key}: fast {fmt(fast)} slow {fmt(slow)} corr {corr:+.2f}")
    print(" | ".join(line))


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        report(Path(arg))
