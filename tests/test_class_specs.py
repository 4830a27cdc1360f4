"""One spec per bottleneck class (bottlenecks/classes.py), read by every consumer.

A class is one ``ClassSpec`` entry: the enum, the detector registry, the main metrics, the
replay model's causes, nsys's rules, the ``--tool`` keyword adapter and the report's legend all
derive from ``SPECS``. The subprocess tests add a throwaway class to ``SPECS`` in a fresh
interpreter (nothing of it leaks into this one) and check that every consumer sees it, or, where
the detector or its threshold section is missing, that importing the detectors fails naming it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import bottlenecks
from analysis import expert_rules as E
from analysis.detect import REGISTRY, diagnose, load_thresholds
from analysis.detect import timemodel as M
from analysis.detect.config import MAIN_METRIC
from analysis.trace import open_trace
from bottlenecks.classes import SPECS, ClassSpec, ClassSpecError, NsysRule, check_specs
from harness.judge.score import TOOL_WORDS
from tests._fixtures import DATA, sqlite_fixture

REPO = Path(__file__).resolve().parent.parent


def _flagged(text: str) -> set[str]:
    """The classes the ``--tool`` adapter reads in ``text`` (as ``tool_classes`` does)."""
    low = text.lower()
    return {k for k, words in TOOL_WORDS.items() if any(w in low for w in words)}


def test_every_consumer_covers_every_class() -> None:
    names = tuple(s.name for s in SPECS)
    assert bottlenecks.CLASSES == names == tuple(REGISTRY) == tuple(MAIN_METRIC)
    assert [k.value for k in bottlenecks.Klass] == list(names)
    assert str(bottlenecks.Klass.GIL_CONTENTION) == "gil_contention"
    assert set(TOOL_WORDS) == set(names)  # the adapter once lacked gil_contention, stage_imbalance
    assert set(M.CAUSE_OF) <= set(names) and {r.klass for r in E.RULES} <= set(names)
    assert set(load_thresholds().main_metric) == set(names)
    for name in names:
        assert hasattr(load_thresholds(), name)  # a threshold section per class


#: Classes whose detector is a skeleton (not judged on any report yet): none today; a class
#: added before its detector goes here.
SKELETONS: set[str] = set()


def test_main_metric_is_what_each_detector_reports() -> None:
    """On real exports (a GPU input stall, a CPU pipeline), each judged finding carries the
    metric its spec names as the main one; a skeleton detector judges nothing and says so."""
    seen: set[str] = set()
    for fixture in ("gpu_nsys2025_sync_loading", "cpu_nsys2022_pipeline_imbalance_baseline"):
        with open_trace(sqlite_fixture(fixture)) as trace:
            for f in diagnose(trace):
                if f.judged:
                    assert MAIN_METRIC[f.klass] in f.metrics, (fixture, f.klass, f.metrics)
                    seen.add(f.klass)
                elif f.klass in SKELETONS:
                    assert "not written yet" in f.reason, (fixture, f.klass, f.reason)
    assert seen == set(bottlenecks.CLASSES) - SKELETONS


def _titles(help_text: str) -> dict[str, str]:
    return {n: t for n, t in E.parse_rule_list(help_text).items() if E.spec_for(n)}


def test_tool_words_read_nsys_rule_titles_as_the_rules_class() -> None:
    """nsys's own words for its rules (the 2025.3 help text, committed, and 2022.4's from the
    installed nsys) flag exactly the class the expert-rule mapping files the rule under."""
    texts = [(DATA / "nsys2025_analyze_help_rules.txt").read_text(encoding="utf-8")]
    proc = subprocess.run(
        ["nsys", "analyze", "--help-rules"], capture_output=True, text=True, check=False
    )
    if "--" in proc.stdout + proc.stderr:
        texts.append(proc.stdout + proc.stderr)
    titles = {n: t for text in texts for n, t in _titles(text).items()}
    assert len(titles) >= len(E.RULES)  # every mapped rule under one spelling at least
    for name, title in titles.items():
        assert _flagged(title) == {E.spec_for(name).klass}, (name, title)  # type: ignore[union-attr]


def test_tool_words_name_the_gil_and_pipeline_classes() -> None:
    # nsys's GIL trace names its wait ranges as the gil_contention detector reads them
    for wait in load_thresholds().gil_contention.wait_ranges:
        assert "gil_contention" in _flagged(f"thread 12: {wait} 4.8 ms")
    for text in ("Global Interpreter Lock contention", "GIL contention: 30% of samples"):
        assert _flagged(text) == {"gil_contention"}
    for text in ("pipeline bubble of 41%", "stage imbalance across ranks", "rank 3 is a straggler"):
        assert _flagged(text) == {"stage_imbalance"}
    assert _flagged("vigilant fragile agile") == set()  # no bare 'gil'


def test_specs_check_themselves() -> None:
    base = SPECS[0]
    with pytest.raises(ClassSpecError, match="lower-case"):
        ClassSpec(**{**vars(base), "tool_words": ("GIL",)})
    with pytest.raises(ClassSpecError, match="module:function"):
        ClassSpec(**{**vars(base), "detector": "analysis.detect.data_stall"})
    with pytest.raises(ClassSpecError, match="specified twice"):
        check_specs([*SPECS, base])
    rule = NsysRule(names=("gpu-starv", "gpu_gaps"), flags="idle")
    with pytest.raises(ClassSpecError, match="gpu-starv stands for both data_stall and"):
        check_specs([*SPECS, ClassSpec(**{**vars(SPECS[1]), "name": "x", "nsys_rules": (rule,)})])


# --- a new class is one entry: a fresh interpreter with a throwaway spec ----------------------------

_PRELUDE = """
import dataclasses, importlib, sys, types
import bottlenecks, bottlenecks.classes as BC

detector = types.ModuleType("throwaway_detector")
sys.modules["throwaway_detector"] = detector
BUILT_IN = BC.SPECS

def add(**changes):
    spec = BC.ClassSpec(
        name="throwaway", main_metric="throwaway_share", means="a class made up by a test",
        tool_words=("throwaway trouble",), detector="throwaway_detector:detect",
        thresholds="data_stall", replay_cause="data",
        nsys_rules=(BC.NsysRule(names=("throw-away", "throw_away"), flags="nothing real"),),
    )
    BC.SPECS = (*BUILT_IN, dataclasses.replace(spec, **changes))
    importlib.reload(bottlenecks)  # Klass and CLASSES, derived anew; nothing else imported yet
"""

_SEEN_BY_ALL = """
add()
from analysis.findings import Finding, State

def detect(view, th):
    return Finding("throwaway", State.CLEAR, metrics={"throwaway_share": 0.0}, reason="made up")

detector.detect = detect
detector.KLASS = "throwaway"
import scenarios
from analysis import expert_rules as E
from analysis.detect import REGISTRY, config, diagnose, timemodel
from analysis.trace import open_trace
from harness.judge import score
from harness.report.diagnosis import class_legend
from harness.report.doc import Doc

assert bottlenecks.Klass("throwaway") is bottlenecks.Klass.THROWAWAY
assert bottlenecks.CLASSES[-1] == "throwaway" == scenarios.BOTTLENECK_CLASSES[-1]
assert config.MAIN_METRIC["throwaway"] == "throwaway_share"
assert config.DiagnosisConfig().main_metric["throwaway"] == "throwaway_share"
assert timemodel.CAUSE_OF["throwaway"] == "data"
assert E.spec_for("throw_away").klass == "throwaway" and E.RULES[-1].names == ("throw-away", "throw_away")
assert score.TOOL_WORDS["throwaway"] == ("throwaway trouble",)
assert REGISTRY["throwaway"] is detect
doc = Doc("legend")
class_legend(doc, config.MAIN_METRIC)
assert doc.blocks[-1].items[-1] == ("throwaway", ["a class made up by a test (main metric: throwaway_share)"])
with open_trace(sys.argv[1]) as trace:
    found = {f.klass: f for f in diagnose(trace)}
assert found["throwaway"].reason == "made up", found["throwaway"]
print("seen by all")
"""

_MISSING = """
def imports_detectors():
    try:
        import analysis.detect
    except BC.ClassSpecError as exc:
        return str(exc)
    return "imported"

add(name="throwaway", thresholds="throwaway")
print(imports_detectors())
add(name="throwaway2", detector="analysis.detect.throwaway2:detect")
print(imports_detectors())
"""


def _python(code: str, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_PRELUDE) + code, *args],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_one_spec_entry_reaches_every_consumer() -> None:
    out = _python(_SEEN_BY_ALL, str(sqlite_fixture("cpu_nsys2022_sync_loading")))
    assert out.strip() == "seen by all"


def test_a_class_without_its_section_or_detector_fails_naming_it() -> None:
    section, detector = _python(_MISSING).strip().splitlines()
    assert "class throwaway:" in section and "diagnosis.throwaway" in section
    assert "ClassSpec.thresholds" in section
    assert "class throwaway2:" in detector and "no module analysis.detect.throwaway2" in detector
