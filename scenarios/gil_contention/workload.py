"""gil_contention's workloads: its models and training loops (torch).

Imported only where a variant runs (its worker, or the fork server that preloads what workers
need): the package's ``__init__`` holds the metadata the harness reads without torch.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import queue
import threading
import time
from collections import deque
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bottlenecks import BACKWARD, DATA_LOAD, FORWARD, METRICS, OPTIMIZER, phase
from scenarios._base import (
    RunContext,
    Workload,
)
from scenarios.forced_sync.workload import MLPBlock

from . import (
    GilConfig,
    GilSize,
)


def thresholds(k: int) -> list[float]:
    """The curve's ``k`` thresholds, evenly spaced in [0, 1)."""
    return [j / k for j in range(k)]


def pr_counts_python(
    probs: list[float], labels: list[float], k: int
) -> tuple[list[int], list[int]]:
    """True and false positives at each threshold, one Python comparison per prediction and
    threshold: the baseline's (and the pool's) per-step work."""
    cuts = thresholds(k)
    tp, fp = [0] * k, [0] * k
    for p, y in zip(probs, labels, strict=True):
        for j, t in enumerate(cuts):
            if p >= t:
                if y > 0.5:
                    tp[j] += 1
                else:
                    fp[j] += 1
    return tp, fp


def pr_counts_numpy(probs: np.ndarray, labels: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The same counts with whole-array numpy operations (which release the GIL), written as a
    performance engineer would: each class's predictions sorted once, and the count at or
    above each threshold read off by binary search (``p >= t`` is ``not p < t``: the loop's
    own float64 comparisons, so the counts are identical). ~0.1 ms of a core per step at
    8192 x 64, where the n x k comparison matrix took ~1 ms: on a loaded 2-core box that core
    time alone slows the loop beside it, which the measured truth reads as GIL contention on
    this fix."""
    cuts = np.asarray(thresholds(k))
    p = probs.astype(np.float64)
    pos = labels > 0.5

    def at_or_above(values: np.ndarray) -> np.ndarray:
        values = np.sort(values)
        return len(values) - np.searchsorted(values, cuts, side="left")

    return at_or_above(p[pos]), at_or_above(p[~pos])


def score_in_worker(
    probs: np.ndarray, labels: np.ndarray, k: int
) -> tuple[list[int], list[int], float]:
    """``process_pool``'s task: the baseline's Python loop, in another process (with the CPU
    seconds it took)."""
    t0 = time.thread_time()
    tp, fp = pr_counts_python(probs.tolist(), labels.tolist(), k)
    return tp, fp, time.thread_time() - t0


class Tally:
    """Running true/false positives per threshold and what the metrics code did in the window
    (updated from the metrics thread or the pool's result thread; read at the end)."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.tp = np.zeros(k, np.int64)
        self.fp = np.zeros(k, np.int64)
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.steps = 0
            self.busy_s = 0.0

    def add(self, tp: Any, fp: Any, busy_s: float = 0.0) -> None:
        with self.lock:
            self.tp += np.asarray(tp, np.int64)
            self.fp += np.asarray(fp, np.int64)
            self.steps += 1
            self.busy_s += busy_s


class MetricsThread(threading.Thread):
    """Scores each step's predictions, handed over through a queue, in Python or numpy."""

    def __init__(self, tally: Tally, vectorised: bool) -> None:
        super().__init__(name="metrics", daemon=True)
        self.inbox: queue.Queue = queue.Queue()
        self.tally, self.vectorised = tally, vectorised

    def run(self) -> None:
        while (item := self.inbox.get()) is not None:
            ready, probs, labels = item
            if ready is not None:
                ready.synchronize()  # the copy has landed; waits without the GIL
            t0 = time.thread_time()
            if self.vectorised:
                tp, fp = pr_counts_numpy(probs.numpy(), labels.numpy(), self.tally.k)
            else:
                tp, fp = pr_counts_python(probs.tolist(), labels.tolist(), self.tally.k)
            self.tally.add(tp, fp, time.thread_time() - t0)
            self.inbox.task_done()
        self.inbox.task_done()


class _Trainer(Workload):
    """The shared training loop; variants differ only in where the metrics are computed."""

    def __init__(self, cfg: GilConfig, size: GilSize, ctx: RunContext) -> None:
        self.cfg, self.size, self.ctx = cfg, size, ctx
        self.on_gpu = ctx.on_gpu
        self.samples_per_step = size.batch
        self.tally = Tally(max(1, int(cfg.severity)))
        self.handed = 0

    def setup(self) -> None:
        size, dev = self.size, self.ctx.device
        with self.ctx.stage("metrics_setup"):  # before CUDA work: a pool forks here
            self.setup_metrics()
        with self.ctx.stage("build_model"):
            torch.manual_seed(self.ctx.seed)
            with torch.device(dev):
                blocks = [MLPBlock(size.width, 4 * size.width) for _ in range(size.depth)]
                self.model = nn.Sequential(
                    *blocks, nn.LayerNorm(size.width), nn.Linear(size.width, 1)
                )
            self.opt = torch.optim.AdamW(
                self.model.parameters(), lr=1e-4, weight_decay=0.01, fused=self.on_gpu or None
            )
        with self.ctx.stage("data"):
            gen = torch.Generator().manual_seed(self.ctx.seed + 1)
            shape = (size.data_batches, size.batch, size.width)
            self.inputs = torch.randn(shape, generator=gen).to(dev)
            self.targets = (torch.rand(shape[:2], generator=gen) < 0.5).float().to(dev)

    def setup_metrics(self) -> None:
        """Start whatever scores the predictions (outside every timer)."""

    def start_window(self) -> None:
        self.drain()  # the warm-up's steps scored before the window's count starts
        self.tally.reset()
        self.handed = 0

    def _amp(self) -> contextlib.AbstractContextManager:
        if self.on_gpu:
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def step(self, index: int) -> None:
        with phase(DATA_LOAD):
            k = index % self.size.data_batches
            x, y = self.inputs[k], self.targets[k]
        with phase(FORWARD), self._amp():
            logits = self.model(x)[:, 0]
        loss = F.binary_cross_entropy_with_logits(logits.float(), y)
        with phase(BACKWARD):
            loss.backward()
        with phase(OPTIMIZER):
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
        self.after_step(logits.detach(), y)

    def to_host(
        self, logits: torch.Tensor, y: torch.Tensor
    ) -> tuple[Any, torch.Tensor, torch.Tensor]:
        """Probabilities and labels copied to pinned host memory without waiting, and the CUDA
        event that says when they have landed (None on the CPU, where nothing is in flight)."""
        probs = torch.sigmoid(logits.float())
        if not self.on_gpu:
            return None, probs, y
        host = probs.to("cpu", non_blocking=True), y.to("cpu", non_blocking=True)
        ready = torch.cuda.Event()
        ready.record()
        return ready, *host

    def after_step(self, logits: torch.Tensor, y: torch.Tensor) -> None:
        """Hand the step's predictions to the metrics code."""

    def drain(self) -> None:
        """Wait until every step handed over has been scored (after the window)."""

    def metrics(self) -> dict[str, float]:
        if not self.handed:  # ideal: no metrics code
            return {}
        self.drain()
        t = self.tally
        with t.lock:
            scored, busy = t.steps, t.busy_s
        # CPU time of the scoring code per step (in the thread, or in a pool worker)
        return {"metrics_cpu_ms_per_step": 1e3 * busy / max(1, scored)}


class ThreadedMetrics(_Trainer):
    """A metrics thread in the training process: pure Python (baseline) or numpy."""

    vectorised = False

    def setup_metrics(self) -> None:
        self.thread = MetricsThread(self.tally, self.vectorised)
        self.thread.start()

    def after_step(self, logits: torch.Tensor, y: torch.Tensor) -> None:
        with phase(METRICS):
            self.thread.inbox.put(self.to_host(logits, y))
            self.handed += 1

    def drain(self) -> None:
        self.thread.inbox.join()

    def close(self) -> None:
        self.thread.inbox.put(None)
        self.thread.join(timeout=60)


class VectorisedMetrics(ThreadedMetrics):
    """The same thread, its per-prediction loop written as whole-array numpy operations."""

    vectorised = True


#: The longest a drain waits for one pool task (seconds): a step's scoring takes milliseconds.
POOL_WAIT_S = 60.0


class PoolMetrics(_Trainer):
    """The baseline's Python scoring in a pool of worker processes, each step one task, handed
    over once the step's CUDA event has completed (polled, never waited on)."""

    def setup_metrics(self) -> None:
        # fork: the workers run plain Python on numpy arrays and never touch CUDA
        self.pool = multiprocessing.get_context("fork").Pool(self.size.pool_workers)
        self.pool.map(abs, range(self.size.pool_workers))  # the workers are up before step 0
        self.pending: deque = deque()
        self.submitted: list = []

    def _done(self, counts: tuple[list[int], list[int], float]) -> None:
        self.tally.add(*counts)

    def _submit(self) -> None:
        _, probs, labels = self.pending.popleft()
        self.submitted.append(
            self.pool.apply_async(
                score_in_worker, (probs.numpy(), labels.numpy(), self.tally.k), callback=self._done
            )
        )

    def after_step(self, logits: torch.Tensor, y: torch.Tensor) -> None:
        with phase(METRICS):
            self.pending.append(self.to_host(logits, y))
            self.handed += 1
            while self.pending and (self.pending[0][0] is None or self.pending[0][0].query()):
                self._submit()

    def drain(self) -> None:
        if self.on_gpu:
            torch.cuda.synchronize()
        while self.pending:
            self._submit()
        for task in self.submitted:
            task.wait(POOL_WAIT_S)
            if not task.ready():  # a lost task would hang the worker until its time limit
                raise RuntimeError(f"a pool task was not scored within {POOL_WAIT_S:.0f} s")
        self.submitted = []

    def close(self) -> None:
        # close, not terminate, once every task is back: the workers take their sentinels and
        # exit; terminate() can hang when it stops a worker holding the pool's queue lock (a
        # worker once stayed in its tear-down until the run's limit)
        if all(t.ready() for t in self.submitted):
            self.pool.close()
        else:
            self.pool.terminate()
        self.pool.join()


class Ideal(_Trainer):
    """The same loop with no metrics at all."""


VARIANTS: dict[str, type[_Trainer]] = {
    "baseline": ThreadedMetrics,
    "process_pool": PoolMetrics,
    "vectorised": VectorisedMetrics,
    "ideal": Ideal,
}


def build(cfg: GilConfig, size: GilSize, variant: str, ctx: RunContext) -> Workload:
    return VARIANTS[variant](cfg, size, ctx)
