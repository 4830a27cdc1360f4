"""What a newcomer reads first: every subcommand's ``--help`` as finished text (whole sentences,
no reST double backticks, a help line for every option), and ``harness list`` in columns."""

from __future__ import annotations

import argparse
import re

import pytest

from harness import __main__ as M
from harness.core.config import discover_scenarios
from harness.core.overrides import run_help, schema_keys
from harness.judge import diagnose, score
from harness.report import cli as report_cli
from harness.report import compare

PARSERS = {
    "list": M.list_parser,
    "diagnose": diagnose.parser,
    "score": score.parser,
    "report": report_cli.parser,
    "compare": compare.parser,
}


def _finished(text: str) -> bool:
    """A description that ends its last sentence (not cut mid-way, as a docstring's first
    line often is)."""
    return text.rstrip().endswith((".", ")"))


@pytest.mark.parametrize("name", list(PARSERS))
def test_argparse_help_is_finished_text(name: str) -> None:
    parser: argparse.ArgumentParser = PARSERS[name]()
    assert parser.prog == f"python -m harness {name}"
    assert parser.description and _finished(parser.description), parser.description
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        assert action.help and len(action.help) > 10, (name, action.dest)
    text = parser.format_help()
    assert "``" not in text


@pytest.mark.parametrize("name", list(PARSERS))
def test_help_exits_0_from_the_command_line(name: str, capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        M.main([name, "--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: python -m harness {name}")


def test_run_help_lists_every_key_with_its_docstring(capsys) -> None:
    assert M.main(["run", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m harness run")
    assert "powered by Hydra" not in out and "``" not in out
    assert max(len(line) for line in out.splitlines()) <= 100
    found = discover_scenarios()
    for key in schema_keys(found):
        if key.path.split(".")[0] in ("harness", "nsys", "dist"):
            assert f"  {key.path}=" in out, key.path
            assert key.doc, f"{key.path} has no docstring in its schema"
    for name in found:
        assert f"scenario.{name}: severity, variants" in out
    assert out == run_help(found)


def test_list_columns_line_up_for_long_variant_names(capsys) -> None:
    """Every summary starts in one column and wraps under it: no line of ``harness list`` is
    wider than a 100-column terminal (30 of its 39 lines were), and no word is lost."""
    assert M.main(["list"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 100
    found = discover_scenarios()
    longest = max((v.name for s in found.values() for v in s.variants), key=len)
    assert len(longest) > 20  # torch_compile_cudagraphs: the name that used to push its row out
    starts = set()
    for name, scen in found.items():
        top = next(i for i, ln in enumerate(lines) if ln.startswith(f"{name}  ["))
        for v in scen.variants:
            head = re.compile(rf"^    {re.escape(v.kind)}\s+{re.escape(v.name)}  +(?=\S)")
            i = next(i for i, ln in enumerate(lines) if i > top and head.match(ln))
            col = head.match(lines[i]).end()
            text = [lines[i][col:]]
            for ln in lines[i + 1 :]:
                if not ln.startswith(" " * col) or ln[col] == " ":
                    break
                text.append(ln[col:])
            assert "".join("".join(text).split()) == "".join(v.summary.split()), v.name
            starts.add(col)
    assert len(starts) == 1, starts  # every summary starts in the same column
