"""ncu's rows joined to each variant's chosen kernels, and the step's roofline limit: every
profiled kernel at its bound, beside the variant's measured GPU time per step.

A variant's rows are its chosen launch configurations (:mod:`harness.kernels.choose`), each
with the readings of the ncu run that measured it (its own, or another variant's of the same
scenario: ``measured_in``) and its own nsys time; the launches its own run profiled that were
not chosen (another configuration of a chosen name) follow as unplanned rows.

A kernel at its bound would run its binding unit at 100% of peak, so its time per step would be
its measured time (nsys's, in the run's own conditions) times its higher speed-of-light share
(ncu's): ``at_bound_ms_per_step = kernel_ms_per_step * sol_pct / 100``. The step's limit is
the sum of those over the profiled kernels plus the unprofiled kernels' time as measured
(nothing is known about them): ``roofline_ms_per_step``. Idle GPU time and copies are not in
it; set it beside ``gpu_busy_ms_per_step`` and ``step_ms_mean`` (gpu_work.csv) to see how much
of the step the kernels' inefficiency holds, as against the time the GPU does not compute.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from harness.kernels.choose import Choice, ConfigKey, config_key
from harness.kernels.plan import Plan
from harness.kernels.tables import KERNEL_COLUMNS, LIMIT_COLUMNS, Bound, Pipe

__all__ = [
    "KERNEL_COLUMNS",
    "LIMIT_COLUMNS",
    "add_at_bound",
    "by_config",
    "join_choice",
    "read_gpu_work",
    "step_limit",
]

#: The plan's columns a variant's row takes from its own plan (its own nsys time).
PLAN_FIELDS = ("rank", "kernel", "demangled", "launches_per_step", "kernel_ms_per_step", "share")


def by_config(measured: pd.DataFrame) -> dict[ConfigKey, dict[str, Any]]:
    """One ncu run's rows (:func:`harness.kernels.parse.kernel_metrics`) by launch
    configuration (the first profiled launch of each)."""
    out: dict[ConfigKey, dict[str, Any]] = {}
    for r in measured.to_dict("records"):
        out.setdefault(
            config_key(r.get("ncu_kernel", ""), r.get("grid", ""), r.get("block", "")), r
        )
    return out


def join_choice(
    choice: Choice, own: pd.DataFrame, measured: Mapping[str, Mapping[ConfigKey, dict[str, Any]]]
) -> pd.DataFrame:
    """A variant's rows: each chosen configuration with the readings of the run that measured
    it (``measured``: label -> :func:`by_config` of each finished run), then the launches of
    its own run (``own``) that no chosen configuration matched; ``planned`` says which is
    which. A chosen configuration whose run has no reading of it is left out."""
    records = []
    mine: set[ConfigKey] = set()
    for r in choice.rows.to_dict("records"):
        key = config_key(r["mangled"], r["grid"], r["block"])
        hit = measured.get(str(r["measured_in"]), {}).get(key)
        if hit is None:
            continue
        if r["measured_in"] == choice.label:
            mine.add(key)
        records.append({**hit, **{c: r[c] for c in PLAN_FIELDS}, "planned": True,
                        "mangled": key[0], "measured_in": r["measured_in"]})  # fmt: skip
    for r in own.to_dict("records"):
        key = config_key(r.get("ncu_kernel", ""), r.get("grid", ""), r.get("block", ""))
        if key in mine:
            continue
        mine.add(key)
        records.append({**r, **dict.fromkeys(PLAN_FIELDS, np.nan), "kernel": key[0],
                        "planned": False, "mangled": key[0], "measured_in": choice.label})  # fmt: skip
    return pd.DataFrame(records)


def add_at_bound(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` (joined and classified) with ``at_bound_ms_per_step``: the kernel's time per step
    with its binding unit at peak (NaN for a kernel the plan did not time)."""
    out = rows.copy()
    if out.empty:
        out["at_bound_ms_per_step"] = pd.Series(dtype=float)
        return out
    ms = pd.to_numeric(out["kernel_ms_per_step"], errors="coerce")
    out["at_bound_ms_per_step"] = ms * pd.to_numeric(out["sol_pct"], errors="coerce") / 100.0
    return out


def step_limit(
    plan: Plan,
    kernels: pd.DataFrame,
    work: Mapping[str, Any] | None,
    *,
    label: str = "",
    own_launches: int = 0,
) -> dict[str, Any]:
    """The variant's row of kernel_limits.csv from its joined kernels (:func:`join_choice`),
    its gpu_work.csv row (``work``; None where the run has none), its label (rows measured by
    another variant are counted as reused) and the launches its own ncu run profiled."""
    planned = kernels[kernels["planned"].astype(bool)] if len(kernels) else kernels
    total = float(plan.window_kernel_ms_per_step)
    profiled = _sum(planned, "kernel_ms_per_step")
    at_bound = _sum(planned, "at_bound_ms_per_step")
    roofline = at_bound + max(0.0, total - profiled) if len(planned) else np.nan
    busy = _get(work, "gpu_busy_ms_per_step")
    step = _get(work, "step_ms_mean")
    reused = int((planned["measured_in"] != label).sum()) if "measured_in" in planned else 0
    row: dict[str, Any] = {
        "steps": plan.steps,
        "kernels_planned": len(plan.kernels),
        "kernels_profiled": own_launches,
        "kernels_matched": len(planned),
        "kernels_reused": reused,
        "coverage_share": profiled / total if total > 0 else np.nan,
        "kernel_ms_per_step": total if total > 0 else np.nan,
        "profiled_kernel_ms_per_step": profiled if len(planned) else np.nan,
        "at_bound_ms_per_step": at_bound if len(planned) else np.nan,
        "roofline_ms_per_step": roofline,
        "gpu_busy_ms_per_step": busy,
        "step_ms_mean": step,
        "roofline_share_of_busy": roofline / busy if busy and busy > 0 else np.nan,
        "roofline_share_of_step": roofline / step if step and step > 0 else np.nan,
    }
    row.update(_shares(planned, profiled))
    return row


def _sum(rows: pd.DataFrame, col: str) -> float:
    if not len(rows):
        return 0.0
    return float(pd.to_numeric(rows[col], errors="coerce").sum())


def _shares(planned: pd.DataFrame, profiled_ms: float) -> dict[str, float]:
    """Shares of the profiled kernels' time per step that are compute-, memory- and
    latency-bound, and that ran on the tensor pipe."""
    bounds = {f"{b.value}_bound_share": b for b in (Bound.COMPUTE, Bound.MEMORY, Bound.LATENCY)}
    if not len(planned) or profiled_ms <= 0:
        return dict.fromkeys([*bounds, "tensor_pipe_share"], np.nan)
    ms = pd.to_numeric(planned["kernel_ms_per_step"], errors="coerce").fillna(0.0)
    share = {
        n: float(ms[planned["bound"] == b.value].sum()) / profiled_ms for n, b in bounds.items()
    }
    share["tensor_pipe_share"] = float(ms[planned["pipe"] == Pipe.TENSOR.value].sum()) / profiled_ms
    return share


def _get(work: Mapping[str, Any] | None, key: str) -> float:
    if not work or key not in work:
        return np.nan
    try:
        value = float(work[key])
    except (TypeError, ValueError):
        return np.nan
    return value


def read_gpu_work(path: Any) -> dict[tuple[str, str], dict[str, Any]]:
    """gpu_work.csv's rows by (scenario, variant); {} where the run has none."""
    try:
        frame = pd.read_csv(path)
    except (OSError, ValueError):
        return {}
    if not {"scenario", "variant"} <= set(frame.columns):
        return {}
    return {(str(r["scenario"]), str(r["variant"])): r for r in frame.to_dict("records")}
