"""Two runs on the same GPU model: does each fix's speedup repeat, and where not, how far did
the host move? And for any runs, the numbers that carry between hosts. (``harness compare``'s
"Repeatability" and "Host-independent numbers" sections, ``compare_repeat.csv`` and
``compare_host.csv``.)

Why: a lent guest's speed changes between runs, and a host-bound variant's step moves with it;
the host probes each worker ran around its window (runs.csv's ``probe_launch_us``,
``probe_python_ms``) measure the host's side of that. Whether a speedup repeats is asked two
ways: each run's point inside the other's interval (``a_in_b``, ``b_in_a``), and the two runs'
estimates agreeing within their combined noise (``agree``: Welch's t test on the logs,
:func:`harness.core.stats.agree`). What does not move with the host is the step counted in
launch-probe units, the loop's own CPU time in the same units, and the GPU's busy time per step
(:func:`host_free_table`). Every sentence here is built from the tables' columns.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from harness.core.stats import agree, log_se
from harness.report.fmt import g3, num

__all__ = ["HOST_FREE", "drift_text", "host_free_table", "host_probes", "repeat_table"]

#: runs.csv's host probe columns (a variant's timing rounds' median) and their units.
PROBES = {"probe_launch_us": "us", "probe_python_ms": "ms"}


def host_probes(runs: pd.DataFrame) -> dict[str, float]:
    """A run's host probes: the median over its variants of each probe column (NaN where the
    run has none: made before the probes, or with them off)."""
    out = {}
    for col in PROBES:
        v = pd.to_numeric(runs[col], errors="coerce") if col in runs else pd.Series(dtype=float)
        out[col] = float(v.median()) if v.notna().any() else math.nan
    return out


def _inside(x: float, lo: float, hi: float) -> bool | None:
    """Whether ``x`` lies within [lo, hi]; None where a number is missing."""
    if not all(math.isfinite(v) for v in (x, lo, hi)):
        return None
    return lo <= x <= hi


def _side(r: dict[str, Any]) -> tuple[float, float, float]:
    return num(r.get("speedup")), num(r.get("speedup_ci_low")), num(r.get("speedup_ci_high"))


def _agree(r: dict[str, Any], other: dict[str, Any]) -> bool | None:
    """Welch's test on two runs' speedups (None for a run without ``paired_rounds``)."""
    (sa, la, ha), (sb, lb, hb) = _side(r), _side(other)
    na, nb = num(r.get("paired_rounds")), num(other.get("paired_rounds"))
    if not (math.isfinite(na) and math.isfinite(nb)):
        return None
    se_a, se_b = log_se(la, ha, int(na)), log_se(lb, hb, int(nb))
    return agree(sa, se_a, int(na), sb, se_b, int(nb))


def _probes_of(runs: pd.DataFrame, scenario: str, variant: str) -> dict[str, float]:
    sel = runs[(runs["scenario"] == scenario) & (runs["variant"] == variant)]
    row = sel.iloc[0].to_dict() if not sel.empty else {}
    return {col: num(row.get(col)) for col in PROBES}


def repeat_table(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """One row per fix (every non-baseline variant with a speedup in both runs): both runs'
    speedups and intervals, whether each lies inside the other's interval (``a_in_b``,
    ``b_in_a``; ``repeats``: both), and the host probes of the fix and of its baseline in
    each run with their change (``*_change``: b / a - 1)."""
    rows = []
    keyed = b.set_index(["scenario", "variant"])
    for r in a.to_dict("records"):
        key = (r["scenario"], r["variant"])
        if str(r.get("kind")) == "baseline" or key not in keyed.index:
            continue
        other = keyed.loc[key]
        other = (other.iloc[0] if isinstance(other, pd.DataFrame) else other).to_dict()
        (sa, la, ha), (sb, lb, hb) = _side(r), _side(other)
        if not (math.isfinite(sa) and math.isfinite(sb)):
            continue
        a_in_b, b_in_a = _inside(sa, lb, hb), _inside(sb, la, ha)
        row: dict[str, Any] = {
            "scenario": key[0], "variant": key[1], "speedup_a": sa, "ci_low_a": la,
            "ci_high_a": ha, "speedup_b": sb, "ci_low_b": lb, "ci_high_b": hb,
            "a_in_b": a_in_b, "b_in_a": b_in_a,
            "repeats": None if a_in_b is None or b_in_a is None else a_in_b and b_in_a,
            "agree": _agree(r, other),
            "baseline": _baseline(a, key[0]),
        }  # fmt: skip
        for who, variant in (("fix", key[1]), ("base", row["baseline"])):
            pa, pb = _probes_of(a, key[0], variant), _probes_of(b, key[0], variant)
            for col in PROBES:
                short = col.removeprefix("probe_")
                row[f"{who}_{short}_a"], row[f"{who}_{short}_b"] = pa[col], pb[col]
                row[f"{who}_{short}_change"] = _change(pa[col], pb[col])
        rows.append(row)
    out = pd.DataFrame(rows)
    if not out.empty:
        out["host_drift"] = [drift_text(r) if r["repeats"] is False else "" for r in rows]
    return out


def _baseline(runs: pd.DataFrame, scenario: str) -> str:
    sel = runs[(runs["scenario"] == scenario) & (runs["kind"].astype(str) == "baseline")]
    return str(sel["variant"].iloc[0]) if not sel.empty else "baseline"


def _change(a: float, b: float) -> float:
    return b / a - 1 if math.isfinite(a) and math.isfinite(b) and a > 0 else math.nan


def _probe_phrase(row: dict[str, Any], who: str, short: str, name: str, unit: str) -> str:
    a, b, ch = row[f"{who}_{short}_a"], row[f"{who}_{short}_b"], row[f"{who}_{short}_change"]
    if not (math.isfinite(a) and math.isfinite(b)):
        return ""
    return f"{name} {g3(a)} -> {g3(b)} {unit} ({ch:+.0%})"


def drift_text(row: dict[str, Any]) -> str:
    """``kernel_flood/baseline: launch probe 10.1 -> 7.2 us (-29%), python loop 61 -> 44 ms
    (-28%); kernel_flood/cuda_graphs: ...`` from a :func:`repeat_table` row's columns; a side
    without probes is said to have none (runs made before the probes: neither has any)."""
    parts, any_probe = [], False
    for who in ("base", "fix"):
        variant = row["baseline"] if who == "base" else row["variant"]
        said = [
            _probe_phrase(row, who, "launch_us", "launch probe", "us"),
            _probe_phrase(row, who, "python_ms", "python loop", "ms"),
        ]
        said = [s for s in said if s]
        any_probe = any_probe or bool(said)
        parts.append(
            f"{row['scenario']}/{variant}: " + (", ".join(said) if said else "no host probes")
        )
    return "; ".join(parts) if any_probe else "no host probes in either run"


#: The columns that carry between hosts (runs.csv's, and gpu_work.csv's GPU busy time).
HOST_FREE = ("step_launches", "loop_cpu_launches", "gpu_busy_ms_per_step")

#: A variant is host-bound where its GPU is busy less than this share of its step.
HOST_BOUND_BUSY = 0.8


def host_free_table(
    runs: dict[str, pd.DataFrame], gpu_work: dict[str, pd.DataFrame | None]
) -> pd.DataFrame:
    """One row per run x scenario x variant: the numbers that do not move with the host's
    speed (:data:`HOST_FREE`) beside the mean step, and ``host_bound`` (the GPU busy less than
    :data:`HOST_BOUND_BUSY` of the step in that run's trace); host-bound variants first."""
    rows = []
    for label, table in runs.items():
        work = gpu_work.get(label)
        busy = {}
        if work is not None and "gpu_busy_ms_per_step" in work:
            busy = {(r["scenario"], r["variant"]): num(r["gpu_busy_ms_per_step"])
                    for r in work.to_dict("records")}  # fmt: skip
        for r in table.to_dict("records"):
            step = num(r.get("step_ms_mean"))
            if not math.isfinite(step):
                continue
            gpu = busy.get((r["scenario"], r["variant"]), math.nan)
            rows.append({
                "run": label, "scenario": r["scenario"], "variant": r["variant"],
                "step_ms_mean": step, "step_launches": num(r.get("step_launches")),
                "loop_cpu_launches": num(r.get("loop_cpu_launches")),
                "gpu_busy_ms_per_step": gpu,
                "host_bound": bool(math.isfinite(gpu) and gpu < HOST_BOUND_BUSY * step),
            })  # fmt: skip
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    bound = out.groupby(["scenario", "variant"])["host_bound"].transform("any")
    out = out.assign(_bound=~bound).sort_values(["_bound", "scenario", "variant", "run"])
    return out.drop(columns="_bound").reset_index(drop=True)
