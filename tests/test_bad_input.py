"""Every command given a bad input, through the real CLI (tests/harness_cli.py): one line on
stderr naming the input and the problem, exit 2, never a traceback (issue 52 item 1). Then a
fuzz-style pass: truncated, bit-flipped and wrong-format copies of real exports at several
sizes, all given to one ``diagnose`` beside a good export (the good one is still reported)
and to ``score`` as a corpus.

The cases run as subprocesses four at a time (each is a fresh interpreter that imports the
harness: about 1.5 s of CPU), once per module; each parametrized test then checks its own."""

from __future__ import annotations

import json
import lzma
import random
import shutil
import sqlite3
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from analysis.packed_export import SUFFIX as PACKED
from tests._fixtures import sqlite_fixture, xz_fixture
from tests.conftest import DATA, REPO, run_cli

#: A small real export (CPU, nsys 2022.4) and a GPU one (H100, nsys 2025.3), as plain xz files
#: (nsys's SQLite inside), and a packed corpus one.
SMALL = xz_fixture("cpu_nsys2022_sync_loading")
GPU = xz_fixture("h100/h100_kernel_flood__cuda_graphs")
CORPUS_EXPORT = REPO / "corpus" / "wild" / "exports" / f"clean_loader_keeps_up{PACKED}"
H100_TABLES = DATA / "h100_run_tables"


def _bad_files(root: Path) -> dict[str, Path]:
    """The bad inputs the table refers to, by name."""
    root.mkdir(parents=True, exist_ok=True)
    files = {
        "missing": root / "missing.sqlite",
        "text": root / "notes.sqlite",
        "truncated_xz": root / "cut.sqlite.xz",
        "text_file": root / "notes.txt",
    }
    files["text"].write_text("not a database\n" * 10)
    files["text_file"].write_text("hello\n")
    files["truncated_xz"].write_bytes(SMALL.read_bytes()[:5000])  # issue 52's first trip
    # run folders with a broken table, and corpus folders with broken labels
    for name, table, text in (
        ("run_empty_diag", "diagnosis.csv", ""),
        ("run_wrong_diag", "diagnosis.csv", "a,b\n1,2\n"),
        ("run_bad_runs", "runs.csv", "garbage\n"),
    ):
        run = root / name
        run.mkdir(exist_ok=True)
        for f in H100_TABLES.iterdir():
            (run / f.name).write_bytes(f.read_bytes())
        (run / table).write_text(text)
        files[name] = run
    for name, fname, text in (
        ("corpus_wrong_labels", "labels.csv", "x,y\n1,2\n"),
        ("corpus_binary_labels", "labels.csv", "\udcff"),
        ("corpus_bad_yaml", "labels.yaml", "a: [1\n"),
    ):
        folder = root / name
        folder.mkdir(exist_ok=True)
        (folder / fname).write_bytes(text.encode("utf-8", "surrogateescape"))
        files[name] = folder
    files["empty_dir"] = root / "empty_dir"
    files["empty_dir"].mkdir(exist_ok=True)
    (root / "bad_manifest").mkdir(exist_ok=True)
    (root / "bad_manifest" / "manifest.json").write_text("{")
    files["bad_manifest"] = root / "bad_manifest"
    return files


#: (case id, the command line with {name} for a bad file, what the line must also say).
CASES: list[tuple[str, list[str], str]] = [
    ("diagnose-text", ["diagnose", "--format", "json", "{text}"], "not a database"),
    ("diagnose-truncated-xz", ["diagnose", "{truncated_xz}"], "truncated"),
    ("diagnose-set", ["diagnose", "--set", "nope.key=1", str(SMALL)], "nope"),
    ("diagnose-format", ["diagnose", "--format", "xml", str(SMALL)], "xml"),
    ("diagnose-step-ms", ["diagnose", "--step-ms", "-3", str(SMALL)], "-3"),
    ("score-missing", ["score", "{missing}"], "no such folder"),
    ("score-file", ["score", "{text_file}"], "not a folder"),
    ("score-empty-dir", ["score", "{empty_dir}"], "neither a corpus"),
    ("score-tool", ["score", "corpus/wild", "--tool", "nope"], "nope"),
    ("score-tool-template", ["score", "corpus/wild", "--tool", "ls {sqlit}"], "{sqlit}"),
    ("score-tool-set", ["score", "corpus/wild", "--tool-set", "hta.nope=1"], "hta.nope"),
    ("score-set", ["score", "corpus/wild", "--set", "nope=1"], "nope"),
    ("score-empty-diagnosis", ["score", "{run_empty_diag}"], "empty file"),
    ("score-wrong-diagnosis", ["score", "{run_wrong_diag}"], "no column scenario"),
    ("score-wrong-labels", ["score", "{corpus_wrong_labels}"], "no column script"),
    ("score-binary-labels", ["score", "{corpus_binary_labels}"], "labels.csv"),
    ("score-bad-yaml", ["score", "{corpus_bad_yaml}"], "labels.yaml"),
    ("score-out", ["score", "corpus/wild", "--out", "{text_file}/x"], "cannot make the folder"),
    ("report-missing", ["report", "{missing}"], "no such folder"),
    ("report-empty-dir", ["report", "{empty_dir}"], "not a run folder"),
    ("report-steps", ["report", "--steps", "0", str(H100_TABLES)], "--steps"),
    ("compare-one", ["compare", str(H100_TABLES)], "two run folders"),
    ("compare-missing", ["compare", "{missing}", "{empty_dir}"], "missing.sqlite"),
    ("rediagnose-missing", ["rediagnose", "{missing}"], "no runs.csv"),
    ("rediagnose-bad-runs", ["rediagnose", "{run_bad_runs}"], "no column scenario"),
    ("report-file", ["report", "{text_file}"], "not a folder"),
    ("report-out", ["report", "--out", "{text_file}/x", "{run_empty_diag}"],
     "cannot make the folder"),
    ("compare-out", ["compare", "{run_empty_diag}", "{run_wrong_diag}", "--out", "{text_file}/x"],
     "cannot make the folder"),
    ("kernels-none", ["kernels"], "run_dir"),
    ("kernels-missing", ["kernels", "{missing}"], "no such folder"),
    ("kernels-not-a-run", ["kernels", "{empty_dir}"], "not a run folder"),
    ("kernels-policy", ["kernels", "--policy", "nope", str(H100_TABLES)], "nope"),
    ("kernels-top", ["kernels", "--top", "0", str(H100_TABLES)], "kernels.top"),
    ("kernels-variant", ["kernels", "{run_empty_diag}", "--variants", "nope"],
     "no such scenario or variant"),
    ("kernels-bad-runs", ["kernels", "{run_bad_runs}", "--variants", "x"], "runs.csv"),
    ("no-subcommand", [], "a subcommand is needed"),
    ("list-extra", ["list", "extra"], "extra"),
    ("subcommand", ["nope"], "nope"),
    ("run-no-plus", ["run", "scenario=sync_loading"], "+scenario=sync_loading"),
    ("run-unknown-scenario", ["run", "+scenario=nope"], "unknown scenario nope"),
    ("run-unknown-key", ["run", "+scenario=sync_loading", "harness.repeat=2"], "harness.repeats"),
    ("run-flag", ["run", "+scenario=sync_loading", "--bogus"], "--bogus"),
    ("run-group", ["run", "+scenario=sync_loading", "hydra/launcher=nope"], "hydra/launcher/nope"),
    ("run-sweep-value", ["run", "-m", "+scenario=sync_loading", "harness.repeats=1,0"], "repeats"),
    ("run-cfg-and-m", ["run", "-m", "--cfg", "job", "+scenario=sync_loading"], "--cfg"),
    ("run-resume-missing", ["run", "+scenario=sync_loading", "harness.resume={missing}"],
     "not a run folder"),
    ("run-resume-corrupt", ["run", "+scenario=sync_loading", "harness.resume={bad_manifest}"],
     "not valid JSON"),
]  # fmt: skip


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, tuple[list[str], subprocess.CompletedProcess]]:
    """Every case run once, four at a time: case id -> (its arguments, the process)."""
    root = tmp_path_factory.mktemp("bad")
    files = _bad_files(root / "in")
    results = root / "results"

    def argv(args: list[str]) -> list[str]:
        out = list(args)
        for key, path in files.items():
            out = [a.replace(f"{{{key}}}", str(path)) for a in out]
        if out[:1] == ["run"]:
            out.append(f"harness.results_dir={results}")
        return out

    def one(case: tuple[str, list[str], str]) -> tuple[str, tuple[list[str], object]]:
        args = argv(case[1])
        return case[0], (args, run_cli(args, timeout=300))

    with ThreadPoolExecutor(max_workers=4) as pool:
        done = dict(pool.map(one, CASES))
    assert not results.exists(), "a refused run created its results folder"
    return done  # type: ignore[return-value]


@pytest.mark.parametrize(("case", "args", "needle"), CASES, ids=[c[0] for c in CASES])
def test_a_bad_input_is_one_line_and_exit_2(outcomes, case, args, needle) -> None:
    argv, proc = outcomes[case]
    said = proc.stdout + proc.stderr
    assert "Traceback" not in said, said[-3000:]
    assert proc.returncode == 2, said[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert proc.stdout == "", proc.stdout[-2000:]
    assert needle in lines[0], lines[0]
    named = [a for a in argv if "/" in a and Path(a.rpartition("=")[2]).name in lines[0]]
    if any("{" in a for a in args if a != "ls {sqlit}"):  # it names a file: the line does too
        assert named, f"the line does not name the input: {lines[0]}"


# --- fuzz: broken copies of real exports ------------------------------------------------------


def _flip(data: bytes, rng: random.Random, bits: int = 1, start: int = 0) -> bytes:
    b = bytearray(data)
    for _ in range(bits):
        pos = rng.randrange(start, len(b))
        b[pos] ^= 1 << rng.randrange(8)
    return bytes(b)


def _no_nsys_tables(path: Path) -> Path:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE t (x INTEGER)")
    db.commit()
    db.close()
    return path


def _broken_exports(root: Path) -> list[Path]:
    """Truncated (several sizes), bit-flipped and wrong-format copies of three real exports."""
    rng = random.Random(52)
    out: list[Path] = []

    def put(name: str, data: bytes) -> None:
        out.append(root / name)
        out[-1].write_bytes(data)

    for src in (SMALL, GPU, CORPUS_EXPORT):
        data = src.read_bytes()
        stem = src.name.split(".")[0]
        kind = PACKED if src.name.endswith(PACKED) else ".sqlite.xz"
        for frac in (0.001, 0.05, 0.5, 0.99):
            put(f"{stem}-cut{frac}{kind}", data[: max(1, int(len(data) * frac))])
        for i in range(3):
            put(f"{stem}-flip{i}{kind}", _flip(data, rng, start=12))  # past the stream header
        if kind == PACKED:
            continue
        raw = lzma.decompress(data)
        for frac in (0.0005, 0.3, 0.999):
            put(f"{stem}-rawcut{frac}.sqlite", raw[: max(1, int(len(raw) * frac))])
        put(f"{stem}-rawmagic.sqlite", _flip(raw[:16], rng) + raw[16:])  # the SQLite magic
    put("gzip.sqlite.xz", b"\x1f\x8b\x08\x00" + bytes(200))
    put("text-in-xz.sqlite.xz", lzma.compress(b"hello, not an export\n"))
    put("kineto.sqlite", (DATA / "kineto" / "data_stall.pt.trace.json.gz").read_bytes())
    put("json.sqlite", json.dumps({"traceEvents": []}).encode())
    put("garbage.nsys-rep", b"\x00" * 512)
    put("empty.sqlite", b"")
    out.append(_no_nsys_tables(root / "no-nsys-tables.sqlite"))
    (root / "a-folder.sqlite").mkdir()
    return [*out, root / "a-folder.sqlite", root / "missing.sqlite.xz"]


def test_diagnose_reports_the_good_export_and_one_line_per_broken_one(tmp_path) -> None:
    """``diagnose GOOD BAD...``: GOOD's findings on stdout as diagnose alone prints them, then
    one line per broken export naming it, exit 2; no traceback whatever the damage (also a
    missing file, an empty one, a folder, a .nsys-rep that is not one)."""
    bad = _broken_exports(tmp_path)
    assert len(bad) >= 35
    alone = run_cli(["diagnose", str(SMALL)])
    assert alone.returncode == 0, alone.stderr
    proc = run_cli(["diagnose", str(SMALL), *map(str, bad)], timeout=600)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 2
    assert proc.stdout == alone.stdout  # the good report, whole, and nothing of the bad ones
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == len(bad), "\n".join(lines)
    for path, line in zip(bad, lines, strict=True):  # in the order given
        assert line.startswith(f"error: cannot diagnose {path}: "), line
    json_out = run_cli(["diagnose", "--format", "json", str(SMALL), str(bad[0])])
    assert json_out.returncode == 2
    assert [r["report"] for r in json.loads(json_out.stdout)] == [str(SMALL)]


def test_score_scores_the_readable_exports_and_names_the_broken_ones(tmp_path) -> None:
    """A corpus folder with one good export and two broken ones: the table has all three (the
    broken ones ``unreadable``), and one line per broken export after it; exit 2."""
    (tmp_path / "exports").mkdir()
    good = tmp_path / "exports" / "good.sqlite.xz"
    good.write_bytes(SMALL.read_bytes())
    (tmp_path / "exports" / "cut.sqlite.xz").write_bytes(SMALL.read_bytes()[:5000])
    (tmp_path / "exports" / "flipped.sqlite.xz").write_bytes(
        _flip(SMALL.read_bytes(), random.Random(1), start=12)
    )
    (tmp_path / "labels.csv").write_text(
        "script,label\ngood,data_stall\ncut,data_stall\nflipped,none\n"
    )
    proc = run_cli(["score", str(tmp_path), "--no-expert-rules"], timeout=300)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 2
    table = proc.stdout.split("\n\n")[0]
    assert "good" in table and table.count("unreadable") == 2
    lines = proc.stderr.strip().splitlines()
    assert [ln.split(":", 2)[1].strip() for ln in lines] == ["cannot score cut",
                                                              "cannot score flipped"]  # fmt: skip
    assert "cut.sqlite.xz" in lines[0] and "truncated" in lines[0]
    assert "flipped.sqlite.xz" in lines[1]


def test_rediagnose_judges_the_readable_exports_and_names_the_broken_ones(tmp_path) -> None:
    """A run folder (the H100 sync_loading run's tables) whose dali export is real and whose
    baseline and ideal exports are a truncated and an empty copy: the verdicts are printed as
    ever, then one line per broken export naming it; exit 2 (it was 0, with nothing said)."""
    run = tmp_path / "run"
    shutil.copytree(DATA / "h100_sync_loading", run)
    good = sqlite_fixture("h100_sync_loading__dali", DATA / "side_streams")
    exports = {v: run / "sync_loading" / v / "profile" / f"sync_loading__{v}.sqlite"
               for v in ("baseline", "dali", "ideal")}  # fmt: skip
    for path in exports.values():
        path.parent.mkdir(parents=True)
    shutil.copyfile(good, exports["dali"])
    exports["baseline"].write_bytes(good.read_bytes()[: good.stat().st_size // 3])
    exports["ideal"].write_bytes(b"")
    proc = run_cli(["rediagnose", str(run)], timeout=300)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "sync_loading" in proc.stdout  # the verdict table
    lines = proc.stderr.strip().splitlines()
    assert [ln.split(": ", 2)[1] for ln in lines] == [
        f"cannot read the export {exports['baseline']}",
        f"cannot read the export {exports['ideal']}",
    ], lines
    assert "truncated" in lines[0] and "empty file" in lines[1]
