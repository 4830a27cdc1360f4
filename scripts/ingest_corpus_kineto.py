"""Unpack the corpus's Kineto captures and cut each to its last stretch of GPU work.

    python scripts/ingest_corpus_kineto.py CORPUS_KINETO_TAR... [--last-s 1.0] [--dest corpus/wild]
    python scripts/ingest_corpus_kineto.py --fixture TRACE.pt.trace.json.gz STEPS OUT.pt.trace.json.xz

``scripts/device/capture-corpus-kineto.sh`` profiles each wild script whole (import, CUDA
set-up, warm-up, autotuning, the timed loop) with the PyTorch Profiler, as nsys profiles it.
HTA has no steady-state search: its breakdowns are over the whole trace, so a whole-process
trace is mostly start-up. A PyTorch Profiler user profiles a few steps of the loop
(``torch.profiler.schedule``); the equivalent for scripts we may not change is a cut that knows
nothing of the script: every event that ends before the last ``--last-s`` seconds of GPU
activity (the last GPU event's end) is dropped, with the trace's metadata kept. The scripts'
timed loops run 1.0-1.5 s after their warm-up, so the stretch kept is loop steps.

Writes ``DEST/kineto/<entry>/<entry>-rank<r>.pt.trace.json.gz`` (git-ignored: too big to commit);
``python -m harness.tools.hta DEST`` then writes ``DEST/hta_numbers.json``, which is committed.

``--fixture``: one run's Kineto trace cut to its first STEPS ``ProfilerStep`` ranges and to what
HTA reads (:func:`first_steps`), xz-compressed: how ``tests/data/kineto_gpu/`` was made from the
H200 run of ``results/reference/h200/tools`` (sync_loading baseline: every step; forced_sync
baseline and kernel_flood cuda_graphs: 2; the others: 3; gil_contention baseline: 5).
"""

from __future__ import annotations

import argparse
import gzip
import json
import lzma
import sys
import tarfile
import tempfile
from pathlib import Path

GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"})


def last_stretch(trace: dict, last_s: float) -> tuple[dict, int, int]:
    """``trace`` with only the events that end within ``last_s`` of the last GPU event's end
    (metadata events, ``ph`` M, kept); (the trace, events before, events after)."""
    events = trace.get("traceEvents", [])
    gpu_ends = [float(e["ts"]) + float(e.get("dur", 0)) for e in events
                if e.get("cat") in GPU_CATS and "ts" in e]  # fmt: skip
    if not gpu_ends:
        return trace, len(events), len(events)
    cut = max(gpu_ends) - last_s * 1e6
    kept = [e for e in events
            if e.get("ph") == "M" or "ts" not in e
            or float(e["ts"]) + float(e.get("dur", 0) or 0) >= cut]  # fmt: skip
    return {**trace, "traceEvents": kept}, len(events), len(kept)


#: What HTA's analyses read (kernels, copies, sets, the runtime calls that launched them, the
#: profiler's step ranges); a fixture keeps only these.
HTA_CATS = frozenset({*GPU_CATS, "cuda_runtime", "cuda_driver", "user_annotation"})


def first_steps(trace: dict, steps: int) -> dict:
    """``trace`` cut to its first ``steps`` ``ProfilerStep#N`` ranges, with only the events of
    :data:`HTA_CATS` (and metadata): a small real fixture HTA still reads whole."""
    events = trace.get("traceEvents", [])
    marks = sorted((e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")),
                   key=lambda e: float(e["ts"]))[:steps]  # fmt: skip
    if not marks:
        raise ValueError("no ProfilerStep# ranges in the trace")
    lo = float(marks[0]["ts"])
    hi = float(marks[-1]["ts"]) + float(marks[-1]["dur"])
    kept = [e for e in events if e.get("ph") == "M" or (
        e.get("cat") in HTA_CATS and "ts" in e and lo <= float(e["ts"]) <= hi)]  # fmt: skip
    return {**trace, "traceEvents": [_slim(e) for e in kept]}


#: The event args HTA's parser reads; the others (grid, registers, occupancy...) are dropped.
HTA_ARGS = frozenset({"correlation", "stream", "device", "External id", "cbid"})


def _slim(event: dict) -> dict:
    if event.get("ph") == "M" or "args" not in event:
        return event
    return {**event, "args": {k: v for k, v in event["args"].items() if k in HTA_ARGS}}


def ingest(tar: Path, dest: Path, last_s: float) -> list[str]:
    """One capture tarball's traces, cut, into ``dest/kineto/``; a line per trace."""
    lines = []
    with tempfile.TemporaryDirectory() as tmp, tarfile.open(tar) as tf:
        tf.extractall(tmp, filter="data")
        for src in sorted(Path(tmp).glob("kineto/*/*.pt.trace.json.gz")):
            entry = src.parent.name
            with gzip.open(src, "rt") as fh:
                trace = json.load(fh)
            cut, before, after = last_stretch(trace, last_s)
            out = dest / "kineto" / entry / src.name
            out.parent.mkdir(parents=True, exist_ok=True)
            tmp_out = out.with_name(f".{out.name}.tmp")
            with gzip.open(tmp_out, "wt") as fh:
                json.dump(cut, fh)
            tmp_out.replace(out)
            lines.append(f"{entry}/{src.name}: {src.stat().st_size} B, {before} -> {after} "
                         f"events, {out.stat().st_size} B")  # fmt: skip
    return lines


def fixture(src: Path, steps: int, out: Path) -> str:
    """``src`` cut by :func:`first_steps` into ``out`` (xz); a line for the log."""
    with gzip.open(src, "rt") as fh:
        cut = first_steps(json.load(fh), steps)
    data = json.dumps(cut, separators=(",", ":")).encode()
    out.write_bytes(lzma.compress(data, preset=9 | lzma.PRESET_EXTREME))
    return f"{out}: {len(cut['traceEvents'])} events, {out.stat().st_size} B"


def main() -> int:
    if sys.argv[1:2] == ["--fixture"]:
        if len(sys.argv) != 5:
            print("usage: --fixture TRACE.pt.trace.json.gz STEPS OUT.pt.trace.json.xz",
                  file=sys.stderr)  # fmt: skip
            return 2
        print(fixture(Path(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("tars", nargs="+", type=Path)
    ap.add_argument("--last-s", type=float, default=1.0)
    ap.add_argument("--dest", type=Path, default=Path("corpus/wild"))
    args = ap.parse_args()
    if args.last_s <= 0:
        print("--last-s must be > 0", file=sys.stderr)
        return 2
    for tar in args.tars:
        for line in ingest(tar, args.dest, args.last_s):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
