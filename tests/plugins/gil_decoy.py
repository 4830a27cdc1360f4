"""Test-only scenario: gil_contention's decoy, a second Python thread that does not contend.

The same training loop as ``scenarios.gil_contention`` (its ``ideal``), with a log-shipping
thread beside it: every step the loop appends a JSON line of host values to a log, and the
shipper wakes every 20 ms, reads what was appended, compresses it with zlib and writes it to a
spool folder, then sleeps. Sleeping, file I/O and zlib all release the GIL, so the training
thread hardly waits for it. Used only to capture the decoy fixture of
``tests/test_gil_contention.py`` (``BOTTLENECK_SCENARIO_MODULES=tests.plugins.gil_decoy``); its
``baseline`` is the decoy, not a bottleneck, whatever the contract calls it.
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
from scenarios import RunContext, Scenario, Severity, Teaching, Variant, Workload
from scenarios.gil_contention import GilConfig, GilSize
from scenarios.gil_contention import Ideal as _Loop


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


class GilDecoyConfig(GilConfig):
    """gil_contention's schema under another name."""


SCENARIO = Scenario(
    name="gil_decoy",
    bottleneck="gil_contention",
    title="Decoy: a log-shipping thread that sleeps and does I/O (releases the GIL)",
    variants=(
        Variant(name="baseline", kind="baseline", summary="loop + log-shipping thread (decoy)"),
        Variant(name="no_shipper", kind="fix", summary="the log written, no shipper thread"),
        Variant(name="ideal", kind="ideal", summary="no log at all"),
    ),
    severity=Severity(
        meaning="unused (the decoy has no knob)", unit="1", low=1, high=256, why_default="unused"
    ),
    teaching=Teaching(
        symptom="A second Python thread is active in the process, but the training thread's "
        "OS-runtime row shows few and short condition waits.",
        cause="The shipper sleeps, reads and writes files and compresses with zlib: all release "
        "the GIL, so it holds it for well under a millisecond per wake-up.",
        fix="None needed: this is the decoy a GIL detector must not fire on; removing the "
        "thread changes the step time by a few percent at most.",
    ),
    config_cls=GilDecoyConfig,
    build=build,
    expected_diagnosis="no class on any variant (test-only decoy)",
)
