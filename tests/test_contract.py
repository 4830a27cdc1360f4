"""Every scenario honours the contract (TorchBench-style: generated per scenario x variant)."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

import scenarios
from scenarios import BOTTLENECK_CLASSES, Scenario, ScenarioImportError, Size

FOUND = scenarios.discover()


def test_discovery_finds_every_module():
    assert sorted(FOUND) == scenarios.shipped_names()
    assert FOUND, "no scenarios shipped"


@pytest.mark.parametrize("name", sorted(FOUND))
def test_scenario_declares_everything(name):
    scen: Scenario = FOUND[name]
    assert scen.bottleneck in BOTTLENECK_CLASSES
    assert scen.title and scen.expected_diagnosis
    for text in (scen.teaching.symptom, scen.teaching.cause, scen.teaching.fix):
        assert len(text) > 40, "teaching text must say something"
    kinds = [v.kind for v in scen.variants]
    assert kinds[0] == "baseline" and "fix" in kinds
    assert "ideal" in kinds or len(scen.limit_note) > 20
    cfg = scen.default_config()
    assert scen.severity.low <= cfg.severity <= scen.severity.high
    assert scen.severity.why_default
    for size_name in ("smoke", "full"):
        size = cfg.size(size_name)
        assert isinstance(size, Size) and size.steps >= 1
    # smoke must be smaller than full in total steps: it runs on CI's CPU
    assert cfg.smoke.steps + cfg.smoke.warmup_steps <= cfg.full.steps + cfg.full.warmup_steps


def _documented_fields(klass: type) -> set[str]:
    """Field names followed by a string literal in the class body (torchtitan-style docs)."""
    import ast
    import inspect
    import textwrap

    body = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0].body
    out = set()
    for stmt, nxt in itertools.pairwise(body):
        if (
            isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            out.add(stmt.target.id)
    return out


@pytest.mark.parametrize("name", sorted(FOUND))
def test_config_fields_are_documented(name):
    cls = FOUND[name].config_cls
    for klass in (cls, type(cls().smoke)):
        documented: set[str] = set()
        for k in klass.__mro__:
            if dataclasses.is_dataclass(k):
                documented |= _documented_fields(k)
        missing = [f.name for f in dataclasses.fields(klass) if f.name not in documented]
        assert not missing, f"{klass.__name__} fields without a docstring: {missing}"


def test_broken_module_is_an_error_not_a_skip(tmp_path, monkeypatch):
    pkg = tmp_path / "brokenpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "broken.py").write_text("raise ImportError('missing dependency xyz')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ScenarioImportError, match=r"brokenpkg\.broken.*missing dependency xyz"):
        scenarios.discover(["brokenpkg.broken"])


def test_module_without_symbol_is_an_error(tmp_path, monkeypatch):
    (tmp_path / "nosymbol.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ScenarioImportError, match="must export SCENARIO"):
        scenarios.discover(["nosymbol"])
