"""Set each timing round's and each slice pair's ratio beside the host's speed around it.

Reads runs made with ``harness.timing.slice_probes=true`` (scripts/device/slice-modes.sh) and
prints, per scenario and pair (the baseline over each other variant):

- per round: the ratio of mean steps (what runs.csv's interval is made of) and the medians of
  the slice probes of both sides (Python loop on the loop's core, on a helper core, the copy);
- per slice pair (a baseline slice and the other variant's slice next to it in time): the
  mean log ratio where both probes read the host's fast mode, where both read the slow one,
  and the correlation of the log ratio with the probes' log over all pairs.

- adjusted to the host's fast mode: each slice pair's log ratio less ``beta . (log probes -
  log reference)``, beta fitted on every pair of the run within rounds (round fixed effects:
  what moves a ratio inside a round), the reference the 10th percentile of the probe over the
  run (its fast mode); then the rounds' Student-t interval as runs.csv makes it.

A probe reads "slow" above the run's threshold: the geometric midpoint of its 10th and 90th
percentiles over every slice of the run (the host's two modes are about 1.9x apart).
Usage: python scripts/slice_modes.py RUN_DIR [RUN_DIR ...]
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

from harness.core import runfolder as rf
from harness.core.stats import half_width, log_t_interval

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
    for path in rf.result_files(run):
        rnd = rf.timing_round(path.parent.name)
        res = rf.read_json(path) if rnd is not None else None
        if not res or not res.get("slices") or not res.get("step_ms"):
            continue
        got.setdefault(res["scenario"], {}).setdefault(rnd, {})[res["variant"]] = (
            res,
            _slices(res),
        )
    return got


def _median(values: list[float]) -> float:
    kept = [v for v in values if not math.isnan(v)]
    return float(np.median(kept)) if kept else math.nan


def _threshold(runs: dict, key: str) -> float:
    """The probe's slow-mode threshold: the geometric midpoint of its 10th and 90th percentiles."""
    return math.sqrt(_percentile(runs, key, 10) * _percentile(runs, key, 90))


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
                med = {k: _median([s[k] for s in sb + so]) for k in KEYS}
                pairs = _pairs(sb, so)
                every += pairs
                slow = {k: np.mean([(b[k] > cut[k]) + (o[k] > cut[k]) for _, b, o in pairs]) / 2
                        for k in KEYS}  # fmt: skip
                print(f"  round {rnd}: ratio {ratio:.3f}  probes " + "  ".join(
                    f"{k} {med[k]:.3f} (slow {slow[k]:.0%})" for k in KEYS))  # fmt: skip
            _by_mode(every, cut)
            _adjusted(rounds, other, _reference(runs))


def _reference(runs: dict) -> dict[str, float]:
    """Each probe's 10th percentile over every slice of the run: its fast mode."""
    return {key: _percentile(runs, key, 10) for key in KEYS}


def _percentile(runs: dict, key: str, q: float) -> float:
    values = [
        sl[key]
        for rounds in runs.values()
        for variants in rounds.values()
        for _, slices in variants.values()
        for sl in slices
        if not math.isnan(sl[key])
    ]
    return float(np.percentile(values, q)) if values else math.nan


def _adjusted(rounds: dict, other: str, ref: dict[str, float]) -> None:
    """The pair's rounds' interval, raw and adjusted to each probe's fast mode."""
    parts = []
    for key in ("python_ms", "copy_ms", "launch_us"):
        rows = []
        for rnd, variants in sorted(rounds.items()):
            if "baseline" in variants and other in variants and not math.isnan(ref[key]):
                for r, b, o in _pairs(variants["baseline"][1], variants[other][1]):
                    rows.append((rnd, r, math.log(b[key]), math.log(o[key])))
        a = np.array(rows)
        if len(a) < 4 or np.isnan(a).any() or len(set(a[:, 0])) < 2:
            continue
        x = a[:, 2:] - math.log(ref[key])
        y, xd = a[:, 1].copy(), x.copy()
        for u in np.unique(a[:, 0]):  # within rounds
            m = a[:, 0] == u
            y[m] -= y[m].mean()
            xd[m] -= xd[m].mean(0)
        beta = np.linalg.lstsq(xd, y, rcond=None)[0]
        per_round = [
            (a[m, 1] - x[m] @ beta).mean() for m in (a[:, 0] == u for u in np.unique(a[:, 0]))
        ]
        p, lo, hi = log_t_interval(per_round)
        parts.append(
            f"{key}: {p:.3f} [{lo:.3f}-{hi:.3f}] +-{half_width(lo, hi):.1%} beta {beta.round(2)}"
        )
    raw = [np.mean([r for r, _, _ in _pairs(v["baseline"][1], v[other][1])])
           for v in rounds.values() if "baseline" in v and other in v]  # fmt: skip
    if len(raw) >= 2:
        p, lo, hi = log_t_interval(raw)
        print(f"  adjusted to the fast mode (slice pairs; raw {p:.3f} [{lo:.3f}-{hi:.3f}]): "
              + " | ".join(parts))  # fmt: skip


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
