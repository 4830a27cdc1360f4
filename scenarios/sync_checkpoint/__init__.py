"""sync_checkpoint: ``torch.save(model.state_dict())`` every N steps on the training thread
(class ``blocking_io``).

``torch.save`` of CUDA tensors copies each one to pageable host memory (a blocking
device-to-host copy that drains the stream), computes the archive's CRC32 and writes the bytes
to the file, all on the loop thread: the GPU idles for the whole save, once a period. The fixes
take the save off the loop: ``async_snapshot`` copies the weights into pinned host buffers on a
side stream (the next optimizer step waits for that copy on the GPU, not the host) and a writer
thread serialises and writes them; ``async_save`` calls
``torch.distributed.checkpoint.async_save``, whose default stager still copies the state dict
to fresh pageable host memory on the calling thread before its writer thread takes over (and
its writer fsyncs). ``ideal`` saves nothing. Checkpoints go to a temporary folder under the
run's cache folder, removed when the variant ends.

Why this size (from FLOPs and bytes and the host rates of the first GPU run:
docs/scenario-measurements.md). The save's cost goes with the checkpoint's bytes, the period's
GPU work with the parameters times the tokens of its N steps: the model's size sets the
period's length, N times the tokens the save's share of it. A small model saved often keeps
the share and makes the period short, so that a window holds several periods and a timing
slice is one. 2 feed-forward blocks of width 1024 and hidden 4096, fp32 weights (16.8 M, 67
MB), bf16 autocast, fused AdamW, 40960 tokens a step: GEMMs 4.1 TFLOP and ~2 GB of elementwise
and optimizer traffic, ~7.5-8 ms a step, ~115 ms a period of N = 15 steps. A save costs the loop
0.8-1.7 ms a MB, with the host (a pageable device-to-host copy at 1.5-3 GB/s, the CRC, the
writes): 55-115 ms, 3.7-7.7 ms a step spread over the period. The writer thread of
``async_snapshot`` needs about as long beside the loop: it keeps up with the period (the next
snapshot waits for it when it does not: the loop pays what it cannot hide).

| variant | loop thread per period | step | speedup |
| --- | ---: | ---: | ---: |
| baseline | 115 + 55-115 ms | 11.5-15 ms | 1 |
| async_snapshot | 115 ms (+ ~1 ms to issue the copy) | ~7.6 ms | 1.5-2x |
| async_save | 115 + its pageable staging, more if its writer is late | between | partial |
| ideal | 115 ms | ~7.5 ms | 1.5-2x |

The window holds whole periods (``Workload.period_steps``): 90 steps, six saves, so a sliced
round has three cycles of one-period slices. A baseline's warm-up and window take ~1.3 s;
host memory: ~70 MB pinned, ~150 MB of page cache.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bottlenecks import Klass
from scenarios._base import (
    Expectation,
    Scenario,
    ScenarioConfig,
    Severity,
    Size,
    Teaching,
    Variant,
)


@dataclass(kw_only=True)
class SyncCheckpointSize(Size):
    """Work per variant for sync_checkpoint."""

    warmup_steps: int = 5
    """Steps before the window (one checkpoint is written in set-up, outside it)."""
    steps: int = 90
    """Steps in the measured window: whole periods of the checkpoint (six at N = 15)."""
    tokens: int = 40960
    """Rows of every GEMM a step (a batch of 40 sequences of 1024 tokens, flattened)."""
    width: int = 1024
    """Model width."""
    hidden: int = 4096
    """Feed-forward hidden width; with ``width`` and ``depth`` it sets the checkpoint's size
    (``2 * width * hidden * depth`` fp32 weights: 67 MB at the defaults)."""
    depth: int = 2
    """Feed-forward blocks."""
    num_batches: int = 2
    """Distinct input batches made on the device in set-up."""
    every_override: int = 0
    """Steps between checkpoints at this size when > 0, overriding severity (so the CPU window
    holds some); 0 takes them from severity."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("tokens", "width", "hidden", "depth", "num_batches"):
            if getattr(self, name) < 1:
                raise ValueError(f"size field '{name}' must be >= 1, got {getattr(self, name)}")

    def checkpoint_mb(self) -> float:
        """The state dict's size (fp32 weights and biases), MB."""
        per_block = 2 * self.width * self.hidden + self.width + self.hidden
        return 4 * per_block * self.depth / 1e6


@dataclass(kw_only=True)
class SyncCheckpointConfig(ScenarioConfig):
    """Config schema for sync_checkpoint."""

    severity: float = 15
    """Steps between two checkpoints (``torch.save`` of the model's state dict). 15 keeps the
    save near the share of the step this size was planned for (a faster host's save costs the
    loop less than the ~1.7 ms a MB above: docs/scenario-measurements.md)."""
    smoke: SyncCheckpointSize = field(
        default_factory=lambda: SyncCheckpointSize(
            warmup_steps=2,
            steps=6,
            tokens=64,
            width=64,
            hidden=256,
            depth=2,
            num_batches=2,
            every_override=3,
        )
    )
    """CPU size: seconds per variant, a checkpoint (~0.3 MB) every 3 steps."""
    full: SyncCheckpointSize = field(default_factory=SyncCheckpointSize)
    """GPU size: a 67 MB state dict every 15 steps of ~7.5 ms."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.severity != int(self.severity):
            raise ValueError(
                f"scenario.sync_checkpoint.severity={self.severity} must be a whole number of steps"
            )

    def every(self, size: SyncCheckpointSize) -> int:
        """Steps between checkpoints at ``size``."""
        return size.every_override or int(self.severity)


SCENARIO = Scenario(
    name="sync_checkpoint",
    bottleneck=Klass.BLOCKING_IO,
    title="torch.save on the training thread",
    variants=(
        Variant(
            name="baseline",
            kind="baseline",
            summary="torch.save(model.state_dict(), path) every N steps on the loop thread",
        ),
        Variant(
            name="async_snapshot",
            kind="fix",
            summary="weights copied into pinned host buffers on a side stream, written by a "
            "writer thread (torch.save of the buffers)",
        ),
        Variant(
            name="async_save",
            kind="fix",
            summary="torch.distributed.checkpoint.async_save of the state dict (no process "
            "group: one process), the previous save awaited before the next",
            expect=Expectation(
                role="partial",
                because="its default stager copies the state dict to fresh pageable host "
                "memory on the calling thread (a blocking device-to-host copy every save), and "
                "its writer fsyncs: a slow disk makes the next save wait for it",
            ),
        ),
        Variant(name="ideal", kind="ideal", summary="no checkpoint"),
    ),
    severity=Severity(
        meaning="steps between two checkpoints of the 67 MB state dict",
        unit="steps",
        low=1,
        high=1000,
        why_default="a checkpoint every 15 steps (every ~0.1 s of training) is what saving "
        "'every epoch' or 'every few minutes' becomes on a small fine-tuning set or a debug "
        "run, and the frequent save left in when the run is scaled up",
    ),
    teaching=Teaching(
        symptom="Every N steps the GPU idles for the time of many steps: the loop thread "
        "makes a string of blocking device-to-host copies (Memcpy DtoH to pageable memory), "
        "then OS-runtime write calls to one file, and launches nothing until they are done; "
        "the other steps are dense.",
        cause="torch.save runs where it is called: it moves every CUDA tensor to host memory "
        "with a blocking copy, computes the archive's CRC32 and writes the bytes, all on the "
        "thread that should be launching the next step, so the whole save is added to the "
        "step time once a period.",
        fix="Snapshot and write in the background: copy the weights into pre-allocated pinned "
        "buffers on a side stream (the next optimizer step waits for that copy on the GPU) "
        "and let a writer thread serialise them, or use torch.distributed.checkpoint.async_save. "
        "Fixed, the checkpoint steps look like the others; only a short copy issue remains "
        "on the loop thread.",
    ),
    config_cls=SyncCheckpointConfig,
    build=f"{__name__}.workload:build",
    expected_diagnosis="baseline: every N steps a GPU-idle gap holding blocking DtoH copies and "
    "OS-runtime writes on the loop thread; async_snapshot: DtoH copies on a side stream "
    "overlapping kernels, the writes on another thread; async_save: pageable DtoH copies on "
    "the loop thread, the writes and fsync on another; ideal: none",
)
