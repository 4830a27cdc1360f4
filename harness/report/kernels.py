"""The run report's "Kernels (Nsight Compute)" section: what the kernel-level row measured.

The ``harness kernels`` step (``harness/kernels``; docs/kernels.md) profiles each variant's top
kernels with Nsight Compute and writes ``kernels.csv`` (one row per profiled kernel),
``kernel_limits.csv`` (one row per variant) and ``kernels_run.json`` (how the step ended). Per
scenario the section shows the roofline picture (``analysis/plots/roofline.py``: each kernel at
its two speed-of-light shares, baseline beside its fixes and removal), a table of the variants
(their limit beside the measured GPU time, how the time splits by bound, the row's witness of
the measured truth from diagnosis.csv) and a table of the kernels: each one's family, its time
per step (nsys), its bound, the pipe its arithmetic ran on (for a GEMM: tensor cores or the FMA
pipe), its type and where it was measured. A run without the row gets a caveat with the reason.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from harness.core import runfolder as rf
from harness.kernels.tables import KERNELS_CSV, LIMITS_CSV, RUN_JSON
from harness.report.doc import Doc
from harness.report.fmt import g3

__all__ = ["KERNELS", "kernels_section"]

#: The table the kernels step writes into the run folder (``kernels.csv``).
KERNELS = KERNELS_CSV.removesuffix(".csv")
LIMITS = LIMITS_CSV.removesuffix(".csv")
#: Most kernels a variant lists in the section's table (its heaviest; kernels.csv has all).
ROWS_PER_VARIANT = 6
_KIND_ORDER = {"baseline": 0, "fix": 1, "ideal": 2}

#: The section's two tables' columns.
VARIANT_HEADER = (
    "variant",
    "state",
    "roofline ms",
    "busy ms",
    "mean step ms",
    "profiled",
    "compute",
    "memory",
    "latency",
    "tensor pipe",
    "witness",
    "why",
)
KERNEL_HEADER = (
    "variant",
    "kernel",
    "family",
    "ms/step",
    "share",
    "bound",
    "SM %",
    "memory %",
    "DRAM %",
    "pipe",
    "tensor / FMA %",
    "type",
    "measured in",
)


def _read(run: Any, name: str) -> pd.DataFrame | None:
    """A table of the run folder by name: through the report's reader where it has one
    (``RunFolder.read``), else the CSV itself; None where absent or unreadable."""
    if hasattr(run, "read"):
        return run.read(name)
    try:
        return pd.read_csv(run.path / f"{name}.csv")
    except (OSError, ValueError):
        return None


def kernels_section(doc: Doc, run: Any) -> None:
    """The kernels Nsight Compute profiled, per scenario, or why the run has none."""
    kernels, limits = _read(run, KERNELS), _read(run, LIMITS)
    record = rf.read_json(run.path / RUN_JSON) or {}
    if kernels is None or limits is None:
        why = record.get("reason") or "this run did not profile kernels with Nsight Compute"
        doc.note(
            f"no kernels.csv: {why} (the `harness kernels` step; docs/kernels.md)",
            kind="caveat",  # an optional step: its absence is no gap in a complete run
        )
        return
    _intro(doc, limits, record)
    diag = _read(run, "diagnosis")
    cfg = record.get("config") or {}
    latency = float(cfg.get("bound_min_pct") or 60.0)
    # the row's priority order (the scenarios it witnesses first), then those it only left out
    for scenario in dict.fromkeys([*kernels["scenario"], *limits["scenario"]]):
        doc.h(3, f"{scenario}", f"kernels-{scenario}")
        _picture(doc, kernels, limits, scenario, latency)
        _variants_table(doc, limits, diag, scenario)
        _kernels_table(doc, kernels, scenario)


def _intro(doc: Doc, limits: pd.DataFrame, record: dict[str, Any]) -> None:
    launches = pd.to_numeric(limits.get("launches"), errors="coerce").fillna(0)
    own = int((launches > 0).sum())
    read = int((limits.get("selection") == "reused").sum()) if "selection" in limits else 0
    states = limits["state"].value_counts().to_dict()
    left = ", ".join(f"{n} {s}" for s, n in states.items() if s != "ok")
    cfg = record.get("config") or {}
    wall = record.get("wall_s")
    doc.p(
        f"Nsight Compute profiled {int(launches.sum())} kernel launches in {own} processes "
        f"(one launch per launch configuration, clocks left alone); {read} variants read every "
        f"kernel from another variant of their scenario"
        + (f"; {left}" if left else "")
        + (f"; the step took {g3(float(wall))} s" if isinstance(wall, int | float) else "")
        + f". Sections: {', '.join(cfg.get('sections') or [])}; latency-bound below "
        f"{g3(float(cfg.get('bound_min_pct') or 60))}% of both peaks, a pipe named from "
        f"{g3(float(cfg.get('pipe_min_pct') or 20))}% of the SM's active cycles."
    )


def _picture(
    doc: Doc, kernels: pd.DataFrame, limits: pd.DataFrame, scenario: str, latency: float
) -> None:
    mine = kernels[kernels["scenario"] == scenario]
    if mine.empty:
        doc.note(f"no kernel of {scenario} was profiled (kernel_limits.csv says why)")
        return
    from analysis.plots.roofline import roofline_figure

    doc.image(
        f"roofline_{scenario}",
        roofline_figure(kernels, scenario, limits, latency_pct=latency),
        f"{scenario}: each profiled kernel at its compute and memory speed-of-light shares",
        "Each marker a kernel at its two shares of the GPU's peak (up: the SMs, right: the "
        "memory system); colour its bound, shape the pipe its arithmetic ran on (hollow: none "
        "busy), area its share of the variant's kernel time. Titles: the step's limit with "
        "every profiled kernel at its bound, beside the measured GPU time and step.",
        width_px=0,
    )


def _share(v: Any) -> str:
    f = pd.to_numeric(v, errors="coerce")
    return "–" if pd.isna(f) else f"{100 * float(f):.0f}%"


def _ms(v: Any) -> str:
    f = pd.to_numeric(v, errors="coerce")
    return "–" if pd.isna(f) else g3(float(f))


def _order(frame: pd.DataFrame) -> pd.DataFrame:
    kind = frame["kind"].map(lambda k: _KIND_ORDER.get(str(k), 3)) if "kind" in frame else 0
    return frame.assign(_k=kind).sort_values("_k", kind="stable").drop(columns="_k")


def _variants_table(
    doc: Doc, limits: pd.DataFrame, diag: pd.DataFrame | None, scenario: str
) -> None:
    witness: dict[str, tuple[str, str]] = {}
    if diag is not None and "witness" in diag:
        d = diag[diag["scenario"] == scenario]
        witness = {str(r["variant"]): (str(r["witness"]), str(r.get("witness_reason") or ""))
                   for r in d.to_dict("records")}  # fmt: skip
    rows = []
    for r in _order(limits[limits["scenario"] == scenario]).to_dict("records"):
        w, why = witness.get(str(r["variant"]), ("", ""))
        rows.append([
            r["variant"], r["state"], _ms(r.get("roofline_ms_per_step")),
            _ms(r.get("gpu_busy_ms_per_step")), _ms(r.get("step_ms_mean")),
            _share(r.get("coverage_share")), _share(r.get("compute_bound_share")),
            _share(r.get("memory_bound_share")), _share(r.get("latency_bound_share")),
            _share(r.get("tensor_pipe_share")), w, why or (r.get("reason") or ""),
        ])  # fmt: skip
    doc.table(
        list(VARIANT_HEADER),
        rows,
        "Per variant: the step's roofline limit (every profiled kernel at its bound, the rest "
        "as measured) beside its GPU busy time and step (ms per step); the profiled kernels' "
        "share of the kernel time and how that time splits by bound and on tensor cores; the "
        "row's witness of the measured truth (harness/judge/witness.py).",
        numeric=range(2, 10),
    )


def _kernels_table(doc: Doc, kernels: pd.DataFrame, scenario: str) -> None:
    mine = kernels[(kernels["scenario"] == scenario) & kernels["planned"].astype(bool)]
    rows = []
    for variant, group in _order(mine).groupby("variant", sort=False):
        top = group.sort_values("kernel_ms_per_step", ascending=False).head(ROWS_PER_VARIANT)
        for r in top.to_dict("records"):
            pipe = str(r.get("pipe"))
            pct = pd.to_numeric(r.get("pipe_pct"), errors="coerce")
            if pd.notna(pct) and pipe != "none":
                pipe += f" {float(pct):.0f}%"
            own = f"{scenario}/{variant}"
            dtype = r.get("dtype") if isinstance(r.get("dtype"), str) else ""
            rows.append([
                variant, str(r.get("kernel"))[:60], r.get("family"), _ms(r["kernel_ms_per_step"]),
                _share(r.get("share")), r.get("bound"), _ms(r.get("sm_throughput_pct")),
                _ms(r.get("memory_throughput_pct")), _ms(r.get("dram_throughput_pct")), pipe,
                f"{_ms(r.get('tensor_pipe_pct'))} / {_ms(r.get('fma_pipe_pct'))}", dtype,
                "" if r.get("measured_in") == own else str(r.get("measured_in")),
            ])  # fmt: skip
    doc.table(
        list(KERNEL_HEADER),
        rows,
        f"Each variant's heaviest profiled kernels (at most {ROWS_PER_VARIANT}; kernels.csv "
        "has all): time per step and share of the kernel time (nsys), bound and shares of peak "
        "(ncu), the pipe its arithmetic ran on with that pipe's share of the SM's active cycles "
        "(a GEMM's is the larger of its tensor and FMA pipes, both beside it), the type its "
        "name spells, and the "
        "variant whose ncu run measured it where that is another one (the same kernel on the "
        "same grid).",
        numeric=(3, 4, 6, 7, 8),
    )
