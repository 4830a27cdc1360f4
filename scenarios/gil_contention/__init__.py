"""gil_contention: a Python metrics thread of the training process holds the GIL that the
training loop needs to launch its kernels (class ``gil_contention``).

The workload is a binary classifier (pre-LayerNorm residual MLP blocks, as in ``forced_sync``)
trained with fused AdamW on device-resident data under bf16 autocast. After every step the loop
hands the batch's predictions and labels to a metrics thread: it copies them to pinned host
memory without blocking and records a CUDA event, and the thread waits for the event (releasing
the GIL) and then updates a binned precision-recall curve, one Python comparison per prediction
and threshold. That loop is pure Python and holds the GIL. The training thread lets go of the GIL
in every CUDA launch, in the backward (while PyTorch's autograd thread launches it) and in the
optimizer step; the metrics thread takes it each time, and the training thread waits up to a
switch interval (5 ms) to get it back. The thread's Python time is thus serialised with the
loop's launches: once it is longer than the GPU's step, the GPU waits for the host.

The thread's Python time depends on the host CPU, the GPU step does not: the default (64
thresholds) is about twice the GPU step on the faster of the CPUs it was sized on, and the pool
has 8 workers so that it keeps up on the slower ones too (the measurements behind the size:
docs/scenario-measurements.md).

Balance: ``batch`` sets both the GPU work and the predictions scored per step; ``severity`` (the
thresholds) moves only the thread's Python time; ``depth`` and ``width`` move the GPU time (and,
a little, the launches). The fixed loop launches in ~5 ms of a ~14.5 ms GPU step (~7 ms under
nsys, ~9 us more per CUDA call), so it stays GPU-bound when profiled.
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
from scenarios._memory import F32, MemoryEstimate, mlp_data_and_training


@dataclass(kw_only=True)
class GilSize(Size):
    """Work per variant for gil_contention."""

    depth: int = 4
    """Residual MLP blocks (GPU time; ~27 launches each)."""
    width: int = 2048
    """Model width; each block's hidden layer is 4x this."""
    batch: int = 8192
    """Rows per step: the GPU's work and the predictions the metrics code scores per step."""
    data_batches: int = 4
    """Distinct device-resident batches; step i uses batch i % data_batches."""
    pool_workers: int = 8
    """Processes of ``process_pool``'s pool (each step's scoring is one task)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("depth", "width", "batch", "data_batches", "pool_workers"):
            if getattr(self, name) < 1:
                raise ValueError(f"size field '{name}' must be >= 1, got {getattr(self, name)}")


@dataclass(kw_only=True)
class GilConfig(ScenarioConfig):
    """Config schema for gil_contention."""

    severity: float = 64
    """Thresholds of the precision-recall curve the metrics code updates per prediction (one
    Python comparison each in the baseline's thread). 64: the thread's Python then outlasts the
    GPU step about twice over even on a fast host CPU (see the module docstring)."""
    smoke: GilSize = field(
        default_factory=lambda: GilSize(
            warmup_steps=3, steps=12, depth=1, width=24, batch=8192, data_batches=2, pool_workers=1
        )
    )
    """CPU size, a second or two per variant. As on the GPU, the thread's Python time per step
    (~17 ms at 64 thresholds) is longer than the loop's own step (~10 ms idle); at 1024 rows
    (~1.2 ms of Python at 32) the thread finished its work while the loop computed, and the
    loop hardly waited for the GIL.
    Width 24, not 8: on a loaded 2-core box any second running thread slows the loop (its wait
    for a core, its GIL hand-overs) by a roughly fixed time per step, which a wider, longer
    step dilutes. One pool worker: with two, the workers take both cores of such a box and the
    training process's threads wait for a core while handing the GIL over, which reads as GIL
    waits on the fix. One worker does not keep up with the scoring there (what is left is
    scored after the window), which the CPU size accepts: it checks the mechanism, not the
    fix's speed."""
    full: GilSize = field(default_factory=lambda: GilSize(warmup_steps=10, steps=60))
    """GPU size: a GPU step of ~14.5 ms with ~5 ms of launches (docs/scenario-measurements.md)."""

    def memory_estimate(self, size: Size, on_gpu: bool) -> MemoryEstimate:
        """Inputs (``data_batches x batch x width`` float32, built in host memory) and their
        labels, the MLP's weights, gradients and AdamW state and the activations its backward
        keeps."""
        assert isinstance(size, GilSize)
        rows = size.data_batches * size.batch
        return mlp_data_and_training(
            tensors=[rows * size.width * F32, rows * F32],
            rows=size.batch,
            width=size.width,
            hidden=4 * size.width,
            depth=size.depth,
            on_gpu=on_gpu,
            what=f"inputs of {size.data_batches} x {size.batch} x {size.width} float32, and "
            f"{size.depth} MLP blocks' weights and activations",
        )


SCENARIO = Scenario(
    name=__name__.rpartition(".")[2],  # its package's name, which is also its class's
    bottleneck=Klass.GIL_CONTENTION,
    title="A Python metrics thread holds the GIL the training loop needs to launch",
    # A slice ends with the GPU synchronised: the metrics thread then scores while the loop
    # waits on the GPU without the GIL, so short slices hide the contention a continuous loop
    # meets, and how much depends on the slice's steps (docs/measurement.md): back to back.
    slice_rounds=False,
    variants=(
        Variant(
            name="baseline",
            kind="baseline",
            summary="each step's predictions handed (pinned copy + CUDA event) to a metrics "
            "thread of the training process that updates a precision-recall curve in a Python "
            "loop over every prediction and threshold",
        ),
        Variant(
            name="process_pool",
            kind="fix",
            summary="the same Python scoring in a multiprocessing.Pool of worker processes, "
            "each step one task, submitted once the step's event has completed",
            expect=Expectation(
                role="clean",
                because="the training process keeps only the hand-over (an event query and the "
                "pickling of two arrays per step, in the pool's own threads): no Python loop "
                "holds its GIL, on any machine",
            ),
        ),
        Variant(
            name="vectorised",
            kind="fix",
            summary="the same metrics thread, its loop written as whole-array numpy operations "
            "(which release the GIL)",
            expect=Expectation(
                role="clean",
                because="the thread holds the GIL for a few numpy calls per step (~0.1 ms); "
                "numpy's sorts and binary searches over the 8192 predictions run without it",
            ),
        ),
        Variant(name="ideal", kind="ideal", summary="the same loop with no metrics at all"),
    ),
    severity=Severity(
        meaning="thresholds of the precision-recall curve updated per prediction (the metrics "
        "thread's Python work per step grows with it; the GPU's does not)",
        unit="thresholds",
        low=1,
        high=256,
        why_default="a binned curve of a few dozen thresholds is what a hand-written per-step "
        "AUROC or best-F1 metric keeps; written as a loop over the batch's predictions and run "
        "on a thread 'so that it does not slow training', it is a common way to log them",
    ),
    teaching=Teaching(
        symptom="The training thread's OS-runtime row is striped with pthread_cond_timedwait "
        "calls of up to 5 ms (with --trace=python-gil: 'Waiting for GIL' ranges on it while the "
        "metrics thread shows 'Holding GIL'); its CUDA launches come in short bursts between "
        "them, and the GPU row idles between the bursts. No sync and no input wait explains "
        "the gaps: the thread is ready to launch but cannot run Python.",
        cause="CPython runs one thread's Python at a time. The metrics thread's loop over every "
        "prediction and threshold is pure Python; each time the training thread lets go of the "
        "GIL (every CUDA launch, the backward, the optimizer step) the metrics thread takes it, "
        "and the training thread waits up to a switch interval (5 ms) to get it back. Its "
        "launches wait behind the metrics thread's Python, and the GPU runs dry.",
        fix="Take the Python work out of the training process (a multiprocessing.Pool fed with "
        "each step's host copies once their CUDA event has completed), or write it as "
        "whole-array numpy or torch operations, which release the GIL. The waits vanish from the "
        "training thread, its launches run back to back again and the GPU is busy throughout.",
    ),
    config_cls=GilConfig,
    build=f"{__name__}.workload:build",
    expected_diagnosis="baseline: the training thread waits for the GIL (pthread_cond_timedwait "
    "on its OS-runtime row, or 'Waiting for GIL' ranges in nsys's GIL trace) while the metrics "
    "thread runs Python, with the GPU idle meanwhile; process_pool, vectorised and ideal: few "
    "GIL waits on the training thread, GPU busy back to back",
)
