"""The wild corpus's labels agree with its scripts, every script runs its CPU size with every
switch, and corpus/measure.py applies the label rule.

Labels are checked by reading the scripts' source, which is what a mislabelled or
project-importing script gets wrong. An entry runs its ``source`` script (default: its own name),
so one script can be two entries (a pipeline on CPUs and on GPUs); each script runs once per
switch at its CPU size, whatever its entries' ``device``. The runs go through corpus/timer.py
(torch imported once, one forked process per run, two-process scripts as two forked ranks) with
``--seconds 0``, each script's shortest loop, one torch thread each.
"""

from __future__ import annotations

import ast
import csv
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bottlenecks import CLASSES as BOTTLENECKS
from harness.judge.labels import DEVICES, entry_device, entry_source

ROOT = Path(__file__).resolve().parents[1]
WILD = ROOT / "corpus" / "wild"
#: The scored entries, then the pending ones (corpus/wild/pending/labels.csv: written, not yet
#: timed on a GPU); both are held to the same conventions and run at their CPU size here.
LABELS = [
    *csv.DictReader((WILD / "labels.csv").open(newline="")),
    *csv.DictReader((WILD / "pending" / "labels.csv").open(newline="")),
]
CLASSES = {*BOTTLENECKS, "none"}
PROJECT_PACKAGES = {"harness", "analysis", "scenarios", "bottlenecks"}
RESERVED_RANGES = {"measure", "step", "data_load"}
#: The switches that capture a CUDA graph, the only ones that may skip on a CPU.
CUDA_GRAPH_FIXES = {"graphs", "replay"}
NVTX_CALLS = {"range", "range_push", "range_start", "mark", "annotate", "push_range", "start_range"}


def _measure():
    spec = importlib.util.spec_from_file_location("corpus_measure", ROOT / "corpus" / "measure.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _tree(row: dict) -> ast.Module:
    """The parsed script an entry runs."""
    return ast.parse((WILD / f"{entry_source(row)}.py").read_text())


def _fixes(row: dict) -> list[str]:
    return [row["label_fix"], *[f for f in row["other_fixes"].split(";") if f]]


#: Each script file, with the switches of its entries (one set: checked below).
SOURCES = {entry_source(r): (r["procs"], _fixes(r)) for r in LABELS}


def _fix_choices(tree: ast.Module) -> list[str]:
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and node.args
            and getattr(node.args[0], "value", None) == "--fix"
        ):
            for kw in node.keywords:
                if kw.arg == "choices":
                    return [e.value for e in kw.value.elts]
    return []


def _nvtx_names(tree: ast.Module) -> list[str]:
    names = []
    for node in ast.walk(tree):
        func = getattr(node, "func", None)
        name = getattr(func, "attr", None) or getattr(func, "id", None)
        if isinstance(node, ast.Call) and name in NVTX_CALLS | {
            "nvtx"
        }:  # nvtx(...): a script's own wrapper
            if (
                node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                names.append(node.args[0].value)
    return names


def test_corpus_has_the_required_scripts_and_user_ranges() -> None:
    assert len(LABELS) >= 18
    assert len({r["script"] for r in LABELS}) == len(LABELS)
    assert sum(r["user_nvtx"] == "true" for r in LABELS) >= 4


@pytest.mark.parametrize("row", LABELS, ids=[r["script"] for r in LABELS])
def test_labels_match_script(row: dict) -> None:
    tree = _tree(row)
    assert row["label"] in CLASSES
    assert row["procs"] in {"1", "2"} and row["gpus"] in {"0", "1", "2"}
    assert entry_device(row) in DEVICES and (entry_device(row) != "cuda" or row["gpus"] != "0")
    assert re.fullmatch(r"[a-z0-9-]+(,[a-z0-9-]+)*", row["nsys_trace"])
    assert row["why"].strip()
    assert sorted(_fix_choices(tree)) == sorted(["none", *_fixes(row)])
    names = _nvtx_names(tree)
    assert (row["user_nvtx"] == "true") == bool(names)
    assert not RESERVED_RANGES & set(names)


@pytest.mark.parametrize("row", LABELS, ids=[r["script"] for r in LABELS])
def test_every_cause_has_one_full_removal_switch(row: dict) -> None:
    """``removes`` names one switch per labelled class and per ``also`` class (none for a clean
    script), each one of the script's switches, and measure.py gives it that class."""
    removes = _measure().parse_removes(row["removes"])
    also = {c for c in row["also"].split(";") if c}
    assert also <= CLASSES - {"none", row["label"]}
    wanted = set() if row["label"] == "none" else {row["label"], *also}
    assert set(removes) == wanted
    classes = _measure().switch_classes(row)
    assert all(classes[switch] == cls for cls, switch in removes.items())


@pytest.mark.parametrize("row", LABELS, ids=[r["script"] for r in LABELS])
def test_script_does_not_import_the_project(row: dict) -> None:
    for node in ast.walk(_tree(row)):
        if isinstance(node, ast.Import):
            roots = {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            roots = {(node.module or "").split(".")[0]}
        else:
            continue
        assert not roots & PROJECT_PACKAGES, f"{row['script']} imports {roots & PROJECT_PACKAGES}"


def _stands(
    tmp_path: Path,
    label: str,
    none_ms: float,
    fixes: dict[str, float],
    removes: str = "",
    also: str = "",
) -> dict[str, tuple[bool, object]]:
    """{switch: (label_stands, also_stands)} of one script timed twice (2% apart)."""
    labels = tmp_path / "labels.csv"
    names = list(fixes)
    with labels.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["script", "label", "label_fix", "other_fixes", "also", "removes"])
        w.writerow(["s", label, names[0], ";".join(names[1:]), also, removes])
    timing = tmp_path / "timing.csv"
    with timing.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["script", "fix", "repeat", "step_ms", "steps", "rc", "skipped"])
        for rep, jitter in (("1", 1.0), ("2", 1.02)):
            w.writerow(["s", "none", rep, none_ms * jitter, 10, 0, ""])
            for name, ms in fixes.items():
                if ms is not None:
                    w.writerow(["s", name, rep, ms * jitter, 10, 0, ""])
    rows = _measure().summarize(str(timing), str(labels))
    return {r["fix"]: (r["label_stands"], r["also_stands"]) for r in rows}


def test_label_stands_when_label_fix_wins(tmp_path: Path) -> None:
    got = _stands(tmp_path, "launch_bound", 30.0, {"graphs": 10.0, "nosync": 28.0})
    assert got == {"graphs": (True, True), "nosync": (True, True)}


def test_label_falls_when_another_fix_is_larger(tmp_path: Path) -> None:
    got = _stands(tmp_path, "launch_bound", 30.0, {"graphs": 20.0, "nosync": 10.0})
    assert {v[0] for v in got.values()} == {False}


def test_label_falls_when_label_fix_is_below_threshold(tmp_path: Path) -> None:
    got = _stands(tmp_path, "host_sync", 30.0, {"nosync": 26.0})
    assert {v[0] for v in got.values()} == {False}


def test_clean_label_falls_with_one_fix_at_1_15(tmp_path: Path) -> None:
    assert {v[0] for v in _stands(tmp_path, "none", 23.0, {"noio": 20.0}).values()} == {False}
    assert {v[0] for v in _stands(tmp_path, "none", 21.0, {"noio": 20.0}).values()} == {True}


def test_the_label_stands_on_its_full_removal(tmp_path: Path) -> None:
    """The realistic fix alone loses to the second cause's removal (1.5x against 2x), but the
    label's own removal (3x) beats both: the label stands on its class's best switch."""
    fixes = {"workers": 20.0, "nosync": 15.0, "resident": 10.0}
    removes = "data_stall=resident;host_sync=nosync"
    got = _stands(tmp_path, "data_stall", 30.0, fixes, removes, also="host_sync")
    assert got == dict.fromkeys(fixes, (True, True))
    # without its removal measured, the second cause's larger switch wins
    fixes["resident"] = None
    got = _stands(tmp_path, "data_stall", 30.0, fixes, removes, also="host_sync")
    assert got == {"workers": (False, True), "nosync": (False, True), "resident": (False, True)}


def test_a_switch_of_no_class_competes_with_the_label(tmp_path: Path) -> None:
    """A partial remedy of no named class (nolog) larger than the label's best fails it."""
    got = _stands(tmp_path, "host_sync", 30.0, {"nosync": 24.0, "nolog": 20.0})
    assert {v[0] for v in got.values()} == {False}


def test_also_stands_needs_its_class_at_1_2(tmp_path: Path) -> None:
    fixes = {"prebuilt": 10.0, "nosync": 27.0}
    removes = "data_stall=prebuilt;host_sync=nosync"
    got = _stands(tmp_path, "data_stall", 30.0, fixes, removes, also="host_sync")
    assert got == dict.fromkeys(fixes, (True, False))  # nosync 1.11x: not a real second cause
    got = _stands(tmp_path, "data_stall", 30.0, {**fixes, "nosync": None}, removes, "host_sync")
    assert {v[1] for v in got.values()} == {""}  # not measured: unknown


def test_removes_must_name_known_switches() -> None:
    m = _measure()
    row = {"script": "s", "label": "host_sync", "label_fix": "nosync", "other_fixes": ""}
    with pytest.raises(ValueError, match="not one of its fixes"):
        m.switch_classes({**row, "removes": "host_sync=noread"})
    with pytest.raises(ValueError, match="bad pair"):
        m.parse_removes("host_sync")


#: Seconds a run may take before the timer stops it: far above the ~0.1-2 s each takes, so a
#: loaded machine slows the test down but never fails it.
LIMIT_S = 1200


def test_entries_of_one_script_agree() -> None:
    """Entries sharing a script have its switches and process count: one CPU run of the
    script covers them all; and an entry that names a source names another entry's script."""
    for row in LABELS:
        assert (row["procs"], _fixes(row)) == SOURCES[entry_source(row)], row["script"]
        if row["source"]:
            assert row["source"] in {r["script"] for r in LABELS}, row["script"]


#: torch.compile's modules imported once in the timer (no GPU is visible here, so importing
#: them cannot touch CUDA before the forks): about 3 s less in each of the ~10 runs that compile
#: or, like ue_swiglu, build torch.compile wrappers for every switch.
PRELOAD_COMPILER = ("--preload", "torch._inductor.compile_fx")


@pytest.fixture(scope="module")
def cpu_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], dict]:
    """Every script with `none` and each of its switches, at its CPU size (no --device: no GPU
    is visible): {(script, fix): row}."""
    tmp = tmp_path_factory.mktemp("corpus_cpu")
    specs = "".join(
        f"{src} {procs} {LIMIT_S} {' '.join(fixes)}\n" for src, (procs, fixes) in SOURCES.items()
    )
    env = {**os.environ, "CORPUS_DATA_DIR": str(tmp / "data"), "OMP_NUM_THREADS": "1"}
    env["CUDA_VISIBLE_DEVICES"] = ""  # their CPU size even where a GPU is present
    env["PP_CPU_SEQS"] = "16"  # the pp_* pipelines' micro-batches a quarter of their timed size
    proc = subprocess.run(
        [*(sys.executable, str(ROOT / "corpus" / "timer.py"), "--repeats", "1"),
         *PRELOAD_COMPILER,
         *("--csv", str(tmp / "timing.csv"), "--logs", str(tmp / "logs")),
         "--script-args=--seconds 0"],
        input=specs, capture_output=True, text=True, env=env, timeout=LIMIT_S * 3,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = list(csv.DictReader((tmp / "timing.csv").open()))
    return {(r["script"], r["fix"]): {**r, "log": tmp / "logs"} for r in rows}


RESULT_LINE = re.compile(r"^RESULT (\{.*\})$", re.MULTILINE)


def _gloo_teardown_abort(row: dict, run: dict, log: str) -> bool:
    """A 2-process script that did all its work (RESULT written, its step measured) and whose
    ranks then aborted in gloo's tear-down ("terminate called without an active exception",
    SIGABRT, after ``barrier()`` and ``destroy_process_group()``). Seen in 2 of 8 such runs
    beside the other test process, never in 24 runs on an idle box: torch's shutdown, not the
    script, so it does not fail the script's test."""
    return (
        row["procs"] == "2"
        and RESULT_LINE.search(log) is not None
        and "terminate called without an active exception" in log
        and "SIGABRT" in log
    )


@pytest.mark.parametrize("row", LABELS, ids=[r["script"] for r in LABELS])
def test_every_switch_runs_at_cpu_size(cpu_runs: dict, row: dict) -> None:
    """Each run of the entry's script exits 0 with a RESULT line; only a CUDA-graph switch may
    skip, saying why."""
    source = entry_source(row)
    for fix in ["none", *_fixes(row)]:
        r = cpu_runs[(source, fix)]
        log = (r["log"] / f"{source}.{fix}.r1.log").read_text(errors="replace")
        if r["rc"] != "0":
            assert _gloo_teardown_abort(row, r, log), log[-2000:]
            result = json.loads(RESULT_LINE.search(log).group(1))
            assert result["step_ms"] > 0 and result["steps"] >= 10, log[-2000:]
        elif r["skipped"]:
            assert fix in CUDA_GRAPH_FIXES and r["skipped"] == "needs CUDA", log[-2000:]
        else:
            assert float(r["step_ms"]) > 0 and int(r["steps"]) >= 10, log[-2000:]
    none = cpu_runs[(source, "none")]
    assert none["step_ms"] or none["rc"] != "0"  # a measured none (or the abort above)


def test_result_line_parsing(tmp_path: Path) -> None:
    m = _measure()
    log = tmp_path / "x.log"
    log.write_text('noise\nRESULT {"step_ms": 12.5, "steps": 40, "fix": "none"}\n')
    assert m.timing_row("s", "none", "1", "0", str(log)) == [
        "s",
        "none",
        "1",
        "12.5000",
        "40",
        "0",
        "",
    ]
    log.write_text(
        'RESULT {"step_ms": null, "steps": 0, "fix": "graphs", "skipped": "needs CUDA"}\n'
    )
    assert m.timing_row("s", "graphs", "1", "0", str(log))[3:] == ["", "0", "0", "needs CUDA"]
    log.write_text("Traceback ...\n")
    assert m.timing_row("s", "none", "1", "1", str(log))[3] == ""
