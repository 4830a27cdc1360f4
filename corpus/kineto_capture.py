"""Run one wild-corpus script, unchanged, under the PyTorch Profiler: its Kineto trace for HTA.

    python3 corpus/kineto_capture.py OUT_DIR NAME SCRIPT.py [script args...]

The whole process is captured, as nsys captures it (capture-corpus.sh), with CPU and (where
there is one) CUDA activities; a script run as several ranks (torchrun) writes one trace per
rank, ``OUT_DIR/NAME-rank<RANK>.pt.trace.json.gz``, with ``distributedInfo`` once the script has
set up its process group. The script runs as ``__main__`` with its own arguments (runpy), so
nothing of it changes but the profiler around it.
"""

from __future__ import annotations

import os
import runpy
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    out_dir, name, script = Path(argv[0]), argv[1], argv[2]
    import torch
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        acts.append(ProfilerActivity.CUDA)
    rank = int(os.environ.get("RANK", "0"))
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"{name}-rank{rank}.pt.trace.json.gz"
    sys.argv = [script, *argv[3:]]
    t0 = time.perf_counter()
    code = 0
    with profile(activities=acts) as prof:
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    ran_s = time.perf_counter() - t0
    prof.export_chrome_trace(str(out))
    print(f"kineto: {out} ({out.stat().st_size} bytes; script {ran_s:.1f} s, "
          f"trace written in {time.perf_counter() - t0 - ran_s:.1f} s)", file=sys.stderr)  # fmt: skip
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
