"""The import graph (issue 13.3): ``bottlenecks``, ``scenarios`` and ``analysis`` stand without
``harness``, so a scenario or a detector can be used (and tested) without the runner."""

from __future__ import annotations

import ast
import subprocess
import sys
from itertools import pairwise
from pathlib import Path

import pytest

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


# --- one-way imports and module size (analysis, harness) ---------------------------------------

#: Packages whose import graph must have no cycle and whose modules must stay readable.
LAYERED = ("analysis", "harness")
#: Most lines in one module: past it a module holds several jobs and is split by job.
MAX_LINES = 700
#: harness/'s layers, top down: a sub-package imports only those below it (the CLI, harness/__main__,
#: sits above them all). Their jobs: docs/architecture.md, "Packages".
HARNESS_LAYERS: dict[str, set[str]] = {
    "harness.execution": {"harness.tools", "harness.judge", "harness.report", "harness.core"},
    "harness.tools": {"harness.judge", "harness.core"},
    "harness.judge": {"harness.core"},
    "harness.report": {"harness.core"},
    "harness.core": set(),
}


def _modules(packages: tuple[str, ...], root: Path = REPO) -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, is a package's __init__) for every module of ``packages``."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _absolute(module: str | None, level: int, importer: str, is_package: bool) -> str:
    """The absolute name of ``from <level dots><module> import ...`` written in ``importer``."""
    if level == 0:
        return module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, module] if module else base)


def _import_graph(modules: dict[str, tuple[Path, bool]]) -> dict[str, dict[str, int]]:
    """module -> {module it imports: line}, over every import statement of the file (inside
    functions and ``if TYPE_CHECKING`` too), relative ones resolved. ``from p import x`` is an
    edge to ``p.x`` where that is a module, else to ``p``; the parent packages Python also runs
    on an import are not edges (every submodule would form a cycle with its ``__init__``)."""
    graph: dict[str, dict[str, int]] = {}
    for name, (path, is_package) in modules.items():
        edges: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(node.module, node.level, name, is_package)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                           for a in node.names]  # fmt: skip
            else:
                continue
            for target in targets:
                if target in modules and target != name:
                    edges.setdefault(target, node.lineno)
        graph[name] = edges
    return graph


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle (a path that returns to its first module) per back edge a depth-first walk
    meets; [] when the imports go one way."""
    state: dict[str, int] = {}  # 1: on the walk's stack, 2: done
    stack: list[str] = []
    found: list[list[str]] = []

    def walk(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                found.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                walk(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            walk(node)
    return found


def _describe(cycle: list[str], graph: dict[str, dict[str, int]]) -> str:
    return " -> ".join(f"{a} (line {graph[a][b]})" for a, b in pairwise(cycle)) + f" -> {cycle[-1]}"


def test_no_import_cycles_in_analysis_and_harness():
    """Imports go one way: a circle makes import order matter and hides a missing layer."""
    graph = _import_graph(_modules(LAYERED))
    assert len(graph) > 40  # the scan saw both packages
    cycles = _cycles(graph)
    assert cycles == [], "import cycles:\n" + "\n".join(_describe(c, graph) for c in cycles)


def test_the_cycle_scan_finds_a_cycle(tmp_path: Path):
    """The scanner itself can fail: it sees a circle through a relative and a function-level
    import, and none where a package's modules only import their __init__'s siblings."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from pkg import a\n")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..a import x\n")
    (pkg / "c.py").write_text("import pkg.sub\n")
    graph = _import_graph(_modules(("pkg",), tmp_path))
    assert graph["pkg.c"] == {"pkg.sub": 1}
    assert _cycles(graph) == [["pkg.a", "pkg.sub.b", "pkg.a"]]


@pytest.mark.parametrize("package", LAYERED)
def test_no_module_over_the_line_limit(package: str):
    """A module over MAX_LINES does several jobs; split it by job (a facade may keep the
    import surface)."""
    long = {
        str(path.relative_to(REPO)): n
        for path in sorted((REPO / package).rglob("*.py"))
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}


def _layer(module: str) -> str | None:
    return next((layer for layer in HARNESS_LAYERS if module.startswith(layer + ".")), None)


def test_harness_imports_only_go_down():
    """execution may use judge, report and core; judge and report only core; core nothing of
    harness's; and analysis never imports harness (a report reader needs no runner)."""
    graph = _import_graph(_modules(("analysis", "harness")))
    up = []
    for module, edges in graph.items():
        mine = _layer(module)
        for target, line in edges.items():
            if module.startswith("analysis") and target.startswith("harness"):
                up.append(f"{module} (line {line}) -> {target}")
            theirs = _layer(target)
            if mine and theirs and theirs != mine and theirs not in HARNESS_LAYERS[mine]:
                up.append(f"{module} (line {line}) -> {target}")
    assert up == [], "imports that go up or sideways:\n" + "\n".join(up)
    assert sum(1 for m in graph if m.count(".") == 1 and m.startswith("harness.")) <= 12
