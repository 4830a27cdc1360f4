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

__all__ = ["Key", "check_overrides", "field_docs", "overrides_first", "run_help", "schema_keys"]

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


def _compose(overrides: list[str], found: dict[str, scenarios.Scenario]) -> None:
    """Compose the config as the run will and validate it into its dataclasses (every
    ``__post_init__``), with one-line errors. Hydra's own groups (``hydra/launcher=...``) are
    composed too where an override names them."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import open_dict
    from omegaconf.errors import InterpolationResolutionError, OmegaConfBaseException

    from harness.core.config import to_suite

    own = any(o.lstrip("+~").startswith("hydra") for o in overrides)
    try:
        with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
            cfg = compose("config", overrides=overrides, return_hydra_config=own)
        if own:
            with open_dict(cfg):
                cfg.pop("hydra")
    except (HydraException, OmegaConfBaseException) as exc:
        raise UsageError(f"invalid configuration: {_first_lines(exc)}") from None
    try:
        to_suite(cfg, found)
    except InterpolationResolutionError:
        return  # a value only Hydra's run resolves (${hydra:...}): the run validates it
    except (ValueError, OmegaConfBaseException) as exc:  # __post_init__: names the key
        raise UsageError(f"invalid configuration: {exc}") from None


def _hydra_args(argv: Sequence[str]) -> tuple[list[str], bool] | None:
    """(the overrides, whether it is a multirun) as Hydra's own parser splits ``argv`` from its
    flags (``--cfg job``, ``-m``, ...); None where that parser refuses the flags."""
    try:
        return _split(argv)
    except UsageError:
        return None


def _split(argv: Sequence[str]) -> tuple[list[str], bool]:
    """:func:`_hydra_args`, or a UsageError with Hydra's parser's own complaint, in one line."""
    from hydra._internal.utils import get_args_parser

    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            args = get_args_parser().parse_intermixed_args(list(argv))
    except SystemExit:
        why = [ln for ln in said.getvalue().splitlines() if "error:" in ln]
        text = why[-1].split("error:", 1)[1].strip() if why else "cannot read the flags"
        raise UsageError(
            f"{text} (run takes KEY=VALUE overrides and Hydra's flags: --cfg job, -m, "
            "--hydra-help; run --help lists them)"
        ) from None
    modes = [f for f, on in (("-m", args.multirun), ("--cfg", args.cfg), ("--info", args.info),
                             ("--run", args.run)) if on]  # fmt: skip
    if len(modes) > 1:
        raise UsageError(f"{' and '.join(modes)} cannot be given together (Hydra runs one mode)")
    return list(args.overrides or []), bool(args.multirun)


hydra_args = _hydra_args  # the name harness.core.resume uses


def overrides_first(argv: Sequence[str]) -> list[str]:
    """``argv`` with its overrides before Hydra's flags (``--cfg job size=smoke`` ->
    ``size=smoke --cfg job``): Hydra's own parser reads no override after a flag's value."""
    overrides, _ = _split(argv)
    rest = list(argv)
    for ov in overrides:
        rest.remove(ov)
    return [*overrides, *rest]


def check_overrides(argv: Sequence[str], found: dict[str, scenarios.Scenario]) -> None:
    """Raise :class:`UsageError` (one line) on the first override of ``argv`` that the run
    would refuse: unparsable, an unknown key (naming the nearest valid one), a scenario key of
    a scenario not selected, a group option that does not exist, or a value the schema cannot
    take. ``hydra.*`` overrides and flags are Hydra's own and pass through; in a multirun
    (``-m``) the values are sweeps, so only the keys are checked."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    texts, multirun = _split(argv)
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
        if name == "scenario":
            why = _scenario_add(ov)
        elif "/" in name:
            continue  # a config group path (a/b): composing checks its option
        elif name == "diagnosis":
            why = None if ov.is_sweep_override() else _group_option(ov.value())
        else:
            why = _unknown_key(name, keys, selected)
        if why:
            raise UsageError(why)
    for lines in _each_job(parsed) if multirun else [[ov.input_line for ov in parsed]]:
        _compose([ln for ln in lines if ln], found)


def _scenario_add(ov: Any) -> str | None:
    """Why ``scenario=NAME`` (no ``+``) cannot select: the defaults list has no scenario entry
    for Hydra to change, so it must be added (None when it is)."""
    if ov.input_line and ov.input_line.lstrip().startswith(("+", "~")):
        return None
    value = ov.input_line.partition("=")[2] if ov.input_line else "NAME"
    return (
        f"{ov.input_line}: scenarios are added to the config, with a +: +scenario={value} "
        "(+scenario=[a,b] for several, +scenario=all for every one)"
    )


def _each_job(parsed: Sequence[Any]) -> list[list[str]]:
    """A multirun's overrides once per swept value (each sweep's values in turn, the others at
    their first): every value is checked as its job will compose it, not only the first job."""
    fixed = [ov.input_line for ov in parsed if not ov.is_sweep_override()]
    sweeps = [ov for ov in parsed if ov.is_sweep_override()]
    values = {id(ov): list(ov.sweep_string_iterator()) for ov in sweeps}
    firsts = {
        id(ov): f"{ov.get_key_element()}={values[id(ov)][0]}" for ov in sweeps if values[id(ov)]
    }
    jobs = []
    for ov in sweeps:
        for value in values[id(ov)]:
            others = [line for key, line in firsts.items() if key != id(ov)]
            jobs.append([*fixed, *others, f"{ov.get_key_element()}={value}"])
    return jobs or [fixed]


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
