"""sync_checkpoint's workloads (torch): one training loop, three ways to write its checkpoint.

Imported only where a variant runs (its worker, or the fork server that preloads what workers
need): the package's ``__init__`` holds the metadata the harness reads without torch.
"""

from __future__ import annotations

import queue
import shutil
import tempfile
import threading
import time
import warnings
from concurrent.futures import Future
from pathlib import Path

import torch
import torch.nn.functional as F

from bottlenecks import BACKWARD, CHECKPOINT, FORWARD, OPTIMIZER, phase
from scenarios import _models
from scenarios._base import RunContext, Workload

from . import SyncCheckpointConfig, SyncCheckpointSize


class BlockingSave:
    """``torch.save(model.state_dict(), path)`` on the calling thread."""

    def __init__(self, model: torch.nn.Module, folder: Path) -> None:
        self.model, self.path = model, folder / "latest.pt"
        self.writer_s: list[float] = []

    def save(self) -> None:
        torch.save(self.model.state_dict(), self.path)

    def before_update(self) -> None:
        """Called before each optimizer step: nothing to wait for."""

    def finish(self) -> None:
        """Wait until every checkpoint asked for is written."""


class SnapshotSave(BlockingSave):
    """The weights copied into pinned buffers on a side stream; a writer thread saves the
    buffers. The next snapshot waits for the previous write (one set of buffers), so a writer
    slower than the period costs the loop that wait."""

    def __init__(self, model: torch.nn.Module, folder: Path) -> None:
        super().__init__(model, folder)
        self.cuda = next(model.parameters()).is_cuda
        self.buffers = {
            k: torch.empty(t.shape, dtype=t.dtype, pin_memory=self.cuda)
            for k, t in model.state_dict().items()
        }
        self.stream = torch.cuda.Stream() if self.cuda else None
        self.copied: torch.cuda.Event | None = None
        self.idle = threading.Event()
        self.idle.set()
        self.jobs: queue.Queue[torch.cuda.Event | bool | None] = queue.Queue()
        self.thread = threading.Thread(target=self._write, name="checkpoint-writer", daemon=True)
        self.thread.start()

    def save(self) -> None:
        self.idle.wait()  # the buffers are free once the last write is done
        self.idle.clear()
        state = self.model.state_dict()
        if self.stream is None:
            for k, t in state.items():
                self.buffers[k].copy_(t)
            self.jobs.put(True)
            return
        self.stream.wait_stream(torch.cuda.current_stream())  # after this step's update
        with torch.cuda.stream(self.stream):
            for k, t in state.items():
                self.buffers[k].copy_(t, non_blocking=True)
            self.copied = torch.cuda.Event()
            self.copied.record(self.stream)
        self.jobs.put(self.copied)

    def before_update(self) -> None:
        if self.copied is not None:  # the GPU, not the host, waits for the snapshot
            torch.cuda.current_stream().wait_event(self.copied)
            self.copied = None

    def _write(self) -> None:
        while (job := self.jobs.get()) is not None:
            t0 = time.perf_counter()
            if isinstance(job, torch.cuda.Event):
                job.synchronize()
            torch.save(self.buffers, self.path)
            self.writer_s.append(time.perf_counter() - t0)
            self.idle.set()

    def finish(self) -> None:
        self.idle.wait()

    def close(self) -> None:
        self.finish()
        self.jobs.put(None)
        self.thread.join()


class DcpAsyncSave(BlockingSave):
    """``torch.distributed.checkpoint.async_save`` of the state dict in one process (no
    process group); the previous save is awaited before the next is asked for."""

    def __init__(self, model: torch.nn.Module, folder: Path) -> None:
        super().__init__(model, folder)
        import torch.distributed.checkpoint as dcp

        if not hasattr(dcp, "async_save"):
            raise RuntimeError(
                f"torch {torch.__version__} has no torch.distributed.checkpoint.async_save"
            )
        self.dcp, self.folder = dcp, folder / "dcp"
        self.future: Future | None = None
        self.written = threading.Event()
        # one process on purpose, and the same folder every time: say neither on every save
        warnings.filterwarnings("ignore", message=".*assuming the intent is to save in a single")
        warnings.filterwarnings("ignore", message=".*Detected an existing checkpoint in")

    def save(self) -> None:
        self.finish()
        t0 = time.perf_counter()
        state = {"model": self.model.state_dict()}
        response = self.dcp.async_save(state, checkpoint_id=self.folder)
        # torch >= 2.9 may answer with staging and upload futures apart
        self.future = getattr(response, "upload_completion", response)
        self.written.clear()

        def written(_: Future) -> None:  # in the writer's thread, once the files are done
            self.writer_s.append(time.perf_counter() - t0)
            self.written.set()

        self.future.add_done_callback(written)

    def finish(self) -> None:
        if self.future is not None:
            self.future.result()  # raises what the writer raised
            self.written.wait()  # its callbacks run after result() returns
            self.future = None


SAVERS: dict[str, type[BlockingSave]] = {
    "baseline": BlockingSave,
    "async_snapshot": SnapshotSave,
    "async_save": DcpAsyncSave,
}


class Loop(Workload):
    """The feed-forward stack (fp32 weights, bf16 autocast, fused AdamW); every ``every``
    steps (0: never) the variant's saver writes the model's state dict."""

    def __init__(
        self, cfg: SyncCheckpointConfig, size: SyncCheckpointSize, ctx: RunContext, variant: str
    ) -> None:
        self.size, self.ctx, self.variant = size, ctx, variant
        self.every = cfg.every(size) if variant in SAVERS else 0
        self.period_steps = max(1, self.every)
        self.samples_per_step = size.tokens
        self.saver: BlockingSave | None = None
        self.folder: Path | None = None
        self.saves = self.steps = 0
        self.save_s = 0.0

    def setup(self) -> None:
        s, dev = self.size, self.ctx.device
        with self.ctx.stage("build_model"), torch.device(dev):
            self.model = _models.FeedForwardStack(s.width, s.hidden, s.depth)
            self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-5, fused=self.ctx.on_gpu)
        gen = torch.Generator(device=dev).manual_seed(self.ctx.seed)
        with self.ctx.stage("data"):
            self.batches = [
                tuple(torch.randn(s.tokens, s.width, generator=gen, device=dev) for _ in range(2))
                for _ in range(s.num_batches)
            ]
        with self.ctx.stage("first_step"):
            self.train(0)
        if self.every:
            self.ctx.cache_dir.mkdir(parents=True, exist_ok=True)
            self.folder = Path(tempfile.mkdtemp(prefix="sync_checkpoint-", dir=self.ctx.cache_dir))
            with self.ctx.stage("first_checkpoint"):  # files, buffers, imports: not in the window
                self.saver = SAVERS[self.variant](self.model, self.folder)
                self.saver.save()
                self.saver.finish()

    def train(self, index: int) -> None:
        x, y = self.batches[index % len(self.batches)]
        with phase(FORWARD), torch.autocast(self.ctx.device.type, dtype=torch.bfloat16):
            loss = F.mse_loss(self.model(x), y)
        with phase(BACKWARD):
            loss.backward()
        with phase(OPTIMIZER):
            if self.saver is not None:
                self.saver.before_update()
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)

    def start_window(self) -> None:
        self.saves = self.steps = 0
        self.save_s = 0.0
        if self.saver is not None:
            self.saver.writer_s.clear()

    def step(self, index: int) -> None:
        self.train(index)
        if self.saver is not None and (index + 1) % self.every == 0:
            t0 = time.perf_counter()
            with phase(CHECKPOINT):
                self.saver.save()
            self.save_s += time.perf_counter() - t0
            self.saves += 1
        self.steps += 1

    def metrics(self) -> dict[str, float]:
        out = {
            "params_m": _models.parameter_count(self.model) / 1e6,
            "checkpoint_mb": self.size.checkpoint_mb(),
            "checkpoints_per_step": self.saves / max(1, self.steps),
        }
        if self.saves:
            out["save_loop_ms_mean"] = 1e3 * self.save_s / self.saves
        if self.saver is not None:
            self.saver.finish()
            if self.saver.writer_s and self.variant != "baseline":
                out["save_writer_ms_mean"] = (
                    1e3 * sum(self.saver.writer_s) / len(self.saver.writer_s)
                )
        return out

    def close(self) -> None:
        if self.saver is not None:
            if isinstance(self.saver, SnapshotSave):
                self.saver.close()
            else:
                self.saver.finish()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)


def build(
    cfg: SyncCheckpointConfig, size: SyncCheckpointSize, variant: str, ctx: RunContext
) -> Workload:
    """The workload for ``variant``."""
    return Loop(cfg, size, ctx, variant)
