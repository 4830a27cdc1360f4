"""forced_sync: per-step host reads of device values serialise CPU and GPU (class ``host_sync``).

The workload is a stack of pre-LayerNorm residual MLP blocks (a transformer's MLP half) trained
with fused AdamW on device-resident data under bf16 autocast. Its forward pass is launch-heavy
Python (module calls, autocast casts, small kernels) and its backward and optimizer are
GPU-heavy. Without syncs the CPU launches step ``i+1``'s forward while the GPU still runs step
``i``'s backward and optimizer, so a step costs ``max(CPU, GPU)``.

The baseline carries the monitoring code real training loops accumulate, each item reading a
device value on the host every step: an inf/NaN check on every block's output from forward
hooks (what ``transformers``' ``DebugUnderflowOverflow`` does), ``if torch.isnan(loss)``, a
per-parameter gradient-norm and weight-norm dict for the logger (``p.grad.norm().item()``
and ``p.norm().item()``, as gradient and weight watchers such as ``wandb.watch(log="all")`` do), ``loss.item()`` and ``torch.cuda.synchronize()`` to time the step. Every read
waits for the GPU to drain its queue, so the forward's launch time, the norm loop's launch and
round-trip time and the GPU time add up instead of overlapping. ``sync_free`` computes the
same checks and numbers on the device in a handful of launches per step (one multi-tensor norm
over every block's output, whose per-block sums are finite exactly when the outputs were; one
over every gradient; the loss summed, so a NaN loss shows in the sum) and copies them to
pinned memory every K steps. Not ``isfinite(out).all()`` per block: ~5 kernels and a
materialised bool copy of each activation, GPU time a fix should not add.

``no_sync`` is the cause removed and nothing else: the baseline's every launch and copy, each
copy landing non-blocking in pinned memory and read a step later. It is what the detector's
prediction removes, so the truth is timed against it (``removed_by``); ``ideal`` also drops the
monitoring's launches, and ``sync_free`` most of them, which the syncs do not cost.

Balance: ``batch`` and ``width`` move only GPU time; ``depth`` moves both sides. Under nsys every
CUDA call costs the host several microseconds more, so a loop whose host and GPU times are
close turns host-bound when profiled, and the profile then judges another program. The full
size (12288 rows) keeps the profiled ``ideal`` GPU-bound with the baseline's syncs well over the
bar (the sizing sweep: docs/scenario-measurements.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bottlenecks import Klass
from scenarios._base import (
    Scenario,
    ScenarioConfig,
    Severity,
    Size,
    Teaching,
    Variant,
)
from scenarios._memory import F32, MemoryEstimate, mlp_data_and_training


@dataclass(kw_only=True)
class ForcedSyncSize(Size):
    """Work per variant for forced_sync."""

    depth: int = 24
    """Residual MLP blocks. Each adds ~10 forward and ~17 backward kernel launches (host time)
    and 2 forward + 4 backward GEMMs plus its share of AdamW traffic (GPU time)."""
    width: int = 1024
    """Model width: LayerNorm size and the MLP's input/output features."""
    mlp_ratio: int = 4
    """Hidden features of each MLP = mlp_ratio * width (4 as in GPT/BERT)."""
    batch: int = 12288
    """Rows (tokens) per step: scales GEMM and elementwise GPU time, not the launch count."""
    data_batches: int = 4
    """Distinct device-resident batches; step i uses batch i % data_batches (deterministic)."""
    flush_every: int = 50
    """K: sync_free copies its device-side metrics to the pinned host buffer every K steps."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("depth", "width", "mlp_ratio", "batch", "data_batches", "flush_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"size field '{name}' must be >= 1, got {getattr(self, name)}")


@dataclass(kw_only=True)
class ForcedSyncConfig(ScenarioConfig):
    """Config schema for forced_sync."""

    severity: float = 1.0
    """Fraction of steps on which the baseline runs its host-side monitoring (per-block inf/NaN
    checks, per-parameter gradient and weight norms, loss.item(), isnan(loss), torch.cuda.synchronize()
    for timing); 1.0 = every step, as debugging and logging code usually does."""
    smoke: ForcedSyncSize = field(
        default_factory=lambda: ForcedSyncSize(
            warmup_steps=3,
            steps=12,
            depth=4,
            width=32,
            mlp_ratio=4,
            batch=16,
            data_batches=2,
            flush_every=4,
        )
    )
    """CPU size: well under a second of compute per variant."""
    full: ForcedSyncSize = field(default_factory=lambda: ForcedSyncSize(warmup_steps=10, steps=50))
    """GPU size: the GPU time per step stays above the host's even under nsys."""

    def memory_estimate(self, size: Size, on_gpu: bool) -> MemoryEstimate:
        """Inputs and targets (``data_batches x batch x width`` float32 each, built in host
        memory), the MLP stack's weights, gradients and AdamW state, and the activations its
        backward keeps."""
        assert isinstance(size, ForcedSyncSize)
        one = size.data_batches * size.batch * size.width * F32
        return mlp_data_and_training(
            tensors=[one, one],
            rows=size.batch,
            width=size.width,
            hidden=size.mlp_ratio * size.width,
            depth=size.depth,
            on_gpu=on_gpu,
            what=f"inputs and targets of {size.data_batches} x {size.batch} x {size.width} "
            f"float32, and {size.depth} MLP blocks' weights and activations",
        )


SCENARIO = Scenario(
    name="forced_sync",
    bottleneck=Klass.HOST_SYNC,
    title="Per-step host syncs from monitoring: inf/NaN checks, gradient and weight norms, "
    "loss logging",
    variants=(
        Variant(
            name="baseline",
            kind="baseline",
            summary="every step: inf/NaN check on each block's output (forward hooks), "
            "`if torch.isnan(loss)`, p.grad.norm().item() and p.norm().item() per parameter, "
            "loss.item() and "
            "torch.cuda.synchronize() for perf_counter timing",
        ),
        Variant(
            name="no_sync",
            kind="fix",
            summary="the baseline with its syncs taken out and nothing else: every check, norm "
            "and read launches the same kernels and copies, each copy non_blocking into a pinned "
            "ring slot read a step later once its CUDA event completed (the scenario's removal)",
        ),
        Variant(
            name="sync_free",
            kind="fix",
            summary="the same checks and norms accumulated on the device in a few launches "
            "(one _foreach_norm over the block outputs, one over the gradients, the loss "
            "summed), copied non_blocking to a pinned buffer every K steps, read after "
            "event.query()",
        ),
        Variant(name="ideal", kind="ideal", summary="the same loop with no monitoring at all"),
    ),
    severity=Severity(
        meaning="fraction of steps on which the baseline runs its host-side monitoring "
        "(one sync per block, per parameter, plus loss checks and step timing)",
        unit="fraction of steps",
        low=0.01,
        high=1.0,
        why_default="debugging hooks (transformers' DebugUnderflowOverflow checks every module's "
        "output), gradient-norm logging per parameter and `print(loss.item())` with "
        "torch.cuda.synchronize() timing usually run on every step once switched on",
    ),
    teaching=Teaching(
        symptom="Each step is striped with short 'sync' NVTX ranges: one after every block in "
        "the forward and a long run of them after the backward, each holding a small kernel, a "
        "4-byte DtoH memcpy and cudaStreamSynchronize on the Python thread. On the GPU rows the "
        "kernels come in short bursts separated by gaps; the GPU waits while Python launches the "
        "next few kernels, and it is idle during the whole gradient-norm loop.",
        cause="bool(torch.isfinite(out).all()), bool(torch.isnan(loss)), .item() and "
        "torch.cuda.synchronize() make the host wait until the GPU has drained its queue. The "
        "CPU can then no longer run ahead: the launch-bound forward, the per-parameter norm "
        "round trips and the GPU's work add up instead of overlapping.",
        fix="Keep monitoring on the device, in few launches: one torch._foreach_norm over every "
        "block's output (a non-finite norm sum flags the block), one over the gradients, the "
        "loss summed in a device scalar (NaN shows in the sum); copy them non_blocking into "
        "pinned memory every K steps, record an event and read the buffer only once "
        "event.query() is true; time with CUDA events. The sync ranges vanish, the CPU runs a "
        "step ahead and kernels run back to back.",
    ),
    config_cls=ForcedSyncConfig,
    build=f"{__name__}.workload:build",
    removed_by="no_sync",
    expected_diagnosis="baseline: synchronizing CUDA API calls (cudaStreamSynchronize, "
    "cudaDeviceSynchronize, DtoH memcpy) inside 'sync' NVTX ranges, over a hundred per step, "
    "with GPU idle after each; no_sync, sync_free and ideal: no synchronizing call inside the measured "
    "steps (sync_free: one async DtoH copy every K steps), GPU busy back to back",
)
