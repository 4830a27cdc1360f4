"""nchw_conv: a plain 3x3 conv net trained under bf16 autocast in PyTorch's default NCHW layout
(class ``layout_transpose``).

The net is VDSR-shaped (an image-restoration model: a 3->width conv, ``depth`` (severity)
width->width 3x3 convs with ReLU at full resolution, a width->3 conv and a global residual),
trained with ``cudnn.benchmark`` on. Tensor-core convolutions want NHWC; given NCHW tensors,
cuDNN converts each convolution's input, output and gradients to NHWC and back (kernels such as
``nchwToNhwcKernel``/``nhwcToNchwKernel``, or NCHW kernel variants slower than the NHWC ones),
forward, data-gradient and weight-gradient alike. The fix is ``channels_last`` for model and
input; it is also the removal: the same network with no conversion, timed beside the baseline.

Why this size (an estimate from FLOPs and bytes, not a measurement). Batch 128 of 128 x 128
images, width 32, 16 middle convs: each activation is 67 M elements (134 MB in bf16). Per middle
conv: 116 GFLOP forward and backward (~0.46 ms at ~250 TFLOP/s, a narrow conv's tensor-core
rate), bias and ReLU ~1.1 GB of traffic (~0.28 ms at ~3.8 TB/s); in NCHW six conversions (input
and output forward, gradient in and out for dgrad, input and gradient for wgrad) move ~1.6 GB
more (~0.46 ms at ~3.5 TB/s). Narrow channels at high resolution are where the conversions
weigh most against the convolution's arithmetic.

| variant | per middle conv | step (16 convs, stem, tail, loss) | speedup |
| --- | ---: | ---: | ---: |
| baseline (NCHW) | ~1.2 ms | ~20 ms | 1 |
| channels_last | ~0.74 ms | ~12.5 ms | ~1.6x |

A full variant's warm-up and window take ~0.7 s (19 steps of ~36 ms in the baseline,
docs/scenario-measurements.md; cuDNN's autotuning runs in set-up); the saved activations need
~7 GB.
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


@dataclass(kw_only=True)
class NchwConvSize(Size):
    """Work per variant for nchw_conv."""

    warmup_steps: int = 3
    """Steps before the window (cuDNN's autotuning already ran in set-up)."""
    steps: int = 16
    """Steps in the measured window: both variants are GPU-bound, their steps repeat within 1%."""
    batch_size: int = 128
    """Images per step."""
    image_size: int = 128
    """Side of the square RGB images, px (every conv runs at this resolution)."""
    width: int = 32
    """Channels of the middle convolutions."""
    depth_override: int = 0
    """Middle convolutions at this size when > 0, overriding severity; 0 takes them from
    severity."""
    num_batches: int = 2
    """Distinct (noisy, clean) image batches made on the device in set-up."""
    autotune_steps: int = 2
    """Training steps run in set-up, so cuDNN's benchmark search is outside every timer."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("batch_size", "image_size", "width", "num_batches", "autotune_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"size field '{name}' must be >= 1, got {getattr(self, name)}")


@dataclass(kw_only=True)
class NchwConvConfig(ScenarioConfig):
    """Config schema for nchw_conv."""

    severity: float = 16
    """Middle 3x3 convolutions (width -> width, full resolution), each converted NCHW <-> NHWC
    forward and backward."""
    smoke: NchwConvSize = field(
        default_factory=lambda: NchwConvSize(
            warmup_steps=2,
            steps=6,
            batch_size=2,
            image_size=16,
            width=8,
            depth_override=2,
            num_batches=2,
            autotune_steps=1,
        )
    )
    """CPU size: seconds per variant."""
    full: NchwConvSize = field(default_factory=NchwConvSize)
    """GPU size: 128 images of 128 px through 16 width-32 convolutions."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.severity != int(self.severity):
            raise ValueError(
                f"scenario.nchw_conv.severity={self.severity} must be a whole number of layers"
            )

    def depth(self, size: NchwConvSize) -> int:
        """Middle convolutions at ``size``."""
        return size.depth_override or int(self.severity)


SCENARIO = Scenario(
    name="nchw_conv",
    bottleneck=Klass.LAYOUT_TRANSPOSE,
    title="Convolutions in NCHW under bf16",
    variants=(
        Variant(
            name="baseline",
            kind="baseline",
            summary="a VDSR-style 3x3 conv net under bf16 autocast, model and images in NCHW "
            "(PyTorch's default), cudnn.benchmark on",
        ),
        Variant(
            name="channels_last",
            kind="fix",
            summary="model.to(memory_format=torch.channels_last) and the images converted to "
            "channels_last each step",
        ),
    ),
    severity=Severity(
        meaning="middle 3x3 convolutions of the net (32 channels, full resolution)",
        unit="layers",
        low=1,
        high=64,
        why_default="16 narrow convolutions at full resolution is the shape of image-restoration "
        "nets (VDSR has 20 of 64 channels, DnCNN 17), built and fed in NCHW because that is "
        "what nn.Conv2d and every image loader produce, with autocast turned on for speed",
    ),
    teaching=Teaching(
        symptom="Every convolution, forward and in both backward passes, sits between "
        "layout-conversion kernels (nchwToNhwcKernel, nhwcToNchwKernel or cuDNN's transpose "
        "kernels) that each read and write a whole activation; the GPU is busy, the host "
        "waits for nothing, and the conv kernels themselves may be NCHW variants slower than "
        "the NHWC ones.",
        cause="cuDNN's tensor-core convolutions work in NHWC. Given NCHW bf16 tensors it "
        "converts inputs, outputs and gradients to NHWC and back around every call (or picks "
        "a slower NCHW kernel), so a conv net pays several extra passes over each activation "
        "per layer and step.",
        fix="Keep the model and its inputs in channels_last (model.to(memory_format="
        "torch.channels_last), x.contiguous(memory_format=torch.channels_last)): the "
        "convolutions read and write NHWC directly, the conversion kernels disappear and the "
        "elementwise ops between them follow the layout.",
    ),
    config_cls=NchwConvConfig,
    build=f"{__name__}.workload:build",
    expected_diagnosis="baseline: layout-conversion kernels around every convolution, forward "
    "and backward, a large share of GPU time; channels_last: NHWC convolution kernels with no "
    "conversions",
    removed_by="channels_last",
    limit_note="No ideal variant: channels_last is the same network, weights and images in "
    "NHWC, so it is the baseline with the cause removed and nothing else changed; it is timed "
    "beside the baseline in every round. Its own removal is itself.",
)
