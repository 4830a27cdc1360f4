#!/usr/bin/env bash
# On the GPU machine, from the checkout's root, with the machine's own python3 (no install):
#   OUT=$OUT bash scripts/device/ncu-time.sh RUN_DIR [harness kernels options]
# The kernels row (`harness kernels RUN_DIR`, harness/kernels) on a finished run folder of
# `harness run` made on this machine, timed, with what its time model (harness/kernels/
# select.py: PROCESS_S, LAUNCH_S, TAIL_S) is fitted to. Under $OUT:
#   ncu-time.txt   the row's exit code and wall, then one line per variant: its state, how it
#                  got its kernels (its own run, read from another variant's, first launches),
#                  its profiled launches and their replay passes, when its process started and
#                  how long it ran, and the worker's own parts under ncu (CUDA start, set-up,
#                  warm-up, window);
#   kernels.stdout the row's own output (the per-variant summary at its end);
#   run/           kernels.csv, kernel_limits.csv, kernels_run.json, diagnosis.csv and
#                  verdicts.csv (with the witness the row brought in), and per variant
#                  <scenario>/<variant>/{ncu.csv,outcome.json,result.json,stdout.log,stderr.log}.
# Everything is small text; nothing else runs beside it.
set -uo pipefail
RUN_DIR=${1:?usage: OUT=DIR bash scripts/device/ncu-time.sh RUN_DIR [harness kernels options]}
shift
OUT=${OUT:-/var/tmp/ncu-time}
PY=${PYTHON:-python3}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
mkdir -p "$OUT/run"
t0=$(date +%s%N)
timeout -k 5 600 "$PY" -m harness.kernels.cli "$RUN_DIR" "$@" > "$OUT/kernels.stdout" 2>&1
rc=$?
echo "harness kernels rc=$rc wall_ms=$(( ($(date +%s%N) - t0) / 1000000 ))" | tee "$OUT/ncu-time.txt"
for f in kernels.csv kernel_limits.csv kernels_run.json diagnosis.csv verdicts.csv; do
  [ -f "$RUN_DIR/$f" ] && cp "$RUN_DIR/$f" "$OUT/run/"
done
for d in "$RUN_DIR"/*/*/ncu; do
  [ -d "$d" ] || continue
  v=$(basename "$(dirname "$d")"); s=$(basename "$(dirname "$(dirname "$d")")")
  mkdir -p "$OUT/run/$s/$v"
  for f in ncu.csv outcome.json result.json stdout.log stderr.log; do
    [ -f "$d/$f" ] && cp "$d/$f" "$OUT/run/$s/$v/"
  done
done
"$PY" - "$OUT/run" >> "$OUT/ncu-time.txt" 2>&1 <<'PYEOF'
import sys
from pathlib import Path

import pandas as pd

run = Path(sys.argv[1])
if not (run / "kernel_limits.csv").is_file():
    print("no kernel_limits.csv: the row did not run (kernels.stdout says why)")
    sys.exit(0)
limits = pd.read_csv(run / "kernel_limits.csv")
kernels = pd.read_csv(run / "kernels.csv") if (run / "kernels.csv").is_file() else pd.DataFrame()
passes = {}
if len(kernels) and "passes" in kernels:
    own = kernels[kernels["measured_in"] == kernels["scenario"] + "/" + kernels["variant"]]
    passes = own.groupby(["scenario", "variant"])["passes"].agg(["min", "max"]).to_dict("index")
cols = ["state", "selection", "launches", "kernels_reused", "start_s", "wall_s",
        "worker_cuda_init_s", "worker_setup_s", "worker_warmup_s", "worker_window_s"]
print("variant\t" + "\t".join(cols) + "\tpasses")
for r in limits.to_dict("records"):
    p = passes.get((r["scenario"], r["variant"]))
    cells = [r.get(c, "") for c in cols]
    cells = [f"{c:.1f}" if isinstance(c, float) and c == c else ("" if c != c else str(c))
             for c in cells]
    print(f"{r['scenario']}/{r['variant']}\t" + "\t".join(cells)
          + (f"\t{p['min']:.0f}-{p['max']:.0f}" if p else "\t"))
launches = pd.to_numeric(limits["launches"], errors="coerce").fillna(0)
print(f"processes {int((launches > 0).sum())}, launches {int(launches.sum())}, "
      f"variants {len(limits)}")
PYEOF
tail -45 "$OUT/kernels.stdout" | tee -a "$OUT/ncu-time.txt"
