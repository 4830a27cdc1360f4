"""A profiled variant's kernels, from its nsys export: its launch configurations by GPU time.

A kernel here is a launch configuration, (mangled name, grid, block), as ncu's
``--filter-mode per-launch-config`` counts them: one name can run with several grids (an
elementwise kernel over tensors of different sizes), and each costs its own time. Ranked by
their summed GPU time inside the measured window (the NVTX ``measure`` range and its ``step``
ranges, as the detectors' window), the top ``top`` of them above ``min_share`` of the
window's kernel time are the plan, from which :mod:`harness.kernels.choose` picks what ncu
profiles. Each row carries what finds it again under ncu (its mangled name for
``--kernel-name``, its grid and block to match ncu's rows) and what the step's limit needs (its
GPU time per step).

A CUDA graph traced at graph level keeps no kernel rows: such an export plans nothing, and the
plan says why (``note``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analysis import trace as T
from analysis.export import sqlite_export

#: The plan's columns (one row per planned launch configuration).
COLUMNS = (
    "rank",
    "kernel",
    "mangled",
    "demangled",
    "grid",
    "block",
    "launches",
    "launches_per_step",
    "kernel_ms_per_step",
    "share",
)

KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
GRAPH_TABLE = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"

_GROUPED = """
SELECT {mangled} AS mangled_id, k.demangledName AS demangled_id, k.shortName AS short_id,
       k.gridX, k.gridY, k.gridZ, k.blockX, k.blockY, k.blockZ,
       COUNT(*) AS launches, SUM(k."end" - k.start) AS total_ns
FROM CUPTI_ACTIVITY_KIND_KERNEL AS k
WHERE k.start >= :lo AND k.start < :hi
GROUP BY mangled_id, demangled_id, short_id, k.gridX, k.gridY, k.gridZ, k.blockX, k.blockY,
         k.blockZ
ORDER BY total_ns DESC
"""


@dataclass(frozen=True)
class Plan:
    """One export's planned kernels and the window they were counted in."""

    kernels: pd.DataFrame
    """:data:`COLUMNS`, heaviest first."""
    steps: int | None
    """Step ranges in the window (None: no NVTX steps; per-step columns are per window)."""
    window_kernel_ms_per_step: float
    """All kernels' GPU time per step in the window (the planned ones are a share of it)."""
    name_base: str
    """How ``mangled`` names them for ncu: 'mangled', or 'function' where the export has no
    mangled names (then ``mangled`` holds the short name)."""
    note: str = ""
    """Why nothing is planned, when nothing is."""
    graph_ms_per_step: float = 0.0
    """CUDA graph replays' GPU time per step (graph-level trace: their kernels are not rows)."""

    @property
    def names(self) -> list[str]:
        """The distinct names for ncu's ``--kernel-name``."""
        return list(dict.fromkeys(self.kernels["mangled"].tolist()))

    @property
    def graph_level(self) -> bool:
        """No kernel rows because CUDA graphs replay the work (traced at graph level): ncu can
        still profile the graphs' kernels, blind (the window's first launches)."""
        return self.kernels.empty and self.graph_ms_per_step > 0

    @property
    def coverage(self) -> float:
        """The planned kernels' share of the window's kernel time."""
        return float(self.kernels["share"].sum()) if len(self.kernels) else 0.0


def dims(x: object, y: object, z: object) -> str:
    """A grid or block as ncu prints it: ``(x, y, z)``."""
    return f"({int(x)}, {int(y)}, {int(z)})"  # type: ignore[call-overload]


def measured_window(trace: T.Trace) -> tuple[int, int, int | None]:
    """(start ns, end ns, steps) of the harness's window: ``measure`` with the ``step`` ranges
    inside it on the thread that runs most of them; without them, all activity and None."""
    lo, hi = T.window(trace)
    steps = T.step_ranges(trace)
    steps = steps[steps["end_ns"].notna()]
    inside = steps[(steps["start_ns"] >= lo) & (steps["end_ns"] <= hi)]
    if inside.empty:
        return lo, hi, None
    tid = inside["global_tid"].value_counts().index[0]
    return lo, hi, int((inside["global_tid"] == tid).sum())


def plan_export(path: str | Path, *, top: int = 10, min_share: float = 0.01) -> Plan:
    """The plan of one nsys export (raises :class:`analysis.trace.TraceError` for a file that
    is not one)."""
    with T.open_trace(path) as trace:
        lo, hi, steps = measured_window(trace)
        per = float(steps or 1)
        if not trace.has(KERNEL_TABLE):
            graphs = trace.has(GRAPH_TABLE)
            note = (
                "CUDA graphs traced at graph level: no kernel rows to pick from"
                if graphs
                else "no kernels in the export"
            )
            graph_ms = _graph_ns(trace, lo, hi) / 1e6 / per
            return Plan(_empty(), steps, 0.0, "mangled", note, graph_ms)
        graph_ms = _graph_ns(trace, lo, hi) / 1e6 / per
        mangled = trace.has(KERNEL_TABLE, "mangledName")
        sql = _GROUPED.format(mangled="k.mangledName" if mangled else "k.shortName")
        _, rows = trace.query(sql, {"lo": lo, "hi": hi})
        total_ns = float(sum(r[-1] for r in rows))
        chosen = [r for r in rows if total_ns and r[-1] / total_ns >= min_share][:top]
        names = _strings(trace, {i for r in chosen for i in r[:3] if i is not None})
    if graph_ms > total_ns / 1e6 / per:
        note = (f"CUDA graphs hold most of the window's GPU time ({graph_ms:.3f} ms per step, "
                "traced at graph level): their kernels have no rows to pick from")  # fmt: skip
        return Plan(_empty(), steps, total_ns / 1e6 / per, "mangled", note, graph_ms)
    base = "mangled" if mangled and all(r[0] is not None for r in chosen) else "function"
    records = []
    for rank, r in enumerate(chosen):
        mid, did, sid, gx, gy, gz, bx, by, bz, launches, ns = r
        records.append({
            "rank": rank,
            "kernel": names.get(sid, ""),
            "mangled": names.get(mid if base == "mangled" else sid, ""),
            "demangled": names.get(did, ""),
            "grid": dims(gx, gy, gz),
            "block": dims(bx, by, bz),
            "launches": int(launches),
            "launches_per_step": launches / per,
            "kernel_ms_per_step": ns / 1e6 / per,
            "share": ns / total_ns,
        })  # fmt: skip
    frame = pd.DataFrame(records, columns=list(COLUMNS))
    note = "" if records else "no kernels inside the measured window"
    return Plan(frame, steps, total_ns / 1e6 / per, base, note, graph_ms)


def _graph_ns(trace: T.Trace, lo: int, hi: int) -> float:
    """CUDA graph replays' summed GPU time starting inside the window (graph-level trace)."""
    if not trace.has(GRAPH_TABLE):
        return 0.0
    _, rows = trace.query(
        f'SELECT SUM("end" - start) FROM {GRAPH_TABLE} WHERE start >= :lo AND start < :hi',
        {"lo": lo, "hi": hi},
    )
    return float(rows[0][0] or 0.0)


def _strings(trace: T.Trace, ids: set[int]) -> dict[int, str]:
    """StringIds' values for these ids."""
    if not ids:
        return {}
    marks = ",".join(str(int(i)) for i in sorted(ids))
    _, rows = trace.query(f"SELECT id, value FROM StringIds WHERE id IN ({marks})")
    return {int(i): str(v) for i, v in rows}


def _empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(COLUMNS))


def main(argv: list[str] | None = None) -> int:
    """``python -m harness.kernels.plan EXPORT [--top N] [--names]``: the plan as CSV, or the
    names ncu is given, one per line (the GPU probe's check of the name filter)."""
    parser = argparse.ArgumentParser(prog="python -m harness.kernels.plan")
    parser.add_argument(
        "export", help="an nsys export (.sqlite, .sqlite.xz, .sqlite.cols.xz or .nsys-rep)"
    )
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--min-share", type=float, default=0.01)
    parser.add_argument("--names", action="store_true", help="print only the names for ncu")
    args = parser.parse_args(argv)
    with (
        tempfile.TemporaryDirectory() as tmp,
        sqlite_export(Path(args.export), Path(tmp)) as path,
    ):
        plan = plan_export(path, top=args.top, min_share=args.min_share)
    if args.names:
        print("\n".join(plan.names))
    else:
        plan.kernels.to_csv(sys.stdout, index=False)
        print(
            f"# steps={plan.steps} window_kernel_ms_per_step={plan.window_kernel_ms_per_step:.4f} "
            f"coverage={plan.coverage:.3f} name_base={plan.name_base} {plan.note}",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
