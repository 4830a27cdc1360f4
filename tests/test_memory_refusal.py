"""A size whose estimated memory exceeds the machine's is refused before anything runs, in one
line with the estimate, exit 2 (issue 52: ``+scenario=forced_sync
scenario.forced_sync.full.batch=4000000`` set up for a minute in each worker on an H200 host,
then was killed by the kernel)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import scenarios
from harness.core.hostmem import HostMemory
from harness.execution import memcheck
from scenarios import MemoryEstimate
from tests.conftest import run_cli

GIB = 2**30
FOUND = scenarios.discover()


def _settings(name: str, size: str, device: str, gpu_mib: list[int], **fields) -> SimpleNamespace:
    """What memcheck reads of the run's settings, for one scenario with ``fields`` set on the
    size."""
    cfg = FOUND[name].default_config()
    for key, value in fields.items():
        setattr(cfg.size(size), key, value)
    return SimpleNamespace(
        cfg=SimpleNamespace(scenario={name: cfg}, dist=SimpleNamespace(nproc_per_node=None)),
        size=size,
        device=device,
        gpu=SimpleNamespace(memory_mib=gpu_mib),
        selected=[name],
        found=FOUND,
    )


H200_HOST = HostMemory(total=128 * GIB, available=120 * GIB)


def test_the_issues_example_is_refused_in_one_line(tmp_path):
    results = tmp_path / "results"
    proc = run_cli(
        [
            "run",
            "+scenario=forced_sync",
            "size=full",
            "scenario.forced_sync.full.batch=4000000",
            f"harness.results_dir={results}",
        ],
        timeout=600,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    line = lines[0]
    assert line.startswith("error: scenario.forced_sync at size=full needs at least ")
    assert "GiB of host memory by its estimate (inputs and targets of 4 x 4000000 x 1024" in line
    assert "available here" in line and "scenario.forced_sync.full" in line
    assert not results.exists(), "nothing may run (no run folder)"


def test_on_a_gpu_the_device_memory_refuses_it():
    """On an H200 host the data is built one tensor at a time in host memory (61 GiB, which
    fits), but the device must hold both and the activations: refused for GPU memory."""
    s = _settings("forced_sync", "full", "cuda", [143771], batch=4_000_000)
    why = memcheck.refusal(s, H200_HOST)
    assert why.startswith("scenario.forced_sync at size=full needs at least ")
    assert "of GPU memory per process" in why and "more than the GPU's 140 GiB" in why
    assert "\n" not in why


def test_the_default_sizes_fit_an_h200():
    for name in FOUND:
        s = _settings(name, "full", "cuda", [143771])
        assert memcheck.refusal(s, H200_HOST) == "", name


def test_every_smoke_size_fits_this_box():
    """What the CPU tests run is never refused here (their floors are megabytes)."""
    memory = HostMemory.now()
    for name in FOUND:
        s = _settings(name, "smoke", "cpu", [])
        assert memcheck.refusal(s, memory) == "", name


def test_a_distributed_scenario_counts_each_rank():
    """ddp_bucketing's full size on the CPU: each of its 2 ranks holds its own data."""
    s = _settings("ddp_bucketing", "full", "cpu", [])
    est = memcheck.estimate(s, "ddp_bucketing")
    assert est is not None and est.host > 0
    between = HostMemory(total=64 * GIB, available=int(est.host * 1.5))
    why = memcheck.refusal(s, between)
    assert "for its 2 ranks" in why
    assert memcheck.refusal(s, HostMemory(total=64 * GIB, available=est.host * 2)) == ""


def test_unknown_memory_refuses_nothing():
    s = _settings("forced_sync", "full", "cpu", [], batch=4_000_000)
    assert memcheck.refusal(s, HostMemory(total=None, available=None)) == ""


@pytest.mark.parametrize("name", ["forced_sync", "pageable_copies", "sync_loading"])
def test_the_estimate_grows_with_the_data(name):
    """Doubling the field that sets the data's size raises the floor (host on the CPU)."""
    field = {
        "forced_sync": "batch",
        "pageable_copies": "host_batches",
        "sync_loading": "batch_size",
    }
    small = _settings(name, "full", "cpu", [])
    large = _settings(name, "full", "cpu", [])
    size = large.cfg.scenario[name].size("full")
    setattr(size, field[name], 4 * getattr(size, field[name]))
    a, b = memcheck.estimate(small, name), memcheck.estimate(large, name)
    assert a is not None and b is not None and b.host > a.host > 0


def test_a_negative_estimate_is_an_error():
    with pytest.raises(ValueError):
        MemoryEstimate(host=-1)


def test_a_scenario_without_an_estimate_says_none():
    assert (
        FOUND["kernel_flood"]
        .default_config()
        .memory_estimate(FOUND["kernel_flood"].default_config().full, True)
        is None
    )
