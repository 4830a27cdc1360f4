"""pipeline_imbalance's own logic: the cuts, and one GPipe step over 2 gloo processes giving
the same gradients as the whole model in one process (any cut, any micro-batch count)."""

from __future__ import annotations

import dataclasses
import datetime
import types
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from scenarios import RunContext
from scenarios.pipeline_imbalance import PipeConfig, PipeSize
from scenarios.pipeline_imbalance.workload import build, even_cut, first_stage_blocks

WORLD = 2
SIZE = PipeSize(
    warmup_steps=1,
    steps=2,
    depth=4,
    width=32,
    rows=64,
    microbatches=4,
    more_microbatches=16,
    cost_rounds=1,
)


def test_first_stage_share_cuts() -> None:
    assert first_stage_blocks(8, 2, 0.75) == [6, 2]
    assert first_stage_blocks(8, 2, 0.5) == [4, 4]
    assert first_stage_blocks(8, 4, 0.5) == [4, 2, 1, 1]
    assert first_stage_blocks(8, 2, 0.9) == [7, 1]  # every other stage keeps a block
    assert first_stage_blocks(8, 1, 0.75) == [8]


def test_even_cut_minimises_the_slowest_stage() -> None:
    assert even_cut([1.0] * 8, 2) == [4, 4]
    assert even_cut([3.0, 1.0, 1.0, 1.0], 2) == [1, 3]
    assert even_cut([1.0, 1.0, 1.0, 5.0], 2) == [3, 1]
    assert even_cut([1.0, 2.0, 3.0, 4.0, 5.0], 3) == [3, 1, 1]  # 6 | 4 | 5
    assert sum(even_cut([0.5] * 7, 4)) == 7
    assert even_cut([1.0] * 4, 2, last_extra=2.0) == [3, 1]  # the head weighs on the last stage


def test_size_validation() -> None:
    with pytest.raises(ValueError, match="must divide rows"):
        PipeSize(rows=100, microbatches=8)
    with pytest.raises(ValueError, match="cost_rounds"):
        PipeSize(cost_rounds=0)


#: Stands in for AdamW so a step leaves its gradients in place to compare.
_NO_OPTIMIZER = types.SimpleNamespace(step=lambda: None, zero_grad=lambda set_to_none: None)


def _reference(cfg: PipeConfig, size: PipeSize, ctx: RunContext) -> list[torch.Tensor]:
    """The whole model in this process, the whole batch's loss: the gradients every cut and
    micro-batch count must reproduce."""
    solo = dataclasses.replace(ctx, rank=0, world_size=1)
    w = build(cfg, size, "baseline", solo)
    w.setup()
    F.mse_loss(w.stage(w.x[0]), w.y[0]).backward()
    return [p.grad.detach().clone() for p in w.stage.parameters()]


def _check(rank: int, store: str, tmp: str) -> None:
    """Runs in each of the 2 processes; a failed assert fails mp.spawn with its traceback."""
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"file://{store}",
        rank=rank,
        world_size=WORLD,
        timeout=datetime.timedelta(seconds=60),
    )
    try:
        cfg = PipeConfig()
        ctx = RunContext(
            device=torch.device("cpu"),
            size_name="smoke",
            seed=0,
            cache_dir=Path(tmp),
            rank=rank,
            world_size=WORLD,
        )
        ref = _reference(cfg, SIZE, ctx)
        for variant, blocks in (("baseline", [3, 1]), ("more_microbatches", [3, 1])):
            w = build(cfg, SIZE, variant, ctx)
            w.setup()
            assert [w.extra["blocks_rank0"], w.extra["blocks_rank1"]] == blocks
            w.opt = _NO_OPTIMIZER
            w.start_window()
            w.step(0)
            lo = 0 if rank == 0 else blocks[0] * 6  # 6 parameter tensors per block
            mine = [p.grad for p in w.stage.parameters()]
            assert len(mine) == (18 if rank == 0 else 10)  # 3 blocks | 1 block + the head
            for got, want in zip(mine, ref[lo : lo + len(mine)], strict=True):
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-7)
            m = w.metrics()
            assert m["microbatches"] == (16 if variant == "more_microbatches" else 4)
            assert m["compute_ms_per_step_rank0"] > 0 and m["compute_ms_per_step_rank1"] > 0
            assert m["compute_ms_per_step_max"] >= m["compute_ms_per_step_min"]
            assert 0 < m["balanced_bound_ms"]
        bal = build(cfg, SIZE, "balanced", ctx)
        bal.setup()  # equal blocks: the measured cut is even, give or take the head
        assert sum([bal.extra["blocks_rank0"], bal.extra["blocks_rank1"]]) == 4
        assert 1 <= bal.extra["blocks_rank1"] <= 3
        assert bal.extra["block_ms_mean"] > 0
        # both ranks done before either tears gloo down: a rank leaving while its peer's last
        # send is in flight can abort in gloo's tear-down (seen under load)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def test_one_step_over_two_gloo_processes_matches_the_whole_model(tmp_path) -> None:
    mp.spawn(_check, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=WORLD, join=True)
