"""Transformer encoder trained with a log-shipping thread beside it: the loop appends one JSON
line per step to a local log (step, learning rate, wall time, samples/s: host values, no device
reads), and a shipper thread wakes every 20 ms, reads what was appended, compresses it with zlib
and writes it to a spool folder for upload, then sleeps again.

A second Python thread in a training process looks like a GIL suspect, but this one spends its
time in time.sleep, file reads and writes and zlib, all of which release the GIL; it holds the
GIL for well under a millisecond per wake-up, so the training thread barely waits for it.
# H100 estimate: GPU ~15 ms/step (6 encoder layers, d_model 1024, 32 x 512 tokens, bf16);
# launches ~5 ms; the shipper ~0.1 ms of Python per 20 ms -> none ~15 ms.
# --fix noship (no shipper thread; the log is still written): within a few % of none (clean).
"""

import argparse
import json
import os
import tempfile
import threading
import time
import zlib
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F


class Shipper(threading.Thread):
    """Every `period` s: read the log's new bytes, compress them, write a spool file."""

    def __init__(self, log_path, spool, period=0.02):
        super().__init__(daemon=True)
        self.log_path, self.spool, self.period = log_path, spool, period
        self.stop = threading.Event()
        self.offset = 0
        self.shipped = 0

    def ship_once(self):
        with open(self.log_path, "rb") as fh:
            fh.seek(self.offset)
            chunk = fh.read()
        if not chunk:
            return
        self.offset += len(chunk)
        packed = zlib.compress(chunk, 6)
        with open(Path(self.spool) / f"part_{self.shipped % 8}.z", "wb") as out:
            out.write(packed)
        self.shipped += 1

    def run(self):
        while not self.stop.is_set():
            self.ship_once()
            time.sleep(self.period)
        self.ship_once()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fix", default="none", choices=["none", "noship"])
    p.add_argument("--seconds", type=float, default=1.5)
    p.add_argument("--device", default="auto")
    args = p.parse_args()
    device = torch.device(
        args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    )
    cuda = device.type == "cuda"
    batch, seq, d, layers = (32, 512, 1024, 6) if cuda else (4, 64, 64, 2)

    work = Path(tempfile.mkdtemp(prefix="gil_log_shipper_"))
    log_path, spool = work / "train.log", work / "spool"
    spool.mkdir()
    log = open(log_path, "a", buffering=1)
    shipper = None
    if args.fix == "none":
        shipper = Shipper(log_path, spool)
        shipper.start()

    torch.manual_seed(0)
    with torch.device(device):
        layer = nn.TransformerEncoderLayer(
            d, 16, 4 * d, dropout=0.0, batch_first=True, norm_first=True
        )
        model = nn.Sequential(nn.TransformerEncoder(layer, layers), nn.Linear(d, d))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=cuda or None)
    x = torch.randn(batch, seq, d, device=device)
    target = torch.randn(batch, seq, d, device=device)
    state = {"i": 0, "t": time.perf_counter()}

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            out = model(x)
        loss = F.mse_loss(out.float(), target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        now = time.perf_counter()
        state["i"] += 1
        rate = batch / max(now - state["t"], 1e-9)
        state["t"] = now
        lr = opt.param_groups[0]["lr"]
        log.write(
            json.dumps({"step": state["i"], "lr": lr, "time": now, "samples_per_s": rate}) + "\n"
        )

    for _ in range(3):
        step()
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    n = 0
    while n < 10 or time.perf_counter() - t0 < args.seconds:
        step()
        n += 1
    if cuda:
        torch.cuda.synchronize()
    ms = (time.perf_counter() - t0) * 1e3 / n
    if shipper is not None:
        shipper.stop.set()
        shipper.join()
    log.close()
    for f in [*spool.iterdir(), log_path]:
        f.unlink()
    spool.rmdir()
    os.rmdir(work)
    print("RESULT " + json.dumps({"step_ms": round(ms, 3), "steps": n, "fix": args.fix}))


if __name__ == "__main__":
    main()
