"""gil_decoy's workloads (torch).

Imported only where a variant runs (its worker, or the fork server that preloads what workers
need): the package's ``__init__`` holds the metadata the harness reads without torch.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
import time
import zlib
from pathlib import Path

import torch

from bottlenecks import phase
from scenarios import RunContext, Workload
from scenarios.gil_contention import GilConfig, GilSize
from scenarios.gil_contention.workload import Ideal as _Loop


class Shipper(threading.Thread):
    """Every ``period_s``: read the log's new bytes, compress them, write one spool file."""

    def __init__(self, log: Path, spool: Path, period_s: float = 0.02) -> None:
        super().__init__(name="log-shipper", daemon=True)
        self.log, self.spool, self.period_s = log, spool, period_s
        self.stop = threading.Event()
        self.offset = self.parts = 0

    def ship(self) -> None:
        with open(self.log, "rb") as fh:
            fh.seek(self.offset)
            chunk = fh.read()
        if chunk:
            self.offset += len(chunk)
            (self.spool / f"part_{self.parts % 8}.z").write_bytes(zlib.compress(chunk, 6))
            self.parts += 1

    def run(self) -> None:
        while not self.stop.is_set():
            time.sleep(self.period_s)
            self.ship()


class LoggedLoop(_Loop):
    """gil_contention's loop, logging one line per step; with a shipper thread or without."""

    ship = True

    def setup_metrics(self) -> None:
        self.work = Path(tempfile.mkdtemp(prefix="gil_decoy_"))
        (self.work / "spool").mkdir()
        self.log = open(self.work / "train.log", "a", buffering=1)
        self.shipper = Shipper(self.work / "train.log", self.work / "spool") if self.ship else None
        if self.shipper is not None:
            self.shipper.start()

    def after_step(self, logits: torch.Tensor, y: torch.Tensor) -> None:
        with phase("metrics"):
            line = {"time": time.time(), "lr": self.opt.param_groups[0]["lr"]}
            self.log.write(json.dumps(line) + "\n")

    def close(self) -> None:
        if self.shipper is not None:
            self.shipper.stop.set()
            self.shipper.join(timeout=10)
        self.log.close()
        shutil.rmtree(self.work, ignore_errors=True)


class Unshipped(LoggedLoop):
    ship = False


def build(cfg: GilConfig, size: GilSize, variant: str, ctx: RunContext) -> Workload:
    return {"baseline": LoggedLoop, "no_shipper": Unshipped, "ideal": _Loop}[variant](
        cfg, size, ctx
    )
