"""Config composition with Hydra's compose API, for every scenario, and validation errors."""

from __future__ import annotations

import pytest

import scenarios
from harness.core.config import (
    EXTRA_SCENARIOS_ENV,
    UsageError,
    checkout_conf,
    compose,
    config_dir,
)
from scenarios import ScenarioConfig
from tests.conftest import REPO

SHIPPED = scenarios.shipped_names()


def test_all_comes_from_the_scenarios_package(monkeypatch):
    """``+scenario=all`` is expanded from the package, not from a list kept by hand in conf/."""
    assert not (config_dir() / "scenario" / "all.yaml").exists()
    fewer = SHIPPED[1:]
    monkeypatch.setattr(scenarios, "shipped_names", lambda: fewer)
    _, suite = compose(["+scenario=all"])
    assert sorted(suite.scenario) == fewer


def test_all_leaves_out_plugin_scenarios(monkeypatch):
    monkeypatch.setenv(EXTRA_SCENARIOS_ENV, "tests.plugins.faulty")
    _, suite = compose(["+scenario=all"])
    assert sorted(suite.scenario) == SHIPPED
    _, suite = compose(["+scenario=faulty"])
    assert list(suite.scenario) == ["faulty"]


def test_a_checkout_that_is_not_installed_finds_its_conf():
    """Where ``harness.conf`` is not installed (the GPU machine runs the checkout as it is), the
    config comes from the checkout's ``conf/``."""
    assert checkout_conf() == REPO / "conf"
    assert (checkout_conf() / "config.yaml").is_file()


def test_every_shipped_scenario_has_a_yaml():
    for name in SHIPPED:
        assert (config_dir() / "scenario" / f"{name}.yaml").is_file(), name


@pytest.mark.parametrize("name", SHIPPED)
def test_compose_one(name):
    raw, suite = compose([f"+scenario={name}"])
    assert list(suite.scenario) == [name]
    cfg = suite.scenario[name]
    assert isinstance(cfg, ScenarioConfig)
    scen = scenarios.discover()[name]
    assert isinstance(cfg, scen.config_cls)
    assert cfg.severity == scen.config_cls().severity
    assert raw.scenario[name].smoke.steps == cfg.smoke.steps


def test_compose_all_expands_to_every_scenario():
    _, suite = compose(["+scenario=all"])
    assert sorted(suite.scenario) == SHIPPED


def test_compose_list_selects_several():
    _, suite = compose([f"+scenario=[{SHIPPED[0]}]", "size=smoke", "harness.repeats=2"])
    assert list(suite.scenario) == [SHIPPED[0]]
    assert suite.size == "smoke" and suite.harness.repeats == 2


def test_severity_override_is_typed_and_applied():
    _, suite = compose(["+scenario=sync_loading", "scenario.sync_loading.severity=640"])
    assert suite.scenario["sync_loading"].severity == 640.0


def test_unknown_scenario_lists_available():
    with pytest.raises(UsageError) as err:
        compose(["+scenario=nope"])
    msg = str(err.value)
    assert "nope" in msg
    for name in [*SHIPPED, "all"]:
        assert name in msg


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        (
            "scenario.sync_loading.severity=10",
            "scenario.sync_loading.severity=10.0 is out of range",
        ),
        ("scenario.sync_loading.severity=99999", "allowed 32"),
        ("scenario.sync_loading.full.steps=0", "'steps' must be >= 1"),
        ("scenario.sync_loading.smoke.batch_size=-4", "'batch_size' must be >= 0"),
        ("scenario.sync_loading.variants=[baseline,nonesuch]", "unknown variant(s) ['nonesuch']"),
        ("harness.repeats=0", "harness.repeats must be >= 1"),
        ("harness.timeout_s=-1", "harness.timeout_s must be > 0"),
        ("size=huge", "size must be one of"),
        ("nsys.cuda_graph_trace=sometimes", "nsys.cuda_graph_trace"),
    ],
)
def test_invalid_values_name_key_and_range(override, needle):
    with pytest.raises(ValueError) as err:
        compose(["+scenario=sync_loading", override])
    assert needle in str(err.value)


# --- one-line config errors (harness run checks overrides before Hydra) --------------------------


def _run_error(capsys, *args: str) -> str:
    """``harness run ARGS`` in this process: exit 2 and one line on stderr, returned."""
    from harness.__main__ import main

    assert main(["run", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("error: "), err
    return err


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["harness.repeat=3"], "did you mean harness.repeats?"),
        (["+harness.repeat=3"], "did you mean harness.repeats?"),  # Hydra's own suggestion
        (["siz=smoke"], "did you mean size?"),
        (["+scenario=sync_loading", "scenario.sync_loading.severty=3"],
         "did you mean scenario.sync_loading.severity?"),
        (["+scenario=sync_loading", "diagnosis.host_sync.min_saving=0.2"],
         "did you mean diagnosis.host_sync.min_saving_share?"),
        (["-m", "+scenario=sync_loading", "harness.repeats=1,2", "harness.repets=3"],
         "did you mean harness.repeats?"),
    ],
)  # fmt: skip
def test_a_mistyped_key_names_the_nearest_valid_one(capsys, args, names):
    err = _run_error(capsys, *args)
    assert "unknown config key" in err and names in err, err


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["+scenario=sync_loading", "harness.repeats=abc"],
         "harness.repeats=abc: Value 'abc' of type 'str' could not be converted to Integer"),
        (["+scenario=sync_loading", "nsys.trace=5"], "nsys.trace=5"),
        (["scenario.sync_loading.severity=64"], "not selected: add +scenario=sync_loading"),
        (["+scenario=sync_loading", "diagnosis=nope"], "no such thresholds file; available: default"),
        (["+scenario=sync_loading", "harness.timeout_s=[1"], "cannot read the override"),
        (["+scenario=sync_loading", "repeats"], "cannot read the override 'repeats'"),
    ],
)  # fmt: skip
def test_other_config_errors_are_one_line_too(capsys, args, says):
    assert says in _run_error(capsys, *args)


def test_valid_overrides_pass_the_check():
    from harness.core.overrides import check_overrides

    found = scenarios.discover()
    check_overrides(
        ["+scenario=all", "harness.repeats=3", "scenario.sync_loading.severity=64",
         "diagnosis.host_sync.min_saving_share=0.2", "diagnosis.main_metric.data_stall=x",
         "nsys.trace=[cuda,nvtx]", "hydra.run.dir=/tmp/x", "--cfg", "job"],
        found,
    )  # fmt: skip
    check_overrides(["-m", "+scenario=sync_loading", "scenario.sync_loading.severity=32,64"], found)
