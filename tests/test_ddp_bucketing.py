"""ddp_bucketing across 2 gloo processes on the CPU: the baseline issues one all-reduce per
parameter tensor after backward and ends with DDP's gradients; the ideal communicates nothing."""

from __future__ import annotations

import dataclasses
import datetime
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from scenarios import RunContext
from scenarios.ddp_bucketing import SCENARIO, DdpConfig, DdpSize
from scenarios.ddp_bucketing.workload import build, param_groups

WORLD = 2


class _CountAllReduce:
    """Counts Python-level dist.all_reduce calls (DDP's reducer calls NCCL/gloo from C++)."""

    def __init__(self) -> None:
        self.calls = 0
        self._orig = dist.all_reduce

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self._orig(*args, **kwargs)


def _grads(w) -> list[torch.Tensor]:
    return [p.grad.detach().clone() for p in w.model.parameters()]


def _same_on_all_ranks(t: torch.Tensor) -> bool:
    out = [torch.empty_like(t) for _ in range(WORLD)]
    dist.all_gather(out, t.contiguous())
    return all(torch.equal(out[0], o) for o in out[1:])


def _check(rank: int, store: str, tmp: str) -> None:
    """Runs in each of the 2 processes; a failed assert fails mp.spawn with its traceback."""
    torch.set_num_threads(1)
    # A bounded timeout: if one rank fails an assert, the other's collective errors out, not hangs.
    dist.init_process_group(
        "gloo",
        init_method=f"file://{store}",
        rank=rank,
        world_size=WORLD,
        timeout=datetime.timedelta(seconds=60),
    )
    counter = _CountAllReduce()
    dist.all_reduce = counter  # the scenario calls it as dist.all_reduce
    workloads: list = []
    try:
        cfg = DdpConfig()
        size = dataclasses.replace(cfg.smoke, probe_bandwidth=False)
        ctx = RunContext(
            device=torch.device("cpu"),
            size_name="smoke",
            seed=0,
            cache_dir=Path(tmp),
            rank=rank,
            world_size=WORLD,
        )

        def made(variant: str, c: DdpConfig = cfg, s: DdpSize = size):
            w = build(c, s, variant, ctx)
            w.setup()
            workloads.append(w)
            return w

        # One forward/backward: the gradients every variant hands the optimizer.
        grads = {}
        for variant in ("baseline", "ddp_default", "tuned_buckets", "ideal"):
            w = made(variant)
            counter.calls = 0
            w.forward_backward(0)
            grads[variant] = _grads(w)
            n = len(grads[variant])
            assert n == 6 * size.depth + 4 == 52
            if variant == "baseline":
                assert counter.calls == n, "one all-reduce per parameter tensor"
            else:
                assert counter.calls == 0, f"{variant}: no Python-level all-reduce"
        for variant in ("ddp_default", "tuned_buckets"):
            for gb, gd in zip(grads["baseline"], grads[variant], strict=True):
                torch.testing.assert_close(gb, gd, rtol=1e-5, atol=1e-7)
        # Averaged gradients agree across ranks; the ideal's are each rank's own (its own data).
        assert _same_on_all_ranks(grads["baseline"][0])
        assert not _same_on_all_ranks(grads["ideal"][0])

        # Whole steps (AdamW included) stay in step with DDP; metrics count the collectives.
        base, tuned = made("baseline"), made("tuned_buckets")
        for w in (base, tuned):
            w.step(0)
            w.start_window()
            for i in range(1, 4):
                w.step(i)
        for pb, pt in zip(base.model.parameters(), tuned.model.parameters(), strict=True):
            torch.testing.assert_close(pb, pt, rtol=1e-4, atol=1e-6)
        bm, tm = base.metrics(), tuned.metrics()
        assert bm["allreduce_calls_per_step"] == 52 and bm["collectives_per_param_tensor"] == 1
        assert bm["comm_ms_per_step"] > 0 and bm["grad_mb_per_step"] == bm["grad_mb"] > 0
        assert 1 <= tm["buckets"] == tm["allreduce_calls_per_step"] < 52
        assert tm["gradient_as_bucket_view"] == 1 and tm["bucket_cap_mb"] == size.bucket_cap_mb

        # Lower severity: fewer, flattened collectives, the same averaged gradients.
        low = made("baseline", DdpConfig(severity=0.1))
        counter.calls = 0
        low.forward_backward(0)
        assert counter.calls == 6  # ceil(0.1 * 52)
        for gl, gb in zip(_grads(low), grads["baseline"], strict=True):
            torch.testing.assert_close(gl, gb, rtol=1e-5, atol=1e-7)

        # The ideal never communicates, in the loop or in its metrics.
        ideal = made("ideal")
        counter.calls = 0
        ideal.start_window()
        for i in range(3):
            ideal.step(i)
        im = ideal.metrics()
        assert counter.calls == 0 and im["allreduce_calls_per_step"] == 0
        assert im["grad_mb_per_step"] == 0

        # The bucket sweep picks one size, the same on every rank, and reports each candidate.
        swept = made("tuned_buckets", s=dataclasses.replace(size, sweep_mb=[0.05, 1.0]))
        sm = swept.metrics()
        assert swept.bucket_mb in (0.05, 1.0)
        assert _same_on_all_ranks(torch.tensor([swept.bucket_mb]))
        assert sm["sweep_0.05mb_ms"] > 0 and sm["sweep_1mb_ms"] > 0
        assert sm["bucket_cap_mb"] == swept.bucket_mb
    finally:
        dist.all_reduce = counter._orig
        for w in workloads:  # as the worker does: close, then destroy the group
            w.close()
        dist.destroy_process_group()


def test_variants_across_two_gloo_processes(tmp_path):
    mp.spawn(_check, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=WORLD, join=True)


def test_param_groups_split_consecutive_tensors():
    assert param_groups(52, 1.0) == [range(i, i + 1) for i in range(52)]
    groups = param_groups(52, 0.1)
    assert len(groups) == 6 and sum(len(g) for g in groups) == 52
    assert [g.start for g in groups] == sorted(g.start for g in groups)
    assert param_groups(52, 0.001) == [range(52)]


def test_config_validation_and_contract():
    assert SCENARIO.world_size == 2
    assert SCENARIO.variant_names == ["baseline", "ddp_default", "tuned_buckets", "ideal"]
    assert not any(v.needs_gpu for v in SCENARIO.variants)
    with pytest.raises(ValueError, match="severity"):
        DdpConfig(severity=0)
    with pytest.raises(ValueError, match="bucket_cap_mb"):
        DdpSize(bucket_cap_mb=0)
    with pytest.raises(ValueError, match="sweep_mb"):
        DdpSize(sweep_mb=[25.0, -1.0])
    with pytest.raises(ValueError, match="depth"):
        DdpSize(depth=0)
