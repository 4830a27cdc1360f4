"""The house rules that a reader of the product code relies on (issue 48, "Done when"):

- the class vocabulary is spelled once, in ``bottlenecks/``: elsewhere a class name is imported
  (``Klass.HOST_SYNC``, a spec's ``name``), never written as a string, so renaming or adding a
  class cannot leave a stale copy behind;
- product code is not a lab notebook: no measurement dates (they go with the results they
  describe, in ``docs/`` or ``results/reference/<gpu>/README.md``);
- no function is over :data:`MAX_FUNCTION_LINES` lines (past that it does several jobs).

Each scan is also run on a planted offender, so a scanner that sees nothing cannot pass.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from pathlib import Path

from bottlenecks import CLASSES

REPO = Path(__file__).resolve().parents[1]

#: The product packages: what the suite ships and runs.
PRODUCT = ("harness", "analysis", "bottlenecks", "scenarios")
#: Where a class name may not be a string: everything but ``bottlenecks/`` (the vocabulary) and
#: ``tests/`` (which check it), including the scripts and the corpus's programs.
NO_CLASS_LITERALS = ("harness", "analysis", "scenarios", "scripts", "corpus")
#: Most lines in one function or method, ``def`` line to last line.
MAX_FUNCTION_LINES = 80
#: A calendar date as a lab notebook writes one (2026-11-27).
DATE = re.compile(r"20[0-9]{2}-[01][0-9]-[0-3][0-9]")


def _python_files(roots: Iterable[str], base: Path = REPO) -> list[Path]:
    return [p for root in roots for p in sorted((base / root).rglob("*.py"))]


def _text_files(roots: Iterable[str], base: Path = REPO) -> list[Path]:
    """Every file under ``roots`` that ``grep -r`` would read as text (no caches, no binaries)."""
    out = []
    for root in roots:
        for path in sorted((base / root).rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            if b"\0" not in path.read_bytes()[:8192]:
                out.append(path)
    return out


def class_literals(path: Path, names: Iterable[str] = CLASSES) -> list[str]:
    """``file:line: name`` for every string constant equal to a class name: plain strings, dict
    keys, default values, f-string pieces (an f-string's literal parts are constants too)."""
    wanted = set(names)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [
        f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path}:{node.lineno}: "
        f"{node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in wanted
    ]


def long_functions(path: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``file:line name (n lines)`` for every function or method over ``limit`` lines."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [
        f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path}:{node.lineno} "
        f"{node.name} ({n} lines)"
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and (n := node.end_lineno - node.lineno + 1) > limit
    ]


def dated_lines(path: Path) -> list[str]:
    """``file:line: text`` for every line holding a calendar date."""
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    return [f"{path}:{i}: {line.strip()}" for i, line in enumerate(lines, 1) if DATE.search(line)]


# --- the tree ----------------------------------------------------------------------------------


def test_no_class_name_literal_outside_bottlenecks():
    """A class name outside bottlenecks/ and tests/ is imported, never spelled."""
    files = _python_files(NO_CLASS_LITERALS)
    assert len(files) > 100  # the scan saw the packages
    found = [hit for path in files for hit in class_literals(path)]
    assert found == [], "import the name (bottlenecks.Klass, a ClassSpec) instead:\n" + "\n".join(
        found
    )


def test_no_measurement_dates_in_product_code():
    """Measurement history lives in docs/ and the results' READMEs; a docstring says why."""
    files = _text_files(PRODUCT)
    assert len(files) > 100
    found = [hit for path in files for hit in dated_lines(path)]
    assert found == [], "move the measurement to docs/:\n" + "\n".join(found)


def test_no_function_over_80_lines():
    """A function over MAX_FUNCTION_LINES does several jobs: split it into named helpers."""
    files = _python_files(PRODUCT)
    assert len(files) > 100
    found = [hit for path in files for hit in long_functions(path)]
    assert found == [], "\n".join(found)


# --- the scans can fail ------------------------------------------------------------------------


def test_the_scans_find_planted_offenders(tmp_path: Path):
    name = CLASSES[0]
    probe = tmp_path / "probe.py"
    body = "\n".join(f"    x = {i}" for i in range(MAX_FUNCTION_LINES))
    probe.write_text(
        f'"""Measured 2026-11-27 on the probe; {name} in prose is fine."""\n'
        f"A = {name!r}\n"
        f"B = {{{name!r}: 1}}\n"
        f"def f(k={name!r}):\n"
        f"    return f'{name}' + f'{{k}}_share'\n"
        f"def long():\n{body}\n"
        f"def short():\n{body.splitlines()[0]}\n",
        encoding="utf-8",
    )
    assert [h.rsplit(":", 2)[1] for h in class_literals(probe)] == ["2", "3", "4", "5"]
    assert [h.split(" ")[1] for h in long_functions(probe)] == ["long"]
    assert len(dated_lines(probe)) == 1
    assert len(_text_files([tmp_path.name], tmp_path.parent)) >= 1
