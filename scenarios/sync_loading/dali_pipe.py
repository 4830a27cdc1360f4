"""NVIDIA DALI input pipeline: JPEG decode on the GPU (``device="mixed"``, nvJPEG and the
hardware decoder where the GPU has one), resize and normalise there too, prefetched ahead of
the training step. On a CPU box the same graph runs on DALI's CPU operators."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import torch

from scenarios.sync_loading.data import MEAN, STD


def dali_batches(
    files: list[Path],
    *,
    num_classes: int,
    batch_size: int,
    size: int,
    threads: int,
    hw_decoder_load: float,
    device: torch.device,
    seed: int,
    prefetch: int,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Endless iterator of (NCHW float with channels_last strides, int64 labels) on ``device``."""
    try:
        from nvidia.dali import fn, pipeline_def, types
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy
    except ImportError as exc:
        raise RuntimeError(
            "variant 'dali' needs NVIDIA DALI: install the project with the extra "
            "(pip install -e '.[dali]')"
        ) from exc

    gpu = device.type == "cuda"

    @pipeline_def
    def pipe() -> tuple:
        jpegs, labels = fn.readers.file(
            files=[str(f) for f in files],
            labels=[i % num_classes for i in range(len(files))],
            random_shuffle=False,
            name="Reader",
        )
        if gpu:
            images = fn.decoders.image(
                jpegs, device="mixed", output_type=types.RGB, hw_decoder_load=hw_decoder_load
            )
        else:
            images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
        images = fn.resize(images, resize_x=size, resize_y=size)
        images = fn.crop_mirror_normalize(
            images,
            dtype=types.FLOAT,
            output_layout="HWC",
            mean=[m * 255 for m in MEAN],
            std=[s * 255 for s in STD],
        )
        return images, labels

    p = pipe(
        batch_size=batch_size,
        num_threads=threads,
        device_id=device.index or 0 if gpu else None,
        seed=seed,
        prefetch_queue_depth=prefetch,
    )
    p.build()
    it = DALIGenericIterator(
        [p],
        ["x", "y"],
        reader_name="Reader",
        last_batch_policy=LastBatchPolicy.DROP,
        auto_reset=True,
    )
    while True:
        for batch in it:
            x = batch[0]["x"].permute(0, 3, 1, 2)  # NHWC storage = channels_last NCHW view
            y = batch[0]["y"].view(-1).long()
            yield x, (y.to(device, non_blocking=True) if gpu else y)
