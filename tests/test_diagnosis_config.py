"""The ``diagnosis`` config group: detector thresholds composed into the run config, validated,
recorded in the manifest, and the same values for ``harness diagnose`` (no Hydra run)."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, fields

import pytest

from analysis.detect import REGISTRY, load_thresholds
from analysis.detect.config import DataStallThresholds
from bottlenecks import CLASSES
from harness.core.config import (
    DiagnosisConfig,
    UsageError,
    compose,
    diagnosis_dict,
    parse_overrides,
)
from tests.conftest import HARNESS, REPO

KEY = "diagnosis.data_stall.min_saving_share"


def test_command_line_override_reaches_the_config_and_the_manifest(tmp_path):
    from harness.execution.runner import Suite

    raw, suite = compose(["+scenario=sync_loading", f"{KEY}=0.4"])
    assert raw.diagnosis.data_stall.min_saving_share == 0.4
    assert suite.diagnosis.data_stall.min_saving_share == 0.4
    assert diagnosis_dict(raw)["data_stall"]["min_saving_share"] == 0.4
    assert diagnosis_dict(suite) == diagnosis_dict(raw)
    manifest = json.loads(json.dumps(Suite(suite, raw).records.manifest(tmp_path)))
    recorded = manifest["config"]["diagnosis"]
    assert recorded["data_stall"]["min_saving_share"] == 0.4
    assert recorded["data_stall"]["min_data_load_share"] is None  # untouched keys are recorded too
    assert recorded["verdict_min_ci_low"] == 1.1


def test_invalid_threshold_exits_2_naming_key_and_range(tmp_path):
    results = f"harness.results_dir={tmp_path / 'results'}"
    proc = subprocess.run(
        [*HARNESS, "run", "+scenario=sync_loading", f"{KEY}=1.5", results],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"{KEY} must be in 0..1" in proc.stderr and "got 1.5" in proc.stderr
    assert not (tmp_path / "results").exists()  # rejected before anything ran


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("diagnosis.pageable_copy.min_saving_share=-0.1", "must be in 0..1"),
        ("diagnosis.launch_bound.max_gap_us=0", "diagnosis.launch_bound.max_gap_us must be > 0"),
        ("diagnosis.host.stretch_ms=-1", "diagnosis.host.stretch_ms must be > 0"),
        ("diagnosis.expert_rules.timeout_s=0", "diagnosis.expert_rules.timeout_s must be > 0"),
        ("diagnosis.host_sync.min_syncs_per_step=-1", "min_syncs_per_step must be >= 0"),
        ("diagnosis.window.startup_skip_share=1", "startup_skip_share must be in 0..1"),
        ("diagnosis.window.min_call_ns=0", "diagnosis.window.min_call_ns must be > 0"),
        ("diagnosis.data_stall.range_name=''", "range_name must be a non-empty name"),
        ("diagnosis.verdict_min_ci_low=0.9", "diagnosis.verdict_min_ci_low must be >= 1.0"),
        ("+diagnosis.main_metric.slow=x", "diagnosis.main_metric.slow: not a bottleneck class"),
        ("~diagnosis.main_metric.host_sync", "lacks a metric for ['host_sync']"),
        ("diagnosis.main_metric.host_sync='a b'", "diagnosis.main_metric.host_sync must be"),
    ],
)
def test_invalid_values_name_key_and_range(override, needle):
    with pytest.raises(ValueError) as err:
        compose(["+scenario=sync_loading", override])
    assert needle in str(err.value)


def test_every_class_has_a_section_and_a_main_metric():
    cfg = DiagnosisConfig()
    assert set(cfg.main_metric) == set(CLASSES) == set(REGISTRY)
    sections = {f.name for f in fields(DiagnosisConfig)}
    assert set(CLASSES) <= sections
    for klass in CLASSES:
        assert getattr(cfg, klass).SECTION == klass  # error messages name the right section


def test_load_thresholds_equals_the_composed_config():
    raw, _ = compose([])
    assert diagnosis_dict(load_thresholds()) == diagnosis_dict(raw)
    over = ["host.stretch_ms=2.5", "host.file_calls=[read,openat]"]
    raw, _ = compose([f"diagnosis.{o}" for o in over])
    assert diagnosis_dict(load_thresholds(parse_overrides(over))) == diagnosis_dict(raw)
    assert diagnosis_dict(raw)["host"]["stretch_ms"] == 2.5


def test_parse_overrides_is_typed_and_nested():
    got = parse_overrides(["diagnosis.launch_bound.max_gap_us=80", "verdict_min_ci_low=1.2"])
    assert got == {"launch_bound": {"max_gap_us": 80.0}, "verdict_min_ci_low": 1.2}
    assert isinstance(got["launch_bound"]["max_gap_us"], float)
    th = load_thresholds(got)
    assert th.launch_bound.max_gap_us == 80.0
    assert th.launch_bound.min_saving_share == 0.25  # the rest keep their defaults


@pytest.mark.parametrize(
    ("item", "needle"),
    [
        ("data_stall.min_saving_share=1.5", f"{KEY} must be in 0..1"),
        ("data_stall.min_saving=0.4", "diagnosis.data_stall.min_saving (in the overrides)"),
        ("data_stall.min_saving=0.4", "range_name, min_data_load_share, cpu_input_gap_ms"),
        ("nope.x=1", "diagnosis has: window, host, data_stall"),
        ("host.stretch_ms=soon", "diagnosis.host.stretch_ms"),
        ("host.stretch_ms", "KEY=VALUE"),
    ],
)
def test_parse_overrides_rejects_with_the_key(item, needle):
    with pytest.raises(UsageError) as err:
        parse_overrides([item])
    assert needle in str(err.value)


def test_load_thresholds_rejects_an_unknown_key():
    with pytest.raises(ValueError, match=r"diagnosis\.window\.min_steps .*not a diagnosis"):
        load_thresholds({"window": {"min_steps": 3}})


def test_a_new_field_is_validated_by_its_name():
    """Adding a threshold is one field: the unit in its name gives its range."""

    @dataclass(kw_only=True)
    class Extended(DataStallThresholds):
        min_wait_share: float = 0.3
        """Share of step time the consumer waits."""
        max_host_gap_us: float = 50.0
        """Longest host gap that counts."""
        min_repeats: int = 3
        """Steps that must show it."""

    assert Extended().min_wait_share == 0.3
    for bad, needle in [
        ({"min_wait_share": 1.2}, "diagnosis.data_stall.min_wait_share must be in 0..1"),
        ({"max_host_gap_us": 0.0}, "diagnosis.data_stall.max_host_gap_us must be > 0"),
        ({"min_repeats": -1}, "diagnosis.data_stall.min_repeats must be >= 0"),
        ({"min_wait_share": float("nan")}, "must be a finite number"),
    ]:
        with pytest.raises(ValueError, match=needle):
            Extended(**bad)
