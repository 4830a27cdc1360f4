"""The import graph (issue 13.3): ``bottlenecks``, ``scenarios`` and ``analysis`` stand without
``harness``, so a scenario or a detector can be used (and tested) without the runner."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FREE_OF_HARNESS = ("bottlenecks", "scenarios", "analysis")

_BLOCKED = r"""
import importlib.abc, pkgutil, sys

class NoHarness(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "harness" or name.startswith("harness."):
            raise ImportError(f"{name} is blocked: this package must not need the harness")
        return None

sys.meta_path.insert(0, NoHarness())
import bottlenecks, scenarios, analysis, analysis.detect
found = scenarios.discover() if hasattr(scenarios, "discover") else {}
for info in pkgutil.walk_packages(scenarios.__path__, "scenarios."):
    __import__(info.name)
for info in pkgutil.walk_packages(analysis.__path__, "analysis."):
    __import__(info.name)
assert not any(m == "harness" or m.startswith("harness.") for m in sys.modules), sorted(
    m for m in sys.modules if m.startswith("harness")
)
print("ok", len(found))
"""


def test_packages_import_with_harness_blocked():
    proc = subprocess.run(
        [sys.executable, "-c", _BLOCKED],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("ok")


def _harness_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found += [
            f"{path.relative_to(REPO)}:{node.lineno} imports {n}"
            for n in names
            if n == "harness" or n.startswith("harness.")
        ]
    return found


def test_no_module_outside_the_harness_imports_it():
    offenders = [
        hit
        for package in FREE_OF_HARNESS
        for path in sorted((REPO / package).rglob("*.py"))
        for hit in _harness_imports(path)
    ]
    assert offenders == []


def test_the_scan_finds_a_harness_import(tmp_path):
    """The scanner itself can fail: it sees an import of the harness where there is one."""
    probe = REPO / "tests" / "_probe_imports.py"
    probe.write_text("from harness.core.runfolder import Status\nimport harness.core.signals\n")
    try:
        assert len(_harness_imports(probe)) == 2
    finally:
        probe.unlink()
