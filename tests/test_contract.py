"""Every scenario honours the contract (TorchBench-style: generated per scenario x variant),
and the smallest example in ADDING_SCENARIOS.md is a scenario that honours it and runs."""

from __future__ import annotations

import dataclasses
import importlib
import itertools
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pytest

import scenarios
from scenarios import (
    BOTTLENECK_CLASSES,
    Scenario,
    ScenarioConfig,
    ScenarioImportError,
    Severity,
    Size,
    Teaching,
)
from tests.conftest import REPO, only_run_dir, smoke_args

FOUND = scenarios.discover()

#: Shortest teaching text (symptom, cause, fix) that can say something.
MIN_TEACHING_CHARS = 41


def contract_problems(scen: Scenario) -> list[str]:
    """What ``scen`` lacks, one message per gap, each naming the missing piece.

    ``Scenario`` itself refuses a missing field (TypeError naming it), an unknown bottleneck
    class and a bad variant list; this checks what it cannot: empty teaching text, a severity
    knob without meaning, range or reason, missing smoke/full sizes, an empty expected diagnosis.
    """
    problems: list[str] = []
    # expected class: the bottleneck the baseline injects, and what its export must show
    if scen.bottleneck not in BOTTLENECK_CLASSES:
        problems.append(
            f"expected class: bottleneck={scen.bottleneck!r} is not one of {BOTTLENECK_CLASSES}"
        )
    if not (scen.expected_diagnosis or "").strip():
        problems.append(
            "expected class: expected_diagnosis is empty (what the nsys export must show on the "
            "baseline and not on the fixes)"
        )
    if not (scen.title or "").strip():
        problems.append("title is empty")
    # teaching text
    if not isinstance(scen.teaching, Teaching):
        problems.append(
            "teaching text is missing: teaching=Teaching(symptom=..., cause=..., fix=...)"
        )
    else:
        for part in ("symptom", "cause", "fix"):
            text = (getattr(scen.teaching, part) or "").strip()
            if len(text) < MIN_TEACHING_CHARS:
                problems.append(
                    f"teaching text: teaching.{part} is empty or too short ({len(text)} chars, "
                    f"at least {MIN_TEACHING_CHARS})"
                )
    # severity knob
    sev = scen.severity
    if not isinstance(sev, Severity):
        problems.append(
            "severity knob is missing: severity=Severity(meaning, unit, low, high, ...)"
        )
    else:
        for part in ("meaning", "unit", "why_default"):
            if not (getattr(sev, part) or "").strip():
                problems.append(f"severity knob: severity.{part} is empty")
        if not sev.low <= sev.high:
            problems.append(f"severity knob: low {sev.low} is above high {sev.high}")
    # sizes: smoke runs on CI's CPU, full on the GPU
    try:
        cfg = scen.default_config()
    except Exception as exc:  # a default out of range fails in __post_init__
        problems.append(f"config: {scen.config_cls.__name__}() fails: {exc}")
        return problems
    sizes: dict[str, Size] = {}
    for size_name in ("smoke", "full"):
        size = getattr(cfg, size_name, None)
        if not isinstance(size, Size):
            problems.append(
                f"{size_name} size is missing: {scen.config_cls.__name__}.{size_name} must be a "
                f"Size (got {type(size).__name__})"
            )
        elif size.steps < 1:
            problems.append(f"{size_name} size: steps must be >= 1, got {size.steps}")
        else:
            sizes[size_name] = size
    if len(sizes) == 2:
        smoke, full = sizes["smoke"], sizes["full"]
        if smoke.steps + smoke.warmup_steps > full.steps + full.warmup_steps:
            problems.append("smoke size: more steps than full (smoke runs on CI's CPU)")
    return problems


def test_discovery_finds_every_module():
    assert sorted(FOUND) == scenarios.shipped_names()
    assert FOUND, "no scenarios shipped"


@pytest.mark.parametrize("name", sorted(FOUND))
def test_scenario_declares_everything(name):
    scen: Scenario = FOUND[name]
    assert contract_problems(scen) == []
    kinds = [v.kind for v in scen.variants]
    assert kinds[0] == "baseline" and "fix" in kinds
    assert "ideal" in kinds or len(scen.limit_note) > 20


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


def undocumented_fields(klass: type) -> list[str]:
    """Fields of a dataclass (inherited ones included) without a docstring under them."""
    documented: set[str] = set()
    for k in klass.__mro__:
        if dataclasses.is_dataclass(k):
            documented |= _documented_fields(k)
    return [f.name for f in dataclasses.fields(klass) if f.name not in documented]


@pytest.mark.parametrize("name", sorted(FOUND))
def test_config_fields_are_documented(name):
    cls = FOUND[name].config_cls
    for klass in (cls, type(cls().smoke)):
        missing = undocumented_fields(klass)
        assert not missing, f"{klass.__name__} fields without a docstring: {missing}"


def test_broken_module_is_an_error_not_a_skip(tmp_path, monkeypatch):
    pkg = tmp_path / "brokenpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "broken.py").write_text("raise ImportError('missing dependency xyz')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ScenarioImportError, match=r"brokenpkg\.broken.*missing dependency xyz"):
        scenarios.discover(["brokenpkg.broken"])


def test_build_naming_a_missing_module_is_an_error_at_discovery(tmp_path, monkeypatch):
    """A typo in ``build`` is found where the scenarios are discovered (without importing the
    workload module), not in the first worker."""
    name = write_example(tmp_path)
    init = tmp_path / name / "__init__.py"
    init.write_text(init.read_text().replace(".workload:build", ".workloads:build"))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.raises(ScenarioImportError, match=f"no module '{name}.workloads'"):
            scenarios.discover([name])
    finally:
        sys.modules.pop(name, None)


@pytest.mark.parametrize("name", sorted(FOUND))
def test_build_names_a_function_of_a_workload_module(name):
    """Shipped scenarios name their build (the harness's process reads no torch) and the name
    resolves to a callable in the package's ``workload`` module."""
    scen = FOUND[name]
    assert scen.build == f"scenarios.{name}.workload:build"
    assert callable(scen.builder())


def test_build_that_is_not_a_name_is_refused(broken):
    with pytest.raises(ValueError, match=r"must name 'package\.module:function'"):
        broken(build="scenarios.kernel_flood.workload")
    with pytest.raises(ImportError, match="cannot be loaded: AttributeError"):
        broken(build="scenarios.kernel_flood.workload:no_such_build").builder()


def test_a_variants_own_removal_names_a_variant(broken):
    """``Variant.removed_by``: another variant (timed beside it) or ``limit``; anything else is
    refused by name, and :meth:`Scenario.removal_for` falls back to the scenario's."""
    scen = broken()
    base, *rest = scen.variants
    other = rest[0].name
    fixed = broken(variants=(dataclasses.replace(base, removed_by=other), *rest))
    assert fixed.removal_for(base.name) == other and other in fixed.removals
    assert fixed.removal_for(rest[0].name) == scen.removed_by
    with pytest.raises(ValueError, match=r"removed_by='nope' is not a variant"):
        broken(variants=(dataclasses.replace(base, removed_by="nope"), *rest))


def test_module_without_symbol_is_an_error(tmp_path, monkeypatch):
    (tmp_path / "nosymbol.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ScenarioImportError, match="must export SCENARIO"):
        scenarios.discover(["nosymbol"])


# --- ADDING_SCENARIOS.md: its smallest complete example is a working scenario ----------------

ADDING = REPO / "ADDING_SCENARIOS.md"


def example_sources() -> tuple[str, str, str, str]:
    """(name, package ``__init__``, workload module, YAML file) of the smallest complete
    example in ADDING_SCENARIOS.md."""
    text = ADDING.read_text()
    _, _, section = text.partition("## The smallest complete example")
    block = r"`scenarios/(\w+)/{}\.py`[^\n]*:\s*```python\n(.*?)```"
    init = re.search(block.format("__init__"), section, re.S)
    work = re.search(block.format("workload"), section, re.S)
    yml = re.search(r"`conf/scenario/(\w+)\.yaml`:\s*```yaml\n(.*?)```", section, re.S)
    assert init, "ADDING_SCENARIOS.md: no `scenarios/<name>/__init__.py` block in the example"
    assert work, "ADDING_SCENARIOS.md: no `scenarios/<name>/workload.py` block in the example"
    assert yml, "ADDING_SCENARIOS.md: no `conf/scenario/<name>.yaml` yaml block in the example"
    names = {init.group(1), work.group(1), yml.group(1)}
    assert len(names) == 1, f"the example's files name different scenarios: {names}"
    return init.group(1), init.group(2), work.group(2), yml.group(2)


@dataclass
class Example:
    name: str
    folder: Path
    """Holds the package ``<name>/``; put it on PYTHONPATH for the harness."""
    module: object
    yaml: str

    @property
    def scenario(self) -> Scenario:
        return self.module.SCENARIO  # type: ignore[attr-defined]


def write_example(folder: Path) -> str:
    """The example's package written under ``folder``; returns its name."""
    name, init, workload, _ = example_sources()
    (folder / name).mkdir()
    (folder / name / "__init__.py").write_text(init)
    (folder / name / "workload.py").write_text(workload)
    return name


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """The example package from ADDING_SCENARIOS.md, written out and imported as ``<name>``."""
    folder = tmp_path_factory.mktemp("example")
    name = write_example(folder)
    sys.path.insert(0, str(folder))
    try:
        yield Example(name, folder, importlib.import_module(name), example_sources()[3])
    finally:
        sys.path.remove(str(folder))
        for mod in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
            sys.modules.pop(mod)


@pytest.fixture
def broken(example):
    """Variants of the example built with ``dataclasses.replace``; re-binds its schema afterwards
    (building a Scenario points its config class at it)."""
    yield lambda **changes: dataclasses.replace(example.scenario, **changes)
    example.scenario.config_cls._scenario = example.scenario


def test_example_honours_the_contract(example):
    scen = example.scenario
    assert scen.name == example.name
    assert contract_problems(scen) == []
    assert scen.variants[0].kind == "baseline"
    for klass in (scen.config_cls, type(scen.default_config().smoke)):
        assert undocumented_fields(klass) == [], klass.__name__
    # the extra-scenario mechanism finds it beside the shipped ones
    found = scenarios.discover([example.name])
    assert found[example.name] is scen and set(FOUND) < set(found)


@dataclass(kw_only=True)
class _NoSmoke(ScenarioConfig):
    """A schema that forgot its smoke size."""

    severity: float = 1
    """Host reads per step."""
    full: Size = field(default_factory=Size)
    """GPU size."""


@pytest.mark.parametrize(
    ("what", "needles"),
    [
        ("teaching", ["teaching.symptom", "teaching.cause", "teaching.fix"]),
        ("severity", ["severity.meaning", "severity.unit", "severity.why_default"]),
        ("smoke", ["smoke size is missing: _NoSmoke.smoke"]),
        ("expected", ["expected_diagnosis is empty"]),
    ],
)
def test_empty_part_of_the_contract_is_named(broken, what, needles):
    changes = {
        "teaching": {"teaching": Teaching(symptom="", cause="n/a", fix=" ")},
        "severity": {
            "severity": Severity(meaning="", unit="", low=0, high=10, why_default=""),
        },
        "smoke": {"config_cls": _NoSmoke},
        "expected": {"expected_diagnosis": ""},
    }[what]
    problems = contract_problems(broken(**changes))
    assert problems, f"a scenario with an empty {what} passed the contract"
    text = "\n".join(problems)
    for needle in needles:
        assert needle in text
    assert len(problems) == len(needles), text  # nothing else is reported


@pytest.mark.parametrize("missing", ["teaching", "severity", "bottleneck"])
def test_missing_part_of_the_contract_is_refused_by_name(example, missing):
    scen = example.scenario
    kwargs = {f.name: getattr(scen, f.name) for f in dataclasses.fields(scen)}
    del kwargs[missing]
    with pytest.raises(TypeError, match=f"'{missing}'"):
        Scenario(**kwargs)


@pytest.mark.parametrize("bottleneck", ["", "slow_gpu"])
def test_unknown_expected_class_is_refused_by_name(broken, bottleneck):
    with pytest.raises(ValueError, match=f"unknown bottleneck class '{bottleneck}'"):
        broken(bottleneck=bottleneck)


def test_example_yaml_composes_onto_its_schema(example, tmp_path):
    """The example's YAML, dropped into a copy of conf/, selects the scenario on its schema."""
    import shutil

    from hydra import compose, initialize_config_dir
    from hydra.core.config_store import ConfigStore

    from harness.core.config import config_dir, register_configs, to_suite

    conf = tmp_path / "conf"
    shutil.copytree(config_dir(), conf)
    (conf / "scenario" / f"{example.name}.yaml").write_text(example.yaml)
    register_configs(FOUND)  # the shipped schemas, as the CLI does
    # only the example's schema: its config-group option must come from the YAML above
    ConfigStore.instance().store(
        group="schema/scenario", name=example.name, node=example.scenario.config_cls
    )
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        cfg = compose("config", overrides=[f"+scenario={example.name}", "size=smoke"])
    suite = to_suite(cfg, {**FOUND, example.name: example.scenario})
    sub = suite.scenario[example.name]
    assert list(suite.scenario) == [example.name]
    assert isinstance(sub, example.scenario.config_cls)
    assert sub.severity == example.scenario.default_config().severity


@pytest.mark.slow
def test_example_runs_end_to_end_through_the_cli(example, cli, tmp_path, cache_dir):
    """The example, loaded through BOTTLENECK_SCENARIO_MODULES, runs every variant at smoke size."""
    env = {
        "BOTTLENECK_SCENARIO_MODULES": example.name,
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(example.folder), os.environ.get("PYTHONPATH", "")) if p
        ),
    }
    # the example builds no optimizer: its fork server skips the torch._dynamo preload
    args = smoke_args(example.name, tmp_path, f"harness.cache_dir={cache_dir}")
    proc = cli([*args, "harness.fork_preload=[]"], env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = pd.read_csv(only_run_dir(tmp_path) / "runs.csv").set_index("variant")
    assert list(runs.index) == example.scenario.variant_names
    assert (runs["status"] == "ok").all(), runs["error"].to_dict()


# --- the measured-window contract ----------------------------------------------------------------

#: (scenario, variant) of every shipped variant that runs on this machine.
WINDOW_CASES = [
    (name, v.name)
    for name in sorted(FOUND)
    for v in FOUND[name].variants
    if not v.needs_gpu or __import__("torch").cuda.is_available()
]


#: Measured steps of each window-contract run. Any window of at least one step tells a metric
#: counted from ``start_window()`` from one counted by step index (the latter is zero or missing
#: in the run that plans 10**6 warm-up steps); 3 instead of the smoke sizes' 6-12 gives every
#: shipped variant the same non-zero metrics as its full smoke window, in half the time.
WINDOW_STEPS = 3

#: Smaller smoke sizes for the contract runs where the size only scales the work of a step:
#: pipeline_imbalance's two stages run in this one process, ~0.45 s a step at 4096 rows (its
#: three variants were a third of this file's time); a quarter of the rows (still a multiple
#: of both micro-batch counts) runs the same steps and counts the same metrics.
WINDOW_SIZES = {"pipeline_imbalance": {"rows": 1024}}


def _worker_metrics(name: str, variant: str, warmup_steps: int, cache: Path) -> dict:
    """The worker's result metrics for one smoke-size run of ``WINDOW_STEPS`` measured steps
    whose warm-up its time budget ends after MIN_WARMUP_STEPS steps (max_warmup_s=0), with the
    size asking for ``warmup_steps``."""
    import torch

    from harness.execution.worker import MIN_WARMUP_STEPS, WorkerSpec, run

    torch._dynamo.reset()  # compile afresh, as a new worker process would
    threads = torch.get_num_threads()
    group = FOUND[name].world_size > 1  # DDP wants a process group, even of one process
    if group:
        import torch.distributed as dist

        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    spec = WorkerSpec(
        scenario=name,
        variant=variant,
        phase="timing-1",
        size="smoke",
        device="cpu",
        config={
            "smoke": {
                "warmup_steps": warmup_steps,
                "steps": WINDOW_STEPS,
                **WINDOW_SIZES.get(name, {}),
            }
        },
        seed=0,
        cache_dir=str(cache),
        out_dir=str(cache / "unused"),
        max_warmup_s=0.0,
    )
    try:
        result = run(spec)
    finally:
        torch.set_num_threads(threads)  # the worker sets it for its own process
        if group:
            dist.destroy_process_group()
    assert result["warmup_steps"] == MIN_WARMUP_STEPS  # the budget ended the warm-up
    assert result["steps"] == WINDOW_STEPS
    return result["metrics"]


#: Metrics of the one-time set-up, not of the window: the first run compiles into an empty
#: Inductor cache (0 hits), the second finds it filled.
SET_UP_METRICS = {"fxgraph_cache_hits"}


@pytest.mark.parametrize(("name", "variant"), WINDOW_CASES)
def test_metrics_count_the_measured_window_not_the_step_index(name, variant, cache_dir):
    """A scenario counts its per-window metrics (syncs_per_step, host_step_ms, h2d_gbps, ...)
    from the worker's ``start_window()`` hook. The worker ends the warm-up early under its time
    budget (harness.max_warmup_s), so ``index >= size.warmup_steps`` then marks other steps than
    the ones ``step_ms`` covers. Two runs that execute the same steps (4 warm-up, then the
    window) but whose sizes ask for 4 and for 10**6 warm-up steps must report the same metrics,
    each one zero or missing in both or in neither."""
    short = _worker_metrics(name, variant, 4, cache_dir)
    planned_long = _worker_metrics(name, variant, 10**6, cache_dir)
    assert sorted(planned_long) == sorted(short), "metrics appear or vanish with warmup_steps"
    differ = {
        k: (short[k], planned_long[k])
        for k in short
        if k not in SET_UP_METRICS
        and (short[k] == 0 or short[k] != short[k])
        != (planned_long[k] == 0 or planned_long[k] != planned_long[k])
    }
    assert not differ, f"metrics that depend on size.warmup_steps, not on the window: {differ}"
