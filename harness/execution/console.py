"""What ``harness run`` prints at its end, within 100 columns (harness.core.console): the
summary of every variant's timings, the verdicts, the confusion matrix, the analytic limits and
the side-stream GPU work; or, where nothing could be judged, one line that says why. The full
tables are the run folder's CSVs (runs.csv, verdicts.csv, confusion.csv, diagnosis.csv,
gpu_work.csv). Numbers are written as the report writes them (:mod:`analysis.plots.numbers`),
and every column says its statistic."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from analysis.plots import numbers as fmt
from harness.core.console import WIDTH, fit_line, fit_table, wrap
from harness.core.runfolder import Status
from harness.judge.diagnosis_table import UNREADABLE
from harness.judge.scoring import is_decided

__all__ = [
    "SUMMARY_LEGEND",
    "cpu_slower_note",
    "nothing_judged",
    "print_diagnosis",
    "print_summary",
    "print_unprofiled",
    "summary_view",
    "unprofiled_why",
]


def _g(x: float) -> str:
    return fmt.g3(x)


#: Under the summary: what each column's statistic is.
SUMMARY_LEGEND = (
    "mean_ms, median_ms: the step time over every timed step of every round; speedup: the "
    "baseline's mean step over the variant's, paired within rounds, with its 95% CI (a ratio "
    "of means, not of the medians); of_ideal: ideal's mean over the variant's; probe: the "
    "profiled mean over the unprofiled mean"
)


def summary_view(table: pd.DataFrame) -> pd.DataFrame:
    """runs.csv's rows as the end-of-run summary shows them, one text per cell, each number as
    the report writes it."""

    def col(name: str) -> pd.Series:
        return table[name] if name in table else pd.Series(float("nan"), index=table.index)

    view = pd.DataFrame(
        {
            "scenario": table["scenario"].astype(str),
            "variant": table["variant"].astype(str),
            "status": col("status").astype(str),
            "mean_ms": col("step_ms_mean").map(fmt.g3),
            "median_ms": col("step_ms_median").map(fmt.g3),
            "samples/s": col("throughput_samples_per_s").map(fmt.g3),
            "speedup [95% CI]": [
                fmt.speedup_ci(s, lo, hi)
                for s, lo, hi in zip(
                    col("speedup"), col("speedup_ci_low"), col("speedup_ci_high"), strict=True
                )
            ],
            "of_ideal": col("share_of_ideal").map(fmt.share),
            "probe": col("probe_effect").map(fmt.ratio),
        }
    )
    marks = _unstable_marks(table)
    if any(marks):  # a short column, only where a variant is unstable
        view["unstable"] = marks
    return view


def _unstable_marks(table: pd.DataFrame) -> list[str]:
    """The round spread (``14%``) of an unstable variant, blank for the others."""
    if "unstable" not in table or "round_spread" not in table:
        return [""] * len(table)
    flagged = table["unstable"].astype(str).isin(["True", "true", "1"])
    return [fmt.share(v) if f else "" for v, f in zip(table["round_spread"], flagged, strict=True)]


def print_summary(table: pd.DataFrame, run_dir: Path) -> None:
    """One table per scenario of the numbers a performance engineer reads first, and what
    each column's statistic is."""
    if table.empty:
        print(f"no results in {run_dir}")
        return
    view = summary_view(table)
    for i, (scenario, rows) in enumerate(view.groupby("scenario", sort=False)):
        # one table per scenario, under its name: a scenario column beside long variant names
        # pushed the table past 100 columns
        print(f"{'' if i == 0 else chr(10)}{scenario}:")
        print(fit_table(rows.drop(columns="scenario"), indent=2, na_rep=fmt.DASH))
    print("\n" + "\n".join(wrap(SUMMARY_LEGEND, WIDTH)))
    if "unstable" in view:
        print(
            "unstable: the variant's timing rounds' mean step times spread by this much "
            "(max / min - 1);\nits speedups are paired within rounds; the host probes beside "
            "it: runs.csv, timings.csv (probe_*)"
        )
    print(f"\nrun folder: {run_dir}")


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
    """On the CPU, a line under the summary for the variants measurably slower than their
    baseline (runs.csv's speedup interval wholly below 1x), each with its speedup as the report
    writes it. None where none is: a point below 1 whose interval reaches 1 is no change."""
    need = {"speedup", "speedup_ci_high"}
    if not need <= set(runs.columns):
        return None
    high = pd.to_numeric(runs["speedup_ci_high"], errors="coerce")
    kinds = runs["kind"].astype(str) if "kind" in runs else runs["variant"].astype(str)
    slower = runs[(high < 1) & (kinds != "baseline")]
    if slower.empty:
        return None
    names = ", ".join(
        f"{r.scenario}/{r.variant} {fmt.speedup_ci(r.speedup, r.speedup_ci_low, r.speedup_ci_high)}"
        for r in slower.itertuples()
    )
    return (
        f"note: on this CPU, {names} ran slower than the baseline (the whole 95% interval below "
        "1x). A CPU run times the CPU: a fix that moves work onto a GPU (copies, launches, "
        "syncs) may cost time here and save it there."
    )


def unprofiled_why(runs: pd.DataFrame, *, nsys_enabled: bool, nsys_found: bool) -> str:
    """Why no variant of ``runs`` (runs.csv) was profiled, in a few words."""
    if not nsys_enabled:
        return "nsys.enabled=false"
    if not nsys_found:
        return "no nsys found"
    if runs.empty:
        return "no variant ran"
    if not (runs["status"].astype(str) == Status.OK).any():  # e.g. a profile that left no report
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
