"""What ``harness run`` prints at its end, within 100 columns (harness.core.console): the
verdicts, the confusion matrix, the analytic limits and the side-stream GPU work; or, where
nothing could be judged, one line that says why. The full tables are the run folder's CSVs
(verdicts.csv, confusion.csv, diagnosis.csv, gpu_work.csv)."""

from __future__ import annotations

import sys

import pandas as pd

from harness.core.console import fit_line, fit_table
from harness.judge.diagnosis_table import UNREADABLE
from harness.judge.scoring import is_decided

__all__ = [
    "cpu_slower_note",
    "nothing_judged",
    "print_diagnosis",
    "print_unprofiled",
    "unprofiled_why",
]


def _g(x: float) -> str:
    return f"{x:.3g}"


def _line(text: str) -> None:
    """A one-line message on stdout: wrapped to 100 columns on a terminal, whole in a log."""
    if sys.stdout.isatty():
        text = "\n".join(fit_line(part) for part in text.split("\n"))
    print(text)


def print_diagnosis(
    verdict: pd.DataFrame, matrix: pd.DataFrame, diag: pd.DataFrame, work: pd.DataFrame
) -> None:
    """The end of a profiled run: verdicts (the reason wrapped under its column), the confusion
    matrix or why it is empty, and the GPU-work tables where they have rows."""
    print("\nverdicts:")
    print(fit_table(verdict[["scenario", "verdict", "reason"]]))
    why = nothing_judged(diag)
    if why is not None:
        _line(f"\nconfusion: nothing judged ({why})")
    else:
        print("\nconfusion (rows: expected, columns: primary finding):")
        print(fit_table(matrix.reset_index(names="expected")))
        left = left_out(diag)
        if left:
            _line(f"left out of the matrix: {left}")
    _print_limits(work)
    _print_side_work(work)


def print_unprofiled(runs: pd.DataFrame, nsys_enabled: bool, nsys_found: bool) -> None:
    """The end of a run without one nsys export (runs.csv's table): no verdicts or matrix,
    and why, rather than silence."""
    why = unprofiled_why(runs, nsys_enabled=nsys_enabled, nsys_found=nsys_found)
    _line(f"\nverdicts, confusion: nothing judged (no variant has an nsys export: {why})")


def cpu_slower_note(runs: pd.DataFrame) -> str | None:
    """On the CPU, a line under the summary for the fixes measured slower than their baseline
    (runs.csv's speedup < 1): CPU timings say nothing about a fix on a GPU, so a 0.8 there is
    no verdict on it. None where no fix is slower."""
    if "speedup" not in runs:
        return None
    speed = pd.to_numeric(runs["speedup"], errors="coerce")
    slower = runs[(speed < 1) & (runs["variant"].astype(str) != "baseline")]
    if slower.empty:
        return None
    names = ", ".join(f"{r.scenario}/{r.variant}" for r in slower.itertuples())
    return (
        f"note: {names} measured slower than the baseline on the CPU. These fixes target a GPU "
        "(copies, launches, syncs); CPU timings say nothing about what they are worth there."
    )


def unprofiled_why(runs: pd.DataFrame, *, nsys_enabled: bool, nsys_found: bool) -> str:
    """Why no variant of ``runs`` (runs.csv) was profiled, in a few words."""
    if not nsys_enabled:
        return "nsys.enabled=false"
    if not nsys_found:
        return "no nsys found"
    if runs.empty:
        return "no variant ran"
    if not (runs["status"].astype(str) == "ok").any():  # e.g. a profile that left no report
        return "no variant finished; runs.csv's status and error say why"
    return "no profile finished; runs.csv's error says why"


def _reasons(diag: pd.DataFrame) -> list[tuple[int, str]]:
    """(how many, why) for the rows of diagnosis.csv the matrix counts nowhere: no readable
    export, a measured truth that is not decided (``either``, ``not_taken``, ``no_removal``), or
    an expected class the export could not judge."""
    unreadable = diag["primary"].astype(str) == UNREADABLE
    undecided = ~unreadable & ~is_decided(diag)
    unjudged = ~unreadable & ~undecided & diag["match"].isna()
    classes = ", ".join(sorted(set(diag.loc[unjudged, "expected"].astype(str))))
    out = [
        (int(unreadable.sum()), "without a readable export"),
        (int(undecided.sum()), "with an undecided truth"),
        (int(unjudged.sum()), f"whose expected class the export cannot judge ({classes})"),
    ]
    return [(n, why) for n, why in out if n]


def _said(reasons: list[tuple[int, str]]) -> str:
    return "; ".join(f"{n} {why}" for n, why in reasons)


def nothing_judged(diag: pd.DataFrame) -> str | None:
    """Why the confusion matrix counts no variant at all (None when it counts some)."""
    if diag.empty:
        return "no variant has an nsys export"
    reasons = _reasons(diag)
    if len(diag) > sum(n for n, _ in reasons):
        return None
    return f"{len(diag)} variants: {_said(reasons)}"


def left_out(diag: pd.DataFrame) -> str:
    """The variants a non-empty matrix leaves out and why ('' when it counts every one)."""
    reasons = _reasons(diag) if not diag.empty else []
    return f"{_said(reasons)} (diagnosis.csv)" if reasons else ""


def _print_limits(work: pd.DataFrame) -> None:
    """Scenarios whose limit is analytic: the baseline's kernel time per step against each
    variant's step (gpu_work.csv)."""
    if "share_of_limit" not in work:
        return
    limits = work[work["share_of_limit"].notna()]
    if limits.empty:
        return
    print("\nlimits (each variant's own GPU busy time per step; gpu_work.csv):")
    cols = ["scenario", "variant", "kernels_per_step", "kernel_ms_per_step"]
    cols += ["step_ms_mean", "limit_ms_per_step", "share_of_limit"]
    print(fit_table(limits[cols], float_format=_g))


def _print_side_work(work: pd.DataFrame) -> None:
    """The variants with GPU work on streams of their own (a GPU input pipeline such as DALI's
    decoders) and the share of ``ideal`` that leaves them at most (gpu_work.csv)."""
    cols = ["side_kernel_ms_per_step", "side_bound_share_of_ideal"]
    if not set(cols) <= set(work.columns):
        return
    side = work[(work["side_kernel_ms_per_step"].fillna(0) > 0)]
    if side.empty:
        return
    print("\nside-stream GPU work per step, and the share of ideal it leaves at most:")
    view = side[["scenario", "variant", "step_ms_mean", "gpu_idle_ms_per_step", *cols]]
    print(fit_table(view, float_format=_g))
