"""kernel_flood: the hand-written optimizer is real SGD, the op counter counts, configs validate."""

from __future__ import annotations

import pytest
import torch

from scenarios.kernel_flood import KernelFloodConfig, KernelFloodSize
from scenarios.kernel_flood.workload import DeepMLP, HandSGD, _OpCounter


def test_hand_sgd_matches_torch_sgd():
    torch.manual_seed(0)
    a = DeepMLP(2, 16, 4)
    b = DeepMLP(2, 16, 4)
    b.load_state_dict(a.state_dict())
    hand = HandSGD(list(a.parameters()), lr=0.05, momentum=0.9, weight_decay=1e-3)
    ref = torch.optim.SGD(b.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-3)
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
    for _ in range(3):
        a(x, y).backward()
        hand.step()
        hand.zero_grad()
        b(x, y).backward()
        ref.step()
        ref.zero_grad()
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(pa, pb)


def test_op_count_grows_with_depth():
    def count(depth: int) -> int:
        net = DeepMLP(depth, 16, 4)
        opt = HandSGD(list(net.parameters()))
        x, y = torch.randn(4, 16), torch.randint(0, 4, (4,))
        counter = _OpCounter()
        with counter:
            net(x, y).backward()
            opt.step()
        return counter.compute

    per_block = count(3) - count(2)
    assert 30 <= per_block <= 40  # ~5 forward, ~10 backward, 4 x 5 tensors in the optimizer


def test_depth_and_validation():
    cfg = KernelFloodConfig()
    assert cfg.depth(cfg.full) == 64
    assert cfg.depth(cfg.smoke) == cfg.smoke.depth_override
    with pytest.raises(ValueError, match="whole number"):
        KernelFloodConfig(severity=10.5)
    with pytest.raises(ValueError, match="out of range"):
        KernelFloodConfig(severity=0)
    with pytest.raises(ValueError, match="'width' must be >= 1"):
        KernelFloodSize(width=0)
