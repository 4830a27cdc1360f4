"""The run config's keys as a user types them, checked before Hydra sees them.

Hydra answers a mistyped key (``harness.repeat=3``) with a multi-line message that suggests
appending it (``+harness.repeat``) and exits 1. The harness checks every ``KEY=VALUE`` first,
against the schemas' own fields (:func:`schema_keys`, with each field's docstring), and answers
in one line naming the nearest valid key; a value Hydra cannot merge, an override it cannot
parse or a config group option that does not exist also comes back as one line. The caller
prints it and exits 2, like the project's other usage errors. :func:`run_help` is
``harness run --help``, built from the same keys.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import difflib
import inspect
import io
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import scenarios
from harness.core.config import ALL, SIZES, SuiteConfig, UsageError, config_dir

__all__ = ["Key", "check_overrides", "field_docs", "run_help", "schema_keys"]

#: Sections of the run config, in the order ``run --help`` lists them.
SECTIONS = ("size", "harness", "nsys", "kineto", "tools", "dist", "diagnosis", "scenario")


@dataclass(frozen=True)
class Key:
    """One settable key of the run config."""

    path: str
    """Dotted, as typed on the command line (``harness.repeats``)."""
    default: Any
    """The schema's default."""
    doc: str
    """The field's docstring, whitespace collapsed ("" where it has none)."""
    open: bool = False
    """A mapping: any sub-key under it is valid too (``diagnosis.main_metric.data_stall``)."""


@cache
def field_docs(cls: type) -> dict[str, str]:
    """Field name -> the docstring written under it in the class body (base classes too)."""
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for field, doc in zip(body, [*body[1:], None], strict=True):
            if (
                isinstance(field, ast.AnnAssign)
                and isinstance(field.target, ast.Name)
                and isinstance(doc, ast.Expr)
                and isinstance(doc.value, ast.Constant)
                and isinstance(doc.value.value, str)
            ):
                out[field.target.id] = " ".join(doc.value.value.split())
    return out


def _walk(obj: Any, prefix: str, docs: bool) -> Iterable[Key]:
    """The keys of a dataclass instance, nested dataclasses flattened."""
    texts = field_docs(type(obj)) if docs else {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        path = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            yield from _walk(value, path + ".", docs)
        else:
            yield Key(path, value, texts.get(f.name, ""), open=isinstance(value, dict))


def schema_keys(found: dict[str, scenarios.Scenario], *, docs: bool = True) -> list[Key]:
    """Every settable key: the suite's sections, then ``scenario.<name>.*`` of each scenario.
    ``docs=False`` leaves ``Key.doc`` empty: reading the docstrings parses every schema's source
    (about a second), which only ``run --help`` needs."""
    keys = [k for k in _walk(SuiteConfig(), "", docs) if k.path != "scenario"]
    for name, scen in sorted(found.items()):
        keys += _walk(scen.config_cls(), f"scenario.{name}.", docs)
    return keys


# --- the check ---------------------------------------------------------------------------------


def _selected(parsed: Sequence[Any], found: dict[str, scenarios.Scenario]) -> set[str]:
    """Scenario names that ``+scenario=...`` selects."""
    out: set[str] = set()
    for ov in parsed:
        if ov.key_or_group == "scenario":
            names = ov.value() if isinstance(ov.value(), list) else [ov.value()]
            for n in map(str, names):
                out |= set(scenarios.shipped_names()) & set(found) if n == ALL else {n}
    return out


def _known(path: str, keys: Sequence[Key]) -> bool:
    return any(path == k.path or (k.open and path.startswith(k.path + ".")) for k in keys)


def _unknown_key(path: str, keys: Sequence[Key], selected: set[str]) -> str | None:
    """Why ``path`` is not a key of this run (None when it is)."""
    head = path.split(".")
    if _known(path, keys):
        if head[0] == "scenario" and len(head) > 1 and head[1] not in selected:
            return f"{path} sets scenario {head[1]}, which is not selected: add +scenario={head[1]}"
        return None
    parent, _, leaf = path.rpartition(".")
    siblings = [k.path.rpartition(".")[2] for k in keys if k.path.rpartition(".")[0] == parent]
    near = [f"{parent}.{n}" if parent else n for n in difflib.get_close_matches(leaf, siblings, 1)]
    near = near or difflib.get_close_matches(path, [k.path for k in keys], n=1, cutoff=0.6)
    if near:
        hint = f"did you mean {near[0]}?"
    else:
        hint = "no key is close to it; the sections are " + ", ".join(SECTIONS)
    if parent and siblings and len(siblings) <= 12:
        hint += f" {parent} takes {', '.join(siblings)}"
    return f"unknown config key {path!r} ({hint}); python -m harness run --help lists every key"


def _group_option(value: Any) -> str | None:
    """Why ``diagnosis=value`` names no thresholds file (None when it does)."""
    options = sorted(p.stem for p in (config_dir() / "diagnosis").glob("*.yaml"))
    if str(value) in options:
        return None
    return f"diagnosis={value}: no such thresholds file; available: {', '.join(options)}"


def _first_lines(exc: BaseException) -> str:
    """Hydra's message (and its cause's) without its hints, on one line."""
    skip = ("Set the environment variable", "To append", "See https://", "full_key", "object_type")
    text = str(exc) + ("\n" + str(exc.__cause__) if exc.__cause__ else "")
    lines = [ln.strip() for ln in text.splitlines()]
    kept = [ln for ln in lines if ln and not ln.startswith(skip) and "reference_type" not in ln]
    return ": ".join(kept[:3]) or type(exc).__name__


def _compose(overrides: list[str]) -> None:
    """Compose the config as the run will (values merged into the schemas), one-line errors."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
            compose("config", overrides=overrides)
    except (HydraException, OmegaConfBaseException) as exc:
        raise UsageError(f"invalid configuration: {_first_lines(exc)}") from None


def _hydra_args(argv: Sequence[str]) -> tuple[list[str], bool] | None:
    """(the overrides, whether it is a multirun) as Hydra's own parser splits ``argv`` from its
    flags (``--cfg job``, ``-m``, ...); None where that parser refuses the flags."""
    from hydra._internal.utils import get_args_parser

    try:
        with contextlib.redirect_stderr(io.StringIO()):
            args = get_args_parser().parse_intermixed_args(list(argv))
    except SystemExit:
        return None
    return list(args.overrides or []), bool(args.multirun)


hydra_args = _hydra_args  # the name harness.core.resume uses


def check_overrides(argv: Sequence[str], found: dict[str, scenarios.Scenario]) -> None:
    """Raise :class:`UsageError` (one line) on the first override of ``argv`` that the run
    would refuse: unparsable, an unknown key (naming the nearest valid one), a scenario key of
    a scenario not selected, a group option that does not exist, or a value the schema cannot
    take. ``hydra.*`` overrides and flags are Hydra's own and pass through; in a multirun
    (``-m``) the values are sweeps, so only the keys are checked."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    split = _hydra_args(argv)
    if split is None:
        return  # flags Hydra itself will refuse, with its usage line
    texts, multirun = split
    parser = OverridesParser.create()
    parsed = []
    for text in texts:
        try:
            parsed += parser.parse_overrides([text])
        except OverrideParseException as exc:
            raise UsageError(f"cannot read the override {text!r}: {_first_lines(exc)}") from None
    keys = schema_keys(found, docs=False)
    selected = _selected(parsed, found)
    mine = [ov for ov in parsed if not ov.key_or_group.startswith("hydra")]
    for ov in mine:
        name = ov.key_or_group
        if name == "scenario" or "/" in name:
            continue  # scenario: check_scenario_overrides names the scenarios; a/b: Hydra's
        if name == "diagnosis":
            why = None if ov.is_sweep_override() else _group_option(ov.value())
        else:
            why = _unknown_key(name, keys, selected)
        if why:
            raise UsageError(why)
    if not multirun:
        _compose([ov.input_line for ov in mine if ov.input_line])


# --- harness run --help ------------------------------------------------------------------------


def _sentence(doc: str) -> str:
    """The first sentence of a docstring."""
    end = doc.find(". ")
    return doc if end < 0 else doc[: end + 1]


def _value(v: Any) -> str:
    return "null" if v is None else str(v).lower() if isinstance(v, bool) else str(v)


def _wrap(text: str, first: str = "", rest: str = "") -> list[str]:
    """``text`` wrapped at 100 columns, with reST's double backticks taken out."""
    text = text.replace("``", "")
    return textwrap.wrap(
        text, 100, initial_indent=first, subsequent_indent=rest, break_on_hyphens=False
    )


def _section(keys: Sequence[Key]) -> list[str]:
    out = []
    for k in keys:
        out.append(f"  {k.path}={_value(k.default)}")
        out += _wrap(
            _sentence(k.doc) or "(see the schema in harness/core/config.py)", " " * 6, " " * 6
        )
    return out


def _selection(found: dict[str, scenarios.Scenario]) -> list[str]:
    pad = " " * 23
    return [
        "selection:",
        *_wrap(f"+scenario=NAME       one scenario: {', '.join(sorted(found))}", "  ", pad),
        "  +scenario=[a,b]      several; +scenario=all: every shipped scenario",
        f"  size=auto            {' | '.join(SIZES)}: auto runs full on a GPU, smoke on the CPU",
        "  diagnosis=default    the detectors' thresholds file, conf/diagnosis/NAME.yaml",
        "",
        "flags (Hydra's):",
        "  --cfg job            print the composed config and run nothing",
        "  -m, --multirun       a sweep: KEY=a,b runs once per value (then a dose-response report)",
        "  --hydra-help         Hydra's own options (launchers, output folders)",
    ]


def run_help(found: dict[str, scenarios.Scenario]) -> str:
    """``python -m harness run --help``: what the command does and every key it takes."""
    keys = schema_keys(found)
    lines = [
        "usage: python -m harness run +scenario=NAME|[a,b]|all [KEY=VALUE ...] [--cfg job] [-m]",
        "",
        *_wrap(
            "Runs every variant of the selected scenarios in its own process: timing rounds, "
            "interleaved across variants, then one run per variant under nsys, exported to "
            "SQLite and read by the detectors. Everything lands in one run folder, "
            "<harness.results_dir>/<utc-time>_<gpu>/, with runs.csv, verdicts.csv, "
            "diagnosis.csv and report.html."
        ),
        "",
        *_selection(found),
    ]
    for section in ("harness", "nsys", "kineto", "tools", "dist"):
        lines += ["", f"{section}.* keys (KEY=VALUE; default after the =):"]
        lines += _section([k for k in keys if k.path.startswith(section + ".")])
    diag = sorted({k.path.split(".")[1] for k in keys if k.path.startswith("diagnosis.")})
    lines += ["", "diagnosis.* keys: the detectors' thresholds, a section per class and more"]
    lines += _wrap(
        f"({', '.join(diag)}); e.g. diagnosis.host_sync.min_saving_share=0.2. "
        "--cfg job prints them all with their values; docs/detectors.md says what each does.",
        "  ",
        "  ",
    )
    lines += ["", "scenario.NAME.* keys, for a selected scenario (python -m harness list gives"]
    lines += ["each severity's meaning and range):"]
    for name in sorted(found):
        prefix = f"scenario.{name}."
        mine = [k.path.removeprefix(prefix) for k in keys if k.path.startswith(prefix)]
        lines += _wrap(f"scenario.{name}: {', '.join(mine)}", "  ", "    ")
    lines += ["", "examples:", "  python -m harness run +scenario=all"]
    lines += ["  python -m harness run +scenario=sync_loading scenario.sync_loading.severity=1024"]
    lines += ["  python -m harness run +scenario=all harness.resume=results/<run folder>"]
    return "\n".join(lines) + "\n"
