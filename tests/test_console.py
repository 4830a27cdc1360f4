"""The console's tables fit a terminal 100 columns wide and lose nothing (harness.core.console),
and the end of a run says why its confusion matrix is empty (harness.execution.console). The
real CLI's output is checked line by line in test_e2e_smoke.py, test_smoke_all.py,
test_diagnose_cli.py and test_score.py."""

from __future__ import annotations

import pandas as pd
import pytest

from harness.core.console import WIDTH, fit_table, wrap
from harness.execution import console
from tests.conftest import CONSOLE_WIDTH, REPO, assert_fits

REFERENCE = REPO / "results" / "reference"


def test_the_tests_width_is_the_consoles() -> None:
    assert CONSOLE_WIDTH == WIDTH


def _words(text: str) -> list[str]:
    return "".join(text.split()).split(";")


@pytest.mark.parametrize("run", ["h100", "h200", "h200/second"])
def test_the_reference_runs_verdicts_fit_with_every_reason_whole(run: str) -> None:
    """The reasons (up to 820 characters) wrap under their column; joined again, each is
    the reason verdicts.csv holds."""
    verdicts = pd.read_csv(REFERENCE / run / "verdicts.csv")
    text = fit_table(verdicts[["scenario", "verdict", "reason"]])
    assert_fits(text)
    assert text.splitlines()[0].split() == ["scenario", "verdict", "reason"]
    start = text.splitlines()[0].index("reason")
    body = " ".join(line[start:].strip() for line in text.splitlines()[1:])
    for reason in verdicts["reason"]:  # a line may break after "/" or "-" (wrap): no space
        assert "".join(reason.split()) in "".join(body.split())


def test_a_wide_table_moves_its_last_columns_under_each_row() -> None:
    """Columns that cannot fit, even wrapped, come under their row as ``name: value``."""
    classes = "data_stall;pageable_copy;launch_bound;host_sync;exposed_comm;gil_contention"
    rows = pd.DataFrame(
        {"report": ["pp_heavy_head", "clean"], "truth": ["stage_imbalance", "none"],
         "not_judged": [classes, ""], "nsys_rules": ["", classes]}
    )  # fmt: skip
    text = fit_table(rows)
    assert_fits(text)
    lines = text.splitlines()
    assert lines[0].split() == ["report", "truth", "not_judged"]
    assert "nsys_rules: data_stall;pageable_copy;" in text
    assert _words(text.split("nsys_rules: ")[1]) == classes.split(";")


def test_numbers_right_text_left_and_headers_wrap_only_when_needed() -> None:
    narrow = pd.DataFrame({"scenario": ["a"], "step_ms_mean": [1.5]})
    assert fit_table(narrow).splitlines() == ["scenario  step_ms_mean", "a                  1.5"]
    wide = pd.DataFrame({f"a_long_header_number_{i}": [i] for i in range(9)})
    text = fit_table(wide)
    assert_fits(text)
    assert len(text.splitlines()) > 2  # the headers wrapped at "_"


def test_wrap_breaks_lists_and_keeps_their_separators() -> None:
    assert wrap("data_stall;host_sync;launch_bound", 22) == [
        "data_stall;host_sync;",
        "launch_bound",
    ]
    assert wrap("removed entirely: 1.40x [1.38-1.43], 29.4 ms", 24) == [
        "removed entirely: 1.40x",
        "[1.38-1.43], 29.4 ms",
    ]
    assert all(len(line) <= 5 for line in wrap("abcdefghijkl", 5))


def _diag(**columns: list) -> pd.DataFrame:
    base = {"scenario": ["s", "s"], "variant": ["baseline", "fix"],
            "expected": ["host_sync", "none"], "expected_role": ["bottleneck", "clean"],
            "truth_state": ["fires", "clear"], "primary": ["none", "none"],
            "match": [None, None]}  # fmt: skip
    return pd.DataFrame(base | columns)


@pytest.mark.parametrize(
    ("diag", "why"),
    [
        (_diag(primary=["unreadable", "unreadable"]), "2 variants: 2 without a readable export"),
        (_diag(truth_state=["either", "no_removal"]), "2 variants: 2 with an undecided truth"),
        (_diag(), "2 variants: 2 whose expected class the export cannot judge (host_sync, none)"),
        (pd.DataFrame(), "no variant has an nsys export"),
    ],
)
def test_an_empty_confusion_matrix_says_why_in_one_line(diag, why, capsys) -> None:
    matrix = pd.DataFrame(0, index=["host_sync", "none"], columns=["host_sync", "none"])
    verdict = pd.DataFrame({"scenario": ["s"], "verdict": ["inconclusive"], "reason": ["r"]})
    console.print_diagnosis(verdict, matrix, diag, pd.DataFrame())
    out = capsys.readouterr().out
    assert f"\nconfusion: nothing judged ({why})\n" in out
    assert "rows: expected" not in out  # no all-zero matrix


def test_a_matrix_with_counts_names_what_it_left_out(capsys) -> None:
    diag = _diag(match=[True, None])
    assert console.nothing_judged(diag) is None
    matrix = pd.DataFrame([[1, 0], [0, 0]], index=["host_sync", "none"],
                          columns=["host_sync", "none"])  # fmt: skip
    verdict = pd.DataFrame({"scenario": ["s"], "verdict": ["confirmed"], "reason": ["r"]})
    console.print_diagnosis(verdict, matrix, diag, pd.DataFrame())
    out = capsys.readouterr().out
    assert "left out of the matrix: 1 whose expected class the export cannot judge (none)" in out


@pytest.mark.parametrize(
    ("enabled", "found", "why"),
    [(False, False, "nsys.enabled=false"), (True, False, "no nsys found")],
)
def test_an_unprofiled_run_says_why_nothing_was_judged(enabled, found, why, capsys) -> None:
    runs = pd.DataFrame({"status": ["ok"], "profiled": [False]})
    console.print_unprofiled(runs, enabled, found)
    line = capsys.readouterr().out.strip()
    assert line == f"verdicts, confusion: nothing judged (no variant has an nsys export: {why})"


def test_why_nothing_was_profiled_names_the_cause():
    """A run with no nsys export says why in words a user acts on: nsys off, not found, no
    variant at all, none finished (a profile that left only a .qdstrm: its timing ran), or only
    the profiles failing."""
    from harness.execution.console import unprofiled_why

    runs = pd.read_csv(REPO / "tests" / "data" / "h100_run_tables" / "runs.csv")
    on = {"nsys_enabled": True, "nsys_found": True}
    assert unprofiled_why(runs, nsys_enabled=False, nsys_found=True) == "nsys.enabled=false"
    assert unprofiled_why(runs, nsys_enabled=True, nsys_found=False) == "no nsys found"
    assert unprofiled_why(runs.iloc[:0], **on) == "no variant ran"
    failed = runs.assign(status="failed")
    assert unprofiled_why(failed, **on).startswith("no variant finished")
    assert unprofiled_why(runs, **on).startswith("no profile finished")


def test_a_long_one_line_message_wraps_on_a_terminal(monkeypatch, capsys) -> None:
    """'confusion: nothing judged (3 variants: 3 whose expected class ...)' was 110 columns in
    a 100-column terminal; on a terminal it wraps, in a log it stays one line (for grep)."""
    diag = pd.DataFrame(
        {
            "primary": ["none"] * 3,
            "expected_role": ["bottleneck", "clean", "clean"],
            "expected": ["pageable_copy", "none", "none"],
            "match": [None] * 3,
        }
    )
    text = f"\nconfusion: nothing judged ({console.nothing_judged(diag)})"
    assert len(text) > WIDTH + 1
    monkeypatch.setattr("sys.stdout.isatty", lambda: True)
    console._line(text)
    shown = capsys.readouterr().out
    assert_fits(shown)
    assert shown.startswith("\n") and " ".join(shown.split()) == " ".join(text.split())
    monkeypatch.setattr("sys.stdout.isatty", lambda: False)
    console._line(text)
    assert capsys.readouterr().out == text + "\n"


def test_fixes_slower_on_the_cpu_get_a_word() -> None:
    """Only a variant whose whole speedup interval lies below 1x is called slower, with its
    interval as the report writes it; a point below 1 whose interval reaches 1 (issue 52:
    pageable_copies/ideal at 1.00x [0.90-1.11]) is no change and is not named. The note makes
    no claim about what a fix targets (a gloo variant is no GPU fix)."""
    runs = pd.DataFrame(
        {
            "scenario": ["pageable_copies"] * 3 + ["pipeline_imbalance"] * 2,
            "variant": ["baseline", "pinned_prefetch", "ideal", "baseline", "more_microbatches"],
            "kind": ["baseline", "fix", "ideal", "baseline", "fix"],
            "speedup": [1.0, 0.824, 0.998, 1.0, 0.93],
            "speedup_ci_low": [0.97, 0.79, 0.90, 0.98, 0.90],
            "speedup_ci_high": [1.03, 0.86, 1.11, 1.02, 0.96],
        }
    )
    note = console.cpu_slower_note(runs)
    assert note is not None
    assert "pageable_copies/pinned_prefetch 0.82x [0.79-0.86]" in note
    assert "pipeline_imbalance/more_microbatches 0.93x [0.90-0.96]" in note
    assert "ideal" not in note and "target a GPU" not in note
    assert console.cpu_slower_note(runs[runs["speedup_ci_high"] >= 1]) is None


def test_the_summary_says_its_statistics(capsys) -> None:
    """The end-of-run summary shows the mean step beside the median and the speedup with its
    interval as the report writes it, and says that the speedup is a ratio of means (issue 52:
    a median of 94 ms beside 38 ms read against a speedup of 2.10)."""
    from analysis.plots import numbers

    runs = pd.read_csv(REPO / "tests" / "data" / "h100_run_tables" / "runs.csv")
    console.print_summary(runs, REPO)
    out = capsys.readouterr().out
    assert_fits(out)
    assert "mean_ms" in out and "median_ms" in out and "ratio of means" in out
    for r in runs[runs["speedup"].notna()].itertuples():
        shown = numbers.speedup_ci(r.speedup, r.speedup_ci_low, r.speedup_ci_high)
        assert shown in out, shown
        assert numbers.g3(r.step_ms_mean) in out
