"""A variant whose optional module is not installed (``Variant.needs_module``: sync_loading's
``dali`` needs NVIDIA DALI) is skipped with the reason, not failed in every round."""

from __future__ import annotations

import dataclasses

from harness.core.config import compose
from harness.core.runfolder import Unit
from harness.execution.settings import Settings, module_found


def _settings_with(module: str) -> Settings:
    raw, cfg = compose(["+scenario=sync_loading"])
    s = Settings(cfg, raw)
    scen = s.found["sync_loading"]
    variants = tuple(
        dataclasses.replace(v, needs_module=module) if v.name == "dali" else v
        for v in scen.variants
    )
    try:
        s.found = {**s.found, "sync_loading": dataclasses.replace(scen, variants=variants)}
    finally:  # a Scenario registers itself on its config class: put the real one back
        scen.config_cls._scenario = scen
    return s


def test_a_variant_whose_module_is_missing_is_skipped_with_the_reason() -> None:
    assert module_found("json") and not module_found("no_such_package.for_this_test")
    s = _settings_with("no_such_package.for_this_test")
    why = s.skip_reason(Unit("sync_loading", "dali", "timing-1"))
    assert why.startswith("no_such_package.for_this_test is not installed in this environment")
    assert s.skip_reason(Unit("sync_loading", "baseline", "timing-1")) == ""


def test_dali_declares_its_module_and_runs_where_it_is_installed() -> None:
    raw, cfg = compose(["+scenario=sync_loading"])
    s = Settings(cfg, raw)
    assert s.found["sync_loading"].variant("dali").needs_module == "nvidia.dali"
    installed = module_found("nvidia.dali")
    assert (s.skip_reason(Unit("sync_loading", "dali", "timing-1")) == "") == installed
