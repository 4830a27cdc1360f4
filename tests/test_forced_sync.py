"""forced_sync: the fix computes the same metrics as the baseline, and on a GPU never syncs."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from scenarios import RunContext
from scenarios.forced_sync import SCENARIO, ForcedSyncConfig, ForcedSyncSize
from scenarios.forced_sync.workload import build

STEPS = 6


def _ctx(device: str, tmp_path) -> RunContext:
    return RunContext(device=torch.device(device), size_name="smoke", seed=0, cache_dir=tmp_path)


def _run(variant: str, size: ForcedSyncSize, ctx: RunContext, steps: int = STEPS):
    w = build(ForcedSyncConfig(), size, variant, ctx)
    w.setup()
    w.start_window()  # every step measured
    for i in range(steps):
        w.step(i)
    return w


def test_every_variant_runs_on_cpu_and_sync_free_matches_baseline(tmp_path):
    size = ForcedSyncConfig().smoke
    ctx = _ctx("cpu", tmp_path)
    base = _run("baseline", size, ctx)
    free = _run("sync_free", size, ctx)
    ideal = _run("ideal", size, ctx)
    nosync = _run("no_sync", size, ctx)

    assert len(base.losses) == STEPS
    assert len(set(base.losses)) > 1, "data must change with the step index"
    assert free.logged, "sync_free should have read a snapshot inside the loop (K < steps)"
    expected = sum(base.losses) / len(base.losses)
    assert free.mean_loss() == pytest.approx(expected, rel=1e-9, abs=1e-12)

    bm, fm, im = base.metrics(), free.metrics(), ideal.metrics()
    n_params = len(list(base.model.parameters()))
    # per block, isnan(loss), two per parameter, item(); no device to synchronize on the CPU
    assert bm["syncs_per_step"] == size.depth + 1 + 2 * n_params + 1
    # the fix logs the same gradient norms (mean over its steps) as the baseline computed
    free.mean_loss()  # reads the final snapshot, which covers every step
    expected_norms = [v / STEPS for v in base.grad_norm_sums.values()]
    assert len(expected_norms) == n_params
    assert free.mean_grad_norms == pytest.approx(expected_norms, rel=1e-5)
    weights = [v / STEPS for v in base.weight_norm_sums.values()]
    assert free.mean_weight_norms == pytest.approx(weights, rel=1e-5)
    assert fm["syncs_per_step"] == 0 and im["syncs_per_step"] == 0
    # no_sync: the same reads, each landed in its ring slot and read afterwards, no sync
    nm = nosync.metrics()
    assert nm["syncs_per_step"] == 0
    assert sorted(nosync.losses) == pytest.approx(sorted(base.losses), rel=1e-9)
    assert list(nosync.grad_norm_sums) == list(base.grad_norm_sums)
    for sums in ("grad_norm_sums", "weight_norm_sums"):
        assert list(getattr(nosync, sums).values()) == pytest.approx(
            list(getattr(base, sums).values()), rel=1e-5
        )
    for m in (bm, fm, im, nm):
        assert m["host_step_ms"] > 0
        assert math.isclose(m["host_launch_ms"] + m["host_metrics_ms"], m["host_step_ms"])
    assert fm["loss_mean"] == pytest.approx(bm["loss_mean"], rel=1e-9)


@pytest.mark.parametrize("block", [0, 2])
def test_sync_free_names_the_first_block_with_a_non_finite_output(tmp_path, block):
    """The per-block checks folded into one norm still say which block went inf/NaN (later
    blocks inherit it through the residual stream), and only when the snapshot is read."""
    w = build(ForcedSyncConfig(), ForcedSyncConfig().smoke, "sync_free", _ctx("cpu", tmp_path))
    w.setup()
    w.step(0)
    assert w.mean_loss() == w.mean_loss()  # finite so far: no error
    with torch.no_grad():
        w.model.blocks[block].mlp[2].bias.fill_(float("inf"))
    w.step(1)
    with pytest.raises(FloatingPointError, match=f"block {block} "):
        w.mean_loss()


def test_severity_sets_the_fraction_of_syncing_steps(tmp_path):
    cfg = ForcedSyncConfig(severity=0.5)
    w = build(cfg, cfg.smoke, "baseline", _ctx("cpu", tmp_path))
    assert sum(w.syncs_on(i) for i in range(100)) == 50
    with pytest.raises(ValueError, match="severity"):
        ForcedSyncConfig(severity=2.0)
    with pytest.raises(ValueError, match="depth"):
        ForcedSyncSize(depth=0)


@pytest.mark.parametrize("block", [0, 2])
def test_no_sync_raises_when_the_step_it_checked_is_read(tmp_path, block):
    """The baseline's checks, deferred: a non-finite block output raises once its slot is read,
    naming the block and the step."""
    w = build(ForcedSyncConfig(), ForcedSyncConfig().smoke, "no_sync", _ctx("cpu", tmp_path))
    w.setup()
    w.step(0)
    with torch.no_grad():
        w.model.blocks[block].mlp[2].bias.fill_(float("inf"))
    with pytest.raises(FloatingPointError, match=f"block {block} at step 1"):
        w.step(1)


def test_scenario_lists_the_variants_and_times_its_truth_against_no_sync():
    assert SCENARIO.variant_names == ["baseline", "no_sync", "sync_free", "ideal"]
    assert SCENARIO.removal_for("baseline") == "no_sync"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("variant", ["sync_free", "no_sync"])
def test_the_fixes_never_sync_on_gpu(tmp_path, variant):
    size = dataclasses.replace(ForcedSyncConfig().smoke, flush_every=2)
    w = build(ForcedSyncConfig(), size, variant, _ctx("cuda", tmp_path))
    w.setup()
    warm = 3
    for i in range(warm):
        w.step(i)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for i in range(warm, warm + 10):  # includes flushes (K=2) and event polls
            w.step(i)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert math.isfinite(w.metrics()["loss_mean"])
    assert w.metrics()["syncs_per_step"] == 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_baseline_step_does_sync_on_gpu(tmp_path):
    size = ForcedSyncConfig().smoke
    w = build(ForcedSyncConfig(), size, "baseline", _ctx("cuda", tmp_path))
    w.setup()
    for i in range(2):
        w.step(i)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        with pytest.raises(RuntimeError, match="synchroniz"):
            w.step(2)
    finally:
        torch.cuda.set_sync_debug_mode("default")
