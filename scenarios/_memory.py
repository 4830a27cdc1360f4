"""What a size must hold in memory, as far as a scenario can say before it runs
(``ScenarioConfig.memory_estimate``): the harness refuses a size whose estimate exceeds the
machine's memory, in one line, rather than let its workers set up for a minute and then be
killed by the kernel.

An estimate is a floor, never a guess at the peak: the data the size builds and the tensors its
training loop must keep (a model's weights and optimizer state, the activations a backward pass
needs), leaving out everything smaller or harder to know (the allocator's slack, the framework's
own memory, temporaries). A size refused for its floor could not have run; one that passes may
still run out, and is then recorded ``oom``.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Bytes of one float32 (and of the bf16 autocast activations on the GPU).
F32 = 4
BF16 = 2


@dataclass(frozen=True)
class MemoryEstimate:
    """The least memory one process of a size takes (bytes; 0: nothing said of that side)."""

    host: int = 0
    """Host memory of one process (each rank of a distributed scenario holds its own)."""
    gpu: int = 0
    """Device memory of one process, on its GPU (0 on the CPU, where all of it is host)."""
    what: str = ""
    """What the floor counts, in a few words (said with a refusal)."""

    def __post_init__(self) -> None:
        if self.host < 0 or self.gpu < 0:
            raise ValueError(f"a memory estimate is >= 0 bytes, got {self}")


def built_then_moved(tensors: list[int], on_gpu: bool) -> tuple[int, int]:
    """(host, gpu) bytes of tensors built in host memory and then moved to the device one by
    one (``torch.randn(...).to(device)``): on the GPU the host holds the largest at a time and
    the device all of them; on the CPU the host keeps all of them."""
    if on_gpu:
        return max(tensors, default=0), sum(tensors)
    return sum(tensors), 0


def mlp_training(*, rows: int, width: int, hidden: int, depth: int, on_gpu: bool) -> int:
    """Bytes a training step of ``depth`` residual MLP blocks (width -> hidden -> width) over
    ``rows`` rows must hold: fp32 weights, gradients and AdamW's two moments, and the two
    ``rows x hidden`` activations each block keeps for its backward (the first linear's output
    and the GELU's: bf16 under the GPU's autocast, fp32 on the CPU)."""
    weights = depth * 2 * width * hidden
    activations = depth * 2 * rows * hidden * (BF16 if on_gpu else F32)
    return 4 * F32 * weights + activations


def mlp_data_and_training(
    *,
    tensors: list[int],
    rows: int,
    width: int,
    hidden: int,
    depth: int,
    on_gpu: bool,
    what: str,
) -> MemoryEstimate:
    """The estimate of an MLP trained on device-resident batches built in host memory
    (:func:`built_then_moved`, :func:`mlp_training`)."""
    host, gpu = built_then_moved(tensors, on_gpu)
    train = mlp_training(rows=rows, width=width, hidden=hidden, depth=depth, on_gpu=on_gpu)
    if on_gpu:
        gpu += train
    else:
        host += train
    return MemoryEstimate(host=host, gpu=gpu, what=what)
