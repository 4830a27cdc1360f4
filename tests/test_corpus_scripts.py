"""The wild corpus's labels agree with its scripts, and corpus/measure.py applies the label rule.

The scripts themselves are not run here (seconds of torch start-up each); they are checked by
reading their source, which is what a mislabelled or project-importing script gets wrong.
"""

from __future__ import annotations

import ast
import csv
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WILD = ROOT / "corpus" / "wild"
LABELS = list(csv.DictReader((WILD / "labels.csv").open(newline="")))
CLASSES = {"data_stall", "pageable_copy", "launch_bound", "host_sync", "exposed_comm", "none"}
PROJECT_PACKAGES = {"harness", "analysis", "scenarios", "bottlenecks"}
RESERVED_RANGES = {"measure", "step", "data_load"}
NVTX_CALLS = {"range", "range_push", "range_start", "mark", "annotate", "push_range", "start_range"}


def _measure():
    spec = importlib.util.spec_from_file_location("corpus_measure", ROOT / "corpus" / "measure.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _tree(script: str) -> ast.Module:
    return ast.parse((WILD / f"{script}.py").read_text())


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
    tree = _tree(row["script"])
    assert row["label"] in CLASSES
    assert row["gpus"] in {"1", "2"}
    assert row["why"].strip()
    fixes = [row["label_fix"]] + [f for f in row["other_fixes"].split(";") if f]
    assert sorted(_fix_choices(tree)) == sorted(["none", *fixes])
    names = _nvtx_names(tree)
    assert (row["user_nvtx"] == "true") == bool(names)
    assert not RESERVED_RANGES & set(names)


@pytest.mark.parametrize("row", LABELS, ids=[r["script"] for r in LABELS])
def test_script_does_not_import_the_project(row: dict) -> None:
    for node in ast.walk(_tree(row["script"])):
        if isinstance(node, ast.Import):
            roots = {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            roots = {(node.module or "").split(".")[0]}
        else:
            continue
        assert not roots & PROJECT_PACKAGES, f"{row['script']} imports {roots & PROJECT_PACKAGES}"


def _stands(tmp_path: Path, label: str, none_ms: float, fixes: dict[str, float]) -> dict[str, bool]:
    labels = tmp_path / "labels.csv"
    names = list(fixes)
    with labels.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["script", "label", "label_fix", "other_fixes", "user_nvtx", "gpus", "why"])
        w.writerow(["s", label, names[0], ";".join(names[1:]), "false", "1", "x"])
    timing = tmp_path / "timing.csv"
    with timing.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["script", "fix", "repeat", "step_ms", "steps", "rc", "skipped"])
        for rep, jitter in (("1", 1.0), ("2", 1.02)):
            w.writerow(["s", "none", rep, none_ms * jitter, 10, 0, ""])
            for name, ms in fixes.items():
                w.writerow(["s", name, rep, ms * jitter, 10, 0, ""])
    rows = _measure().summarize(str(timing), str(labels))
    return {r["fix"]: r["label_stands"] for r in rows}


def test_label_stands_when_label_fix_wins(tmp_path: Path) -> None:
    got = _stands(tmp_path, "launch_bound", 30.0, {"graphs": 10.0, "nosync": 28.0})
    assert got == {"graphs": True, "nosync": True}


def test_label_falls_when_another_fix_is_larger(tmp_path: Path) -> None:
    got = _stands(tmp_path, "launch_bound", 30.0, {"graphs": 20.0, "nosync": 10.0})
    assert set(got.values()) == {False}


def test_label_falls_when_label_fix_is_below_threshold(tmp_path: Path) -> None:
    got = _stands(tmp_path, "host_sync", 30.0, {"nosync": 26.0})
    assert set(got.values()) == {False}


def test_clean_label_falls_with_one_fix_at_1_15(tmp_path: Path) -> None:
    assert set(_stands(tmp_path, "none", 23.0, {"noio": 20.0}).values()) == {False}
    assert set(_stands(tmp_path, "none", 21.0, {"noio": 20.0}).values()) == {True}


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
