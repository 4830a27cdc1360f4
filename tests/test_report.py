"""Reports: report.html / report.md of real run folders made by the harness in this session, of
the H100 reference folder (tables only), and of the committed H100 exports' timelines.

The harness run these tests read is one small severity sweep (:func:`shared_sweep`), made once
per session and shared with tests/test_dose.py and tests/test_compare.py.
"""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from tests._fixtures import sqlite_fixture
from tests.conftest import DATA, run_cli

REFERENCE = DATA / "h100_sync_loading"  # the tables of an earlier H100 sync_loading run
SCENARIO = "sync_loading"
#: Two severities of sync_loading (JPEG long side, px): small and the default.
SEVERITIES = (32, 500)
VARIANTS = ("baseline", "ideal")

_SWEEP: dict[str, object] = {}


def shared_sweep(tmp_path_factory, cache_dir) -> dict[str, object]:
    """``harness run -m`` of sync_loading at two severities, smoke size, under nsys; once per
    session. Returns the process, the results folder, the sweep folder and the run folders
    (sorted by severity)."""
    if not _SWEEP:
        results = tmp_path_factory.mktemp("report-sweep")
        proc = run_cli(
            [
                "run",
                "-m",
                f"+scenario={SCENARIO}",
                "size=smoke",
                "harness.repeats=1",
                "harness.progress=false",
                f"scenario.{SCENARIO}.variants=[{','.join(VARIANTS)}]",
                f"scenario.{SCENARIO}.smoke.steps=8",
                f"scenario.{SCENARIO}.smoke.warmup_steps=2",
                f"scenario.{SCENARIO}.severity={','.join(map(str, SEVERITIES))}",
                f"harness.results_dir={results}",
                f"harness.cache_dir={cache_dir}",
            ]
        )
        runs = [p.parent for p in results.glob("*/manifest.json")]
        sev = {
            p: pd.read_csv(p / "runs.csv")["severity"].iloc[0]
            for p in runs
            if (p / "runs.csv").is_file()
        }
        sweeps = sorted((results / "multirun").glob("*")) if (results / "multirun").is_dir() else []
        _SWEEP.update(
            proc=proc,
            results=results,
            sweep=sweeps[0] if sweeps else None,
            runs=sorted(runs, key=lambda p: sev.get(p, 0)),
        )
    return _SWEEP


@pytest.fixture(scope="module")
def sweep(tmp_path_factory, cache_dir):
    """The shared sweep; its exports, diagnosis and timelines need nsys."""
    if shutil.which("nsys") is None:
        pytest.skip("nsys not installed (scripts/install-nsys-cpu.sh)")
    s = shared_sweep(tmp_path_factory, cache_dir)
    proc = s["proc"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(s["runs"]) == len(SEVERITIES), s["runs"]
    return s


# --- helpers shared with the other report tests -------------------------------------------------


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.imgs: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "a" and a.get("href"):
            self.hrefs.append(a["href"])
        if tag == "img" and a.get("src"):
            self.imgs.append(a["src"])


def parse_html(path: Path) -> _Links:
    p = _Links()
    p.feed(path.read_text(encoding="utf-8"))
    return p


def png_pixels(data: bytes) -> np.ndarray:
    """Decode PNG bytes with PIL (verifying them) and return RGB pixels."""
    with Image.open(io.BytesIO(data)) as img:
        img.verify()
    with Image.open(io.BytesIO(data)) as img:
        assert img.format == "PNG"
        return np.asarray(img.convert("RGB"), dtype=float)


def assert_picture(data: bytes, min_side: int = 150) -> np.ndarray:
    px = png_pixels(data)
    assert px.shape[0] >= min_side and px.shape[1] >= min_side, px.shape
    assert px.std() > 15, "the picture looks blank"
    return px


def assert_links_resolve(html_path: Path) -> _Links:
    """Every relative link of the page points at a file or folder that exists, every anchor at an
    id of the page, and every image is an embedded PNG that decodes and is not blank."""
    page = parse_html(html_path)
    for href in page.hrefs:
        if href.startswith("#"):
            assert href[1:] in page.ids, f"dangling anchor {href}"
            continue
        assert not re.match(r"^[a-z]+://", href), f"absolute link {href}"
        target = (html_path.parent / unquote(href)).resolve()
        assert target.exists(), f"{html_path.name}: link {href} -> {target} does not exist"
    assert page.imgs, "no pictures"
    for src in page.imgs:
        assert src.startswith("data:image/png;base64,"), src[:40]
        assert_picture(base64.b64decode(src.split(",", 1)[1]))
    return page


def assert_markdown_images(md_path: Path) -> list[Path]:
    text = md_path.read_text(encoding="utf-8")
    refs = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert refs, "no pictures in the Markdown"
    paths = []
    for ref in refs:
        p = md_path.parent / unquote(ref)
        assert p.is_file(), f"{md_path.name}: image {ref} missing"
        assert_picture(p.read_bytes())
        paths.append(p)
    for ref in re.findall(r"(?<!!)\[[^\]]*\]\(([^)#][^)]*)\)", text):
        assert (md_path.parent / unquote(ref)).exists(), f"{md_path.name}: link {ref} missing"
    return paths


def _visible_text(html_path: Path) -> str:
    text = re.sub(r'src="data:[^"]+"', "", html_path.read_text(encoding="utf-8"))
    return re.sub(r"<[^>]+>", " ", text)


# --- a run folder with exports: the report written at the end of `harness run` -----------------


def test_run_writes_its_report_at_the_end(sweep):
    proc = sweep["proc"]
    for run in sweep["runs"]:
        assert (run / "report.html").is_file() and (run / "report.md").is_file()
        assert f"report: {run / 'report.html'}" in proc.stderr
        assert json.loads((run / "state.json").read_text())["state"] == "complete"


def test_run_report_holds_every_section(sweep):
    import scenarios

    scen = scenarios.discover()[SCENARIO]
    run = sweep["runs"][-1]
    html = run / "report.html"
    page = assert_links_resolve(html)
    text = _visible_text(html)
    for anchor in ("summary", "matrix", "verdicts", "detectors", "confusion", "variants",
                   f"scenario-{SCENARIO}", "environment"):  # fmt: skip
        assert anchor in page.ids, anchor
    # every scenario and its verdict, title, class and teaching text
    verdicts = pd.read_csv(run / "verdicts.csv")
    for r in verdicts.itertuples():
        assert r.scenario in text and r.verdict in text
    assert scen.title in text and scen.bottleneck in text
    for part in (scen.teaching.symptom, scen.teaching.cause, scen.teaching.fix):
        assert part[:60] in text.replace("&#x27;", "'")
    # detector table from diagnosis.csv, confusion and probe effect per variant
    diag = pd.read_csv(run / "diagnosis.csv")
    assert set(diag["variant"]) == set(VARIANTS)
    assert "Detector scores" in text and "expected \\ primary" in text
    runs = pd.read_csv(run / "runs.csv")
    for v, pe in zip(runs["variant"], runs["probe_effect"], strict=True):
        assert v in text
        assert f"{pe:.2f}" in text, (v, pe)
    # links to every variant's .nsys-rep, relative
    reps = [h for h in page.hrefs if h.endswith(".nsys-rep")]
    for v in VARIANTS:
        assert any(f"{SCENARIO}/{v}/profile/" in h for h in reps), (v, reps)
    # environment from manifest.json
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["torch"] in text and manifest["nsys"]["version"] in text
    assert "No data:" not in text, "a section of a complete profiled run says it has no data"


def test_run_report_pictures(sweep):
    run = sweep["runs"][-1]
    pngs = {p.stem: p for p in assert_markdown_images(run / "report.md")}
    assert {"speedup_matrix", "confusion", "probe_effect", f"timeline_{SCENARIO}"} <= set(pngs)
    # the timeline is tall enough to read: baseline above the fix, several host rows each
    px = png_pixels(pngs[f"timeline_{SCENARIO}"].read_bytes())
    assert px.shape[1] >= 1200 and px.shape[0] >= 400
    md = (run / "report.md").read_text()
    assert "| scenario | variant | kind | status |" in md
    assert f"{SCENARIO}: baseline above ideal" in md or "baseline above ideal" in md


def test_report_cli_to_another_folder(sweep, tmp_path):
    """`harness report RUN --out DIR`: relative links from DIR back into the run folder."""
    run = sweep["runs"][0]
    out = tmp_path / "elsewhere"
    proc = run_cli(["report", str(run), "--out", str(out), "--no-timelines"])
    assert proc.returncode == 0, proc.stderr
    assert f"wrote {out / 'report.html'}" in proc.stdout
    page = assert_links_resolve(out / "report.html")
    assert any(h.startswith("../") and h.endswith(".nsys-rep") for h in page.hrefs)
    assert "timelines left out" in _visible_text(out / "report.html")
    assert_markdown_images(out / "report.md")


# --- a folder of tables only: the reference result ----------------------------------------------


def test_reference_folder_degrades_and_says_why(tmp_path):
    from harness.report import main

    ref = tmp_path / "h100"
    shutil.copytree(REFERENCE, ref)
    for name in ("diagnosis", "verdicts", "confusion", "detector_scores", "findings", "gpu_work"):
        for suffix in (".csv", ".parquet"):
            (ref / f"{name}{suffix}").unlink(missing_ok=True)  # a folder of timing tables only
    assert main([str(ref)]) == 0
    html = ref / "report.html"
    page = assert_links_resolve(html)
    text = _visible_text(html)
    assert "NVIDIA H100 80GB HBM3" in text and SCENARIO in text
    runs = pd.read_csv(REFERENCE / "runs.csv")
    for v in runs["variant"]:
        assert v in text
    assert "44.0x [37.9-50.9]" in text  # dali's speedup and CI from runs.csv, as the matrix
    # no verdicts, diagnosis, confusion or exports here: each section says so and why
    assert text.count("No data:") >= 4
    for what in ("verdicts.csv", "diagnosis.csv", "confusion.csv"):
        assert f"no {what}: this folder holds tables only" in text, what
    assert "no timeline: no SQLite exports in this folder" in text
    assert "not here" in text  # the .nsys-rep runs.csv names is not in the folder
    # the teaching text comes from the scenario module even without exports
    import scenarios

    assert scenarios.discover()[SCENARIO].teaching.symptom[:50] in text.replace("&#x27;", "'")
    assert "speedup_matrix" in {p.stem for p in assert_markdown_images(ref / "report.md")}
    assert not any(h.endswith(".nsys-rep") for h in page.hrefs)


def test_every_section_has_content_or_says_why(tmp_path):
    """Even a folder with a manifest and nothing else: no crash, every section explains itself."""
    from harness.report import main

    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(REFERENCE / "manifest.json", bare)
    assert main([str(bare)]) == 0
    html = (bare / "report.html").read_text()
    sections = re.split(r"<h2 ", html)[1:]
    assert len(sections) >= 7
    for sec in sections:
        title = re.search(r">([^<]+)</h2>", sec).group(1)
        has = any(tag in sec for tag in ("<img", "<table", "<dl", 'class="note'))
        assert has, f"section {title!r} is silently empty"
    assert "no runs.csv in" in html


# --- timelines from the committed H100 exports --------------------------------------------------


def test_gpu_timeline_from_committed_exports(tmp_path):
    """A folder with the reference tables and the committed H100 exports of sync_loading's
    baseline and async_dataloader: the timeline shows both, GPU rows and idle share included."""
    from harness.report import RunFolder, build_run_report

    run = tmp_path / "h100"
    shutil.copytree(REFERENCE, run)
    for v, name in (("baseline", "gpu_nsys2025_sync_loading"),
                    ("async_dataloader", "gpu_nsys2025_sync_loading_async_dataloader")):  # fmt: skip
        prof = run / SCENARIO / v / "profile"
        prof.mkdir(parents=True)
        shutil.copyfile(sqlite_fixture(name), prof / f"{SCENARIO}__{v}.sqlite")
    doc = build_run_report(RunFolder.load(run), run)
    img = next(b for b in doc.images if b.name == f"timeline_{SCENARIO}")
    px = assert_picture(img.png, 600)
    assert px.shape[1] >= 1400
    assert "baseline above async_dataloader" in img.alt
    # the panels' own lines, the same strings as their titles
    assert re.search(r"baseline: steps \d+-\d+ · host .* · GPU idle \d+\.\d%; async_dataloader: ",
                     img.caption)  # fmt: skip
    # dali and ideal have no export here: the fastest fix that has one is shown
    assert "dali" not in img.alt


def test_timeline_legend_groups_library_ranges():
    """Many library NVTX names (DALI's threads) share one legend entry instead of flooding it."""
    from analysis.plots.timeline import _nvtx_entries

    used = {"nvtx:step", "nvtx:data_load"} | {f"nvtx:decode #{i}" for i in range(30)}
    entries = [label for label, _ in _nvtx_entries(used)]
    assert entries[:2] == ["NVTX: step", "NVTX: data_load"]
    assert len(entries) == 3 and "30 other range names" in entries[2]


# --- the report never costs a run its results ---------------------------------------------------


def test_report_failure_is_reported_not_raised(tmp_path, monkeypatch):
    import harness.report.cli as R

    run = tmp_path / "run"
    shutil.copytree(REFERENCE, run)
    said: list[str] = []

    def boom(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(R, "write_run_report", boom)
    problem = R.report_after_run(run, said.append)
    assert problem and "No space left on device" in problem
    assert f"python -m harness report {run}" in problem
    assert said and said[0].startswith("FAILED")
    assert (run / "runs.csv").read_bytes() == (REFERENCE / "runs.csv").read_bytes()

    def interrupt(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(R, "write_run_report", interrupt)
    assert R.report_after_run(run, said.append) == "interrupted"
    # a folder without runs.csv (node k of a multi-node run, a failed start): nothing to report
    assert R.report_after_run(tmp_path, said.append) is None


def test_html_escapes_text_and_markdown_escapes_tables():
    from harness.report.doc import Doc, Link
    from harness.report.markdown import render_markdown
    from harness.report.page import render_html

    doc = Doc("t <x>")
    doc.h(2, "A <b>")
    doc.p("if a < b and c > d", Link("file x.nsys-rep", "a b/c#1.nsys-rep"))
    doc.table(["a|b", "c"], [["x|y", 1.23456], [None, float("nan")]], numeric=[1])
    html = render_html(doc)
    assert "<b>" not in html.split("</style>", 1)[1] and "A &lt;b&gt;" in html
    assert 'href="a%20b/c#1.nsys-rep"' in html
    md = render_markdown(doc)
    assert "| x\\|y | 1.23 |" in md and "| – | – |" in md


def test_every_value_the_templates_show_is_escaped():
    """Text from run folders (scenario names, skip reasons, exceptions) reaches every kind of
    block: none of it can open a tag or leave an attribute."""
    from harness.report.doc import Badge, Cell, Code, Doc, Link, Tip
    from harness.report.page import environment, render_html

    assert environment().autoescape is True
    evil = "\"><script>alert('x')</script>"
    doc = Doc(evil)
    doc.h(2, evil, anchor=evil)
    doc.p(evil, Link(evil, evil), Code(evil), Badge(evil, evil, evil), Tip(evil, evil), cls=evil)
    doc.note(evil, kind=evil)
    doc.table([evil], [[Cell(evil, evil, evil)], [[Tip(evil, evil), f"{evil}\n{evil}"]]],
              caption=evil)  # fmt: skip
    doc.image(evil, b"png", evil, caption=evil)
    doc.details(evil, evil)
    doc.deflist([(evil, [evil, Link(evil, evil)])])
    html = render_html(doc)
    assert "<script" not in html
    escaped = "&quot;&gt;&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;"
    assert html.count(escaped) == 31, html  # every text, attribute and class above
    assert html.count('href="%22%3E%3Cscript%3Ealert%28%27x%27%29%3C/script%3E"') == 2


def test_cli_usage_errors(tmp_path):
    from harness.report import main

    assert main([str(tmp_path / "nope")]) == 2
    (tmp_path / "empty").mkdir()
    assert main([str(tmp_path / "empty")]) == 2


# --- any subset of a real run folder: every section renders ------------------------------------

#: The tables of the H100 run of all single-GPU scenarios (tests/data/README.md says how made).
H100_TABLES = DATA / "h100_run_tables"

_SUBSETS = {
    "baselines only": lambda r: r["kind"] == "baseline",
    "kernel_flood baseline only": lambda r: (
        (r["scenario"] == "kernel_flood") & (r["kind"] == "baseline")
    ),
    "one fix only": lambda r: r["variant"] == "sync_free",
    "one scenario": lambda r: r["scenario"] == "sync_loading",
    "skipped scenario only": lambda r: r["scenario"] == "ddp_bucketing",
    "everything": lambda r: r["scenario"] == r["scenario"],
}


def _subset_folder(tmp_path: Path, keep) -> Path:
    """A copy of the H100 tables holding only the runs.csv rows ``keep`` selects (and the rows
    of the other tables for the same scenario x variant pairs)."""
    out = tmp_path / "run"
    shutil.copytree(H100_TABLES, out)
    runs = pd.read_csv(out / "runs.csv")
    runs = runs[keep(runs)]
    runs.to_csv(out / "runs.csv", index=False)
    pairs = set(zip(runs["scenario"], runs["variant"], strict=True))
    for name in ("diagnosis.csv", "findings.csv", "verdicts.csv"):
        df = pd.read_csv(out / name)
        if "variant" in df:
            df = df[[p in pairs for p in zip(df["scenario"], df["variant"], strict=True)]]
        else:
            df = df[df["scenario"].isin(runs["scenario"])]
        df.to_csv(out / name, index=False)
    return out


@pytest.mark.parametrize("subset", list(_SUBSETS))
def test_every_section_renders_for_any_subset(subset, tmp_path, capsys):
    from harness.report import main

    run = _subset_folder(tmp_path, _SUBSETS[subset])
    assert main([str(run), "--no-timelines"]) == 0
    err = capsys.readouterr().err
    assert "section failed" not in err, err
    html = run / "report.html"
    page = assert_links_resolve(html)
    text = _visible_text(html)
    assert "could not be drawn" not in text
    for anchor in ("summary", "matrix", "verdicts", "detectors", "fix-effect", "confusion",
                   "variants", "environment"):  # fmt: skip
        assert anchor in page.ids, anchor
    for s in pd.read_csv(run / "runs.csv")["scenario"].unique():
        assert f"scenario-{s}" in page.ids, s


def test_expected_against_observed_is_coloured_per_variant(tmp_path):
    """Each diagnosed variant's match cell: green where the fired classes are exactly the
    expected one (none on a fix), red where not, grey where the expected class was not judged;
    counted against the classes' states in diagnosis.csv."""
    from analysis.findings import CLASSES
    from harness.report import main

    run = _subset_folder(tmp_path, _SUBSETS["everything"])
    assert main([str(run), "--no-timelines"]) == 0
    diag = pd.read_csv(run / "diagnosis.csv")
    want = {"match": 0, "mismatch": 0, "notjudged": 0}
    for r in diag.to_dict("records"):
        exp = r.get("expected", r["injected"])
        fired = {k for k in CLASSES if r.get(f"{k}_state") == "fired"}  # a newer class: absent
        if exp != "none" and r[f"{exp}_state"] == "not_judged":
            want["notjudged"] += 1
        else:
            want["match" if fired == {exp} - {"none"} else "mismatch"] += 1
    assert want["match"] and want["mismatch"], want  # the H100 run has both
    from tests.test_report_agrees import html_tables

    (table,) = [t["cls"] for t in html_tables(run / "report.html")["Detector findings"]
                if "match" in t["cls"].columns]  # fmt: skip
    for kind, n in want.items():
        # the observed and the match cell of each variant carry its colour
        for col in ("observed", "match"):
            assert sum(kind in c.split() for c in table[col]) == n, (kind, col)
    names = {p.stem for p in assert_markdown_images(run / "report.md")}
    assert "diagnosis_matrix" in names


def test_fix_effect_reads_findings(tmp_path):
    """Per fix, the baseline's main metric and how much of it the fix removed, as findings.csv
    gives them; an older folder without findings.csv says so instead."""
    from analysis.plots import numbers
    from harness.core.config import MAIN_METRIC
    from harness.report import main

    run = _subset_folder(tmp_path, _SUBSETS["one scenario"])
    assert main([str(run), "--no-timelines"]) == 0
    text = _visible_text(run / "report.html")
    f = pd.read_csv(run / "findings.csv")
    f = f[(f["class"] == "data_stall") & (f["metric"] == MAIN_METRIC["data_stall"])]
    val = dict(zip(f["variant"], f["value"], strict=True))
    base = val.pop("baseline")
    assert base > 0
    chain = f"{MAIN_METRIC['data_stall']} {numbers.share_fine(base)}"
    assert chain in text
    for v, x in val.items():
        assert f"{numbers.share_fine(x)} ({v})" in text, v
        assert numbers.share(1 - x / base) in text, v

    (run / "findings.csv").unlink()
    assert main([str(run), "--no-timelines"]) == 0
    text = _visible_text(run / "report.html")
    assert "no findings.csv: this run folder was written before" in text


def test_states_come_from_the_state_columns(tmp_path):
    """'not judged' is the <class>_state column, never a reading of the reason sentence."""
    from harness.report import main

    run = _subset_folder(tmp_path, _SUBSETS["one scenario"])
    diag = pd.read_csv(run / "diagnosis.csv")
    judged = diag["data_stall_state"] != "not_judged"
    assert judged.any()
    diag.loc[judged, "data_stall_state"] = "not_judged"  # the reasons stay as they were
    diag.to_csv(run / "diagnosis.csv", index=False)
    assert main([str(run), "--no-timelines"]) == 0
    html = (run / "report.html").read_text()
    n_shown = html.count(">not judged</span>")
    assert n_shown >= int(judged.sum())
    assert 'class="notjudged' in html


# --- what the report says, word for word --------------------------------------------------------


def _subtitle(md: Path) -> str:
    return md.read_text(encoding="utf-8").splitlines()[2]


def test_the_report_names_the_command_that_wrote_it(tmp_path):
    """`harness run` writes its report at its end; `harness report` rewrites it later."""
    import harness.report.cli as R

    run = _subset_folder(tmp_path, _SUBSETS["one scenario"])
    said: list[str] = []
    assert R.report_after_run(run, said.append) is None
    assert _subtitle(run / "report.md").endswith("UTC by python -m harness run")
    assert R.main([str(run), "--no-timelines"]) == 0
    assert _subtitle(run / "report.md").endswith("UTC by python -m harness report")


def test_scores_that_nothing_judged_read_na_and_left_out_variants_are_named(tmp_path):
    """detector_scores.csv's NaN (a class no variant could be judged on) reads n/a, and the
    confusion section names the variants it leaves out (their expectation was not judged)."""
    from harness.report import main

    run = _subset_folder(tmp_path, _SUBSETS["everything"])
    diag = pd.read_csv(run / "diagnosis.csv")  # from before the match column: add one
    diag["match"] = pd.Series(True, index=diag.index, dtype="boolean")
    diag.loc[diag["variant"] == "sync_free", "match"] = pd.NA
    diag.to_csv(run / "diagnosis.csv", index=False)
    assert main([str(run), "--no-timelines"]) == 0
    md = (run / "report.md").read_text(encoding="utf-8")
    scores = pd.read_csv(run / "detector_scores.csv")
    assert scores["f1"].isna().any()  # the H100 run has no exposed_comm report to score
    for k in scores.loc[scores["f1"].isna(), "class"]:
        assert re.search(rf"^\| {k} \| 0 \| (\d+ \| )?n/a \| n/a \| n/a \|$", md, re.M), k
    assert re.search(
        r"1 of \d+ profiled variants are left out of the matrix.*forced_sync/sync_free", md
    )


def test_a_long_skip_reason_is_cut_at_a_word_not_inside_one(tmp_path):
    from harness.report.fmt import clip

    reason = "needs 2 GPUs on this node (one per process), this machine has 1; " * 5
    cut = clip(reason, 80)
    assert len(cut) <= 80 and cut.endswith("…")
    assert reason.startswith(cut[:-1]) and reason[len(cut) - 1] == " "  # ends before a space
    assert clip("skipped on a CPU box: CUDA graphs capture GPU work only") == (
        "skipped on a CPU box: CUDA graphs capture GPU work only"
    )
    from harness.report import main

    run = _subset_folder(tmp_path, _SUBSETS["skipped scenario only"])
    assert main([str(run), "--no-timelines"]) == 0
    md = (run / "report.md").read_text(encoding="utf-8")
    for err in pd.read_csv(run / "runs.csv")["error"].dropna():
        assert f"| {err} |" in md  # whole: the reasons the harness writes fit in a cell


# --- timelines drawn by worker processes --------------------------------------------------------


def _timeline_jobs(tmp_path: Path) -> list:
    """A pair, a baseline alone and an export that cannot be read."""
    from harness.report.timelines import Job

    bad = tmp_path / "broken.sqlite"
    bad.write_bytes(b"not an nsys export\n" * 64)
    return [
        Job("pair", sqlite_fixture("gpu_nsys2025_sync_loading"),
            sqlite_fixture("gpu_nsys2025_sync_loading_async_dataloader"), "async_dataloader", "", 2),
        Job("alone", sqlite_fixture("cpu_nsys2022_sync_loading"), None, "", "no fix: alone", 3),
        Job("broken", bad, None, "", "", 2),
    ]  # fmt: skip


def test_timelines_drawn_by_workers_are_the_ones_drawn_here(tmp_path):
    """Each worker's picture is byte for byte the one drawn in this process; a failure raises
    the same error (type, message, function); the workers never import torch."""
    import traceback

    from harness.report.fmt import RemoteError
    from harness.report.timelines import Timelines, draw

    jobs = _timeline_jobs(tmp_path)
    with Timelines(jobs, workers=3) as pics:
        workers = [w.proc for w in pics._live]
        assert len(workers) == 3
        for job in jobs[:2]:
            assert pics.picture(job) == draw(job)
        with pytest.raises(RemoteError) as remote:
            pics.picture(jobs[2])
        with pytest.raises(Exception) as here:
            draw(jobs[2])
        where = traceback.extract_tb(here.value.__traceback__)[-1].name
        assert (remote.value.type_name, str(remote.value), remote.value.where) == (
            type(here.value).__name__, str(here.value), where
        )  # fmt: skip
        for proc in workers:  # alive, idle, every picture drawn: what did they load?
            maps = Path(f"/proc/{proc.pid}/maps").read_text()
            assert "matplotlib" in maps and "/torch/" not in maps
    assert all(proc.poll() is not None for proc in workers)  # the block ended them


def test_a_worker_that_dies_fails_its_own_picture_only(tmp_path):
    from harness.report.timelines import Timelines, WorkerDied, draw

    jobs = _timeline_jobs(tmp_path)[:2]
    with Timelines(jobs, workers=2) as pics:
        victim = next(w for w in pics._live if w.job == jobs[0])
        while not victim.ready and victim in pics._live:  # past its imports: drawing
            pics.poll(None)
        assert victim.ready
        victim.proc.kill()
        with pytest.raises(WorkerDied, match=r"pair timeline ended without it \(killed by SIGKILL"):
            pics.picture(jobs[0])
        assert pics.picture(jobs[1]) == draw(jobs[1])
        assert pics.picture(jobs[0]) == draw(jobs[0])  # asked again: drawn here


def test_workers_that_cannot_start_leave_the_pictures_to_this_process(tmp_path, capsys):
    """A worker that dies before it could draw (a broken install, say): every picture is
    drawn here instead, as with one worker."""
    from harness.report.timelines import Timelines, draw

    jobs = _timeline_jobs(tmp_path)[:2]
    with Timelines(jobs, workers=2) as pics:
        for w in pics._live:
            w.proc.kill()
        assert [pics.picture(j) for j in jobs] == [draw(j) for j in jobs]
    assert "drawn one by one, in this process" in capsys.readouterr().err


def test_a_report_drawn_by_workers_is_the_report_drawn_here(tmp_path):
    """The H100 tables with exports for three scenarios (one unreadable): the document built
    with a worker per timeline is the one built without workers, pictures and error note too."""
    from harness.report import RunFolder, build_run_report
    from harness.report.markdown import render_markdown

    run = _subset_folder(tmp_path, _SUBSETS["everything"])
    exports = {
        ("sync_loading", "baseline"): sqlite_fixture("gpu_nsys2025_sync_loading"),
        ("sync_loading", "async_dataloader"): sqlite_fixture(
            "gpu_nsys2025_sync_loading_async_dataloader"
        ),
        ("pageable_copies", "baseline"): sqlite_fixture("cpu_nsys2022_sync_loading"),
        ("kernel_flood", "baseline"): _timeline_jobs(tmp_path)[2].base,
    }
    for (s, v), src in exports.items():
        prof = run / s / v / "profile"
        prof.mkdir(parents=True)
        shutil.copyfile(src, prof / f"{s}__{v}.sqlite")
    docs = [build_run_report(RunFolder.load(run), run, workers=n) for n in (1, 3)]
    md = [re.sub(r"written .* UTC", "", render_markdown(d)) for d in docs]
    assert md[0] == md[1]
    assert "this section could not be drawn" in md[0]
    pics = [{b.name: b.png for b in d.images} for d in docs]
    assert pics[0] == pics[1]
    assert {"timeline_sync_loading", "timeline_pageable_copies"} <= set(pics[0])


# --- the host speed section (issue 41) ----------------------------------------------------------
