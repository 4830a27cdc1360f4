"""A report that never contradicts itself (issue 52): the tables of a real run's report.html and
report.md, read back as a reader sees them, say the same as each other and as the CSVs the
judge wrote: one number, one interval and one state for each thing wherever it is shown.

The run: the tables of the H200 run of ``main`` at 1ee4050 (``tests/data/h200_run_tables``,
README there), whose report showed the trips of issue 52.
"""

from __future__ import annotations

import html
import re
import shutil
import tarfile
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

from analysis.plots import numbers as fmt
from bottlenecks import CLASSES
from tests.conftest import DATA, REPO

TABLES = DATA / "h200_run_tables.tar.xz"


#: The committed H200 reference run folder (an older run, read with its own classes).
REFERENCE = REPO / "results" / "reference" / "h200"


def _run_folder(which: str, root: Path) -> Path:
    """A copy of the run folder ``which`` under ``root``, to write its report into."""
    if which == "reference":
        return Path(shutil.copytree(REFERENCE, root / "h200"))
    with tarfile.open(TABLES) as tar:
        tar.extractall(root, filter="data")
    return root / "h200_run_tables"


@pytest.fixture(scope="module", params=["1ee4050", "reference"])
def report(request, tmp_path_factory) -> dict:
    """The report of a real H200 run folder's tables (the 1ee4050 run of issue 52; the
    committed reference): its folder, and its tables by section, read from the Markdown and
    from the HTML."""
    from harness.report import main

    run = _run_folder(request.param, tmp_path_factory.mktemp("agree"))
    assert main([str(run), "--no-timelines"]) == 0
    return {
        "run": run,
        "md": md_tables(run / "report.md"),
        "html": html_tables(run / "report.html"),
    }


# --- reading the tables back ---------------------------------------------------------------------


def _md_cell(text: str) -> str:
    """A Markdown cell as it reads: links and bold unwrapped, escapes undone."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text.strip())
    text = text.replace("**", "").replace("\\|", "|").replace("<br>", " ")
    return html.unescape(" ".join(text.split()))


def md_tables(path: Path) -> dict[str, list[pd.DataFrame]]:
    """Every table of a report.md, by the heading of its section (``##`` or ``###``)."""
    out: dict[str, list[pd.DataFrame]] = {}
    section, rows = "", []
    lines = [*path.read_text(encoding="utf-8").splitlines(), ""]
    for line in lines:
        if line.startswith("#"):
            section = line.lstrip("#").strip()
        if line.startswith("| "):
            rows.append([_md_cell(c) for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]])
        elif rows:
            header, body = rows[0], [r for r in rows[2:]]
            out.setdefault(section, []).append(pd.DataFrame(body, columns=header))
            rows = []
    return out


class _Tables(HTMLParser):
    """The tables of a report.html by section: each cell's text and its classes (a coloured
    cell's kind, or its badge's)."""

    def __init__(self) -> None:
        super().__init__()
        self.section, self.tables = "", {}
        self._heading = self._cell = None
        self._rows: list | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("h2", "h3"):
            self._heading = []
        elif tag == "table":
            self._rows = []
        elif tag == "tr" and self._rows is not None:
            self._rows.append([])
        elif tag in ("td", "th") and self._rows is not None:
            self._cell = {"text": [], "cls": a.get("class") or ""}
        elif tag == "span" and self._cell is not None and "badge" in (a.get("class") or ""):
            self._cell["cls"] += " " + a["class"]
        elif tag == "br" and self._cell is not None:
            self._cell["text"].append(" ")

    def handle_endtag(self, tag):
        if tag in ("h2", "h3") and self._heading is not None:
            self.section, self._heading = "".join(self._heading).strip(), None
        elif tag in ("td", "th") and self._cell is not None:
            self._rows[-1].append(
                (" ".join("".join(self._cell["text"]).split()), self._cell["cls"])
            )
            self._cell = None
        elif tag == "table" and self._rows is not None:
            self.tables.setdefault(self.section, []).append(self._rows)
            self._rows = None

    def handle_data(self, data):
        if self._heading is not None:
            self._heading.append(data)
        if self._cell is not None:
            self._cell["text"].append(data)


def html_tables(path: Path) -> dict[str, list[dict]]:
    """Every table of a report.html by section: ``text`` (a DataFrame of the cells' text) and
    ``cls`` (one of their classes)."""
    p = _Tables()
    p.feed(path.read_text(encoding="utf-8"))
    out: dict[str, list[dict]] = {}
    for section, tables in p.tables.items():
        for rows in tables:
            header = [t for t, _ in rows[0]]
            text = pd.DataFrame([[t for t, _ in r] for r in rows[1:]], columns=header)
            cls = pd.DataFrame([[c for _, c in r] for r in rows[1:]], columns=header)
            out.setdefault(section, []).append({"text": text, "cls": cls})
    return out


def _table(report: dict, section: str, first_header: str) -> pd.DataFrame:
    """The Markdown table of ``section`` whose first column is ``first_header``."""
    for t in report["md"][section]:
        if t.columns[0] == first_header:
            return t
    raise AssertionError(f"no table under {section!r} starting with {first_header!r}")


def _table_if_kept(report: dict, section: str, first_header: str, *needs: str):
    """The table as :func:`_table`, or None where the run folder lacks a CSV it is built
    from (the committed reference predates findings.csv and kept no tools_calls.csv): then
    the section must say so, naming the file, rather than show a table."""
    missing = [n for n in needs if not (report["run"] / n).is_file()]
    if not missing:
        return _table(report, section, first_header)
    md = (report["run"] / "report.md").read_text(encoding="utf-8")
    said = md.partition(f"## {section}")[2].partition("\n## ")[0]
    assert "No data" in said and f"no {missing[0]}" in said, (section, said)
    return None


def _csv(report: dict, name: str) -> pd.DataFrame:
    return pd.read_csv(report["run"] / name)


def _by_variant(df: pd.DataFrame) -> dict:
    return {(str(r["scenario"]), str(r["variant"])): r for r in df.to_dict("records")}


# --- the tests -----------------------------------------------------------------------------------


def test_the_report_reads_the_judges_states():
    """The state values the report names (it imports harness.core only) are the judge's."""
    from harness.judge.predictions import CHECKED_STATES, Check
    from harness.judge.truth import OffTargetState, TruthState
    from harness.report import load

    assert (load.FIRES, load.CLEAR, load.EITHER) == (TruthState.FIRES, TruthState.CLEAR,
                                                     TruthState.EITHER)  # fmt: skip
    assert (load.FALSE_POSITIVE, load.UNCHECKED) == (OffTargetState.FALSE_POSITIVE,
                                                     OffTargetState.UNCHECKED)  # fmt: skip
    assert (load.WITHIN, load.OUTSIDE, load.NOT_CHECKED) == tuple(Check)
    assert tuple(CHECKED_STATES) == (load.FIRES, load.EITHER)


def test_the_html_and_the_markdown_hold_the_same_tables(report):
    """Both renderings of every table: the same sections, headers and cell texts."""
    md, page = report["md"], report["html"]
    assert set(md) == set(page)
    for section, tables in md.items():
        assert len(tables) == len(page[section]), section
        for m, h in zip(tables, page[section], strict=True):
            assert list(m.columns) == list(h["text"].columns), section
            pd.testing.assert_frame_equal(m, h["text"], obj=section)


def test_variant_numbers_are_the_csvs_everywhere(report):
    """A variant's speedup reads the same in the variants table, the fix-effect table and the
    matrix picture's cells, and is runs.csv's; its step times say mean and median."""
    from analysis.plots.matrix import matrix_table

    runs = _csv(report, "runs.csv")
    by = _by_variant(runs)
    variants = _table(report, "Variants: timings, probe effect, profiles", "scenario")
    assert {"mean step ms", "median step ms", "speedup [95% CI]"} <= set(variants.columns)
    shown = {}
    for r in variants.to_dict("records"):
        row = by[(r["scenario"], r["variant"])]
        want = fmt.speedup_ci(row["speedup"], row["speedup_ci_low"], row["speedup_ci_high"])
        assert r["speedup [95% CI]"] == want
        assert r["mean step ms"] == fmt.g3(row["step_ms_mean"])
        assert r["median step ms"] == fmt.g3(row["step_ms_median"])
        assert r["share of ideal [95% CI]"] == fmt.share_ci(
            row["share_of_ideal"], row["share_of_ideal_ci_low"], row["share_of_ideal_ci_high"])  # fmt: skip
        shown[(r["scenario"], r["variant"])] = want
    effect = _table_if_kept(report, "What each fix removed", "scenario", "findings.csv")
    for r in [] if effect is None else effect.to_dict("records"):
        if r["kind"] != "baseline":
            assert r["speedup [95% CI]"] == shown[(r["scenario"], r["variant"])]
    cells = matrix_table(runs)
    assert cells["speedup"].notna().sum() > 10
    for c in cells[cells["speedup"].notna()].to_dict("records"):
        lines = c["text"].split("\n")
        if lines[0] == c["variant"]:  # the slot layout names the variant first
            lines = lines[1:]
        assert " ".join(lines) == shown[(c["scenario"], c["variant"])]


def test_predictions_read_the_same_numbers(report):
    """The predictions table: a baseline's measured speedup is the speedup of the variant it
    was measured by, as the variants table shows it (one interval); predictions are
    diagnosis.csv's; a row whose prediction is not checked shows no predicted interval it
    does not have."""
    runs, diag = _csv(report, "runs.csv"), _csv(report, "diagnosis.csv")
    by, d = _by_variant(runs), _by_variant(diag)
    table = _table(report, "Predicted against measured", "scenario")
    assert len(table) == int(diag["truth_state"].isin(["fires", "either"]).sum())
    for r in table.to_dict("records"):
        row = d[(r["scenario"], r["variant"])]
        assert r["predicted speedup [95% CI]"] == fmt.speedup_ci(
            row["predicted_speedup"], row["predicted_speedup_ci_low"],
            row["predicted_speedup_ci_high"])  # fmt: skip
        assert r["check"] == row["prediction"]
        assert r["error"] == fmt.signed_share(row["prediction_error"])
        if row["kind"] == "baseline" and (r["scenario"], r["by"]) in by:
            m = by[(r["scenario"], r["by"])]
            assert row["measured_speedup"] == pytest.approx(m["speedup"], rel=1e-9)
            assert r["measured speedup [95% CI]"] == fmt.speedup_ci(
                m["speedup"], m["speedup_ci_low"], m["speedup_ci_high"])  # fmt: skip


def _truth(row: dict) -> str:
    text = f"{row['predicted_class']} {row['truth_state']}"
    return text + (f" (declared {row['expected_role']})" if row["declared_agrees"] is False else "")


def test_one_state_per_variant_and_detector(report):
    """The detector table, its picture, the tools table and the match column say one state:
    the truth as diagnosis.csv measured it, each class's state as its ``<class>_state``, each
    cell's colour as the picture's, and no coloured cell contradicts the row's match (issue
    52: a red 'clear' cell in a row the judge could not judge)."""
    from analysis.plots.diagnosis import expectation_figure
    from harness.report.diagnosis import expectation_table
    from harness.report.load import RunFolder

    diag = _csv(report, "diagnosis.csv")
    d = _by_variant(diag)
    md = _table(report, "Detector findings", "scenario")
    page = next(
        t for t in report["html"]["Detector findings"] if t["text"].columns[0] == "scenario"
    )
    outcomes = expectation_figure(expectation_table(RunFolder.load(report["run"]))).outcomes
    word = {True: "match", False: "mismatch"}
    for i, r in enumerate(md.to_dict("records")):
        row = d[(r["scenario"], r["variant"])]
        assert r["truth"] == _truth(row)
        assert r["match"] == (word[row["match"]] if pd.notna(row["match"]) else "not judged")
        # the run's own classes (a run made before a class existed has no columns for it)
        for j, k in enumerate(k for k in CLASSES if f"{k}_state" in diag.columns):
            state = row[f"{k}_state"]
            cell, cls = r[k], page["cls"].iloc[i][k]
            kind = outcomes.iloc[i, j]
            if state == "fired":
                assert cell == f"fired {fmt.share(row[f'{k}_impact'])}"
                assert {"match": "fired-good", "mismatch": "fired-bad"}.get(kind, kind) in cls
            else:
                assert cell.split(" (")[0] == ("clear" if state == "clear" else "not judged")
                assert kind in cls.split()
            if pd.isna(row["match"]):
                assert kind != "mismatch", (r["variant"], k)  # the judge could not judge it
            if kind == "mismatch":
                assert row["match"] is False or row["match"] == "False"
    tools = _table_if_kept(report, "Tools against the ground truth", "variant",
                           "tools_scores.csv", "tools_calls.csv")  # fmt: skip
    truths = {f"{s}/{v}": t for (s, v), t in ((k, _truth(x)) for k, x in d.items())}
    for r in [] if tools is None else tools.to_dict("records"):
        assert r["truth"] == truths[r["variant"]]


_N = r"-?[\d.]+"
_SAID = re.compile(
    rf"(?P<variant>[\w]+): (?P<klass>\w+) measured (?P<measured>{_N}% \[{_N}-{_N}%\]) .*?"
    rf"\((?P<truth>\w+)\)(?:, predicted (?P<predicted>{_N}%(?: \[{_N}-{_N}%\])?) "
    r"\((?P<state>\w+)\))?"
)


def _reads_as(text: str, *values: float) -> bool:
    """``text`` ('93% [92-94%]', '97.9% [97.6-98.2%]', '57%') writes ``values`` (shares) to the
    digits it shows: a reason written by the judge, at any precision the formatter used."""
    m = re.fullmatch(rf"({_N})%(?: \[({_N})-({_N})%\])?", text)
    shown = [x for x in m.groups() if x is not None] if m else []
    if len(shown) != len(values):
        return False
    for t, v in zip(shown, values, strict=True):
        places = len(t.partition(".")[2])
        if abs(float(t) - 100 * v) > 0.5 * 10**-places + 1e-9:
            return False
    return True


def test_verdicts_say_what_the_tables_say(report):
    """Every verdict (its table, the summary, its scenario's section) is verdicts.csv's; each
    variant its reason names carries diagnosis.csv's truth, measured saving and predicted
    saving, with an interval only where diagnosis.csv has one (issue 52: "predicted 57%
    [57-57%]" beside a prediction table that had none)."""
    verdicts, diag = _csv(report, "verdicts.csv"), _csv(report, "diagnosis.csv")
    d = _by_variant(diag)
    table = _table(report, "Verdicts", "scenario")
    assert table["verdict"].tolist() == verdicts["verdict"].tolist()
    assert table["reason"].tolist() == [" ".join(str(x).split()) for x in verdicts["reason"]]
    md = (report["run"] / "report.md").read_text(encoding="utf-8")
    for v in verdicts.to_dict("records"):
        assert f"#scenario-{v['scenario']}) **{v['verdict']}**" in md
        assert f"· verdict **{v['verdict']}**" in md
        said = list(_SAID.finditer(str(v["reason"])))
        for m in said:
            row = d[(v["scenario"], m["variant"])]
            assert m["truth"] == row["truth_state"]
            assert _reads_as(m["measured"], row["measured_saving"], row["measured_saving_ci_low"],
                             row["measured_saving_ci_high"]), m["measured"]  # fmt: skip
            sp, lo, hi = (row[f"predicted_speedup{s}"] for s in ("", "_ci_low", "_ci_high"))
            if m["predicted"] is not None:
                assert pd.notna(sp), f"{m['variant']}: a predicted saving without a prediction"
                if pd.isna(lo) or pd.isna(hi):  # no interval: none written (not "57% [57-57%]")
                    assert _reads_as(m["predicted"], 1 - 1 / sp), m["predicted"]
                else:
                    assert _reads_as(m["predicted"], 1 - 1 / sp, 1 - 1 / lo, 1 - 1 / hi)
        if v["verdict"] == "confirmed":
            assert said, v["reason"]


def test_every_table_says_its_statistic(report):
    """Each step time says whether it is a mean or a median, each speedup its interval, and
    the sections say that a speedup is a ratio of means."""
    md = (report["run"] / "report.md").read_text(encoding="utf-8")
    for section, tables in report["md"].items():
        for t in tables:
            for col in t.columns:
                if "ms" in col.split() and "step" in col:
                    assert "mean" in col or "median" in col or "p10" in col, (section, col)
                if "speedup" in col:
                    assert "[95% CI]" in col, (section, col)
    assert "a ratio of means" in md and "ratio of mean step times" in md
    assert "mean step time over its scenario's baseline" not in md  # the inverse, as it read


def test_a_share_interval_is_written_as_wide_as_it_is():
    """The judge's reasons and the report's tables write a share and its interval with one
    formatter; an interval narrower than a percent gets a decimal rather than reading
    zero-width ('93% [93-93%]' for 92.8-93.2%), and one the finding lacks is not written."""
    from harness.judge.truth import pct_ci

    nan = float("nan")
    cases = [
        ((0.929, 0.928, 0.932), "92.9% [92.8-93.2%]"),
        ((0.24, 0.22, 0.27), "24% [22-27%]"),
        ((0.0, 0.0, 0.0), "0% [0-0%]"),  # an interval that is zero-wide: the ideal's own
        ((0.57, nan, nan), "57%"),
    ]
    for args, want in cases:
        assert fmt.share_ci(*args) == want
        assert pct_ci(*args) == want
