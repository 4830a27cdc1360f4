#!/usr/bin/env bash
# Which of the host's speed modes did each slice meet, and does a host-bound pair's ratio follow
# it? (docs/measurement.md, "The host's modes, slice by slice")
# On the lent GPU machine, from the checkout root, after `source .gpu-stage/bin/env.sh`:
#   [ROUNDS=6] [RUNS=2] [LIMIT_S=300] bash scripts/device/slice-modes.sh [harness overrides...]
# RUNS unprofiled sliced runs back to back, each of ROUNDS timing rounds of the host-bound pairs
# (gil_contention, pageable_copies, kernel_flood's baseline against cuda_graphs) and a GPU-bound
# one (forced_sync), with harness.timing.slice_probes=true: a Python loop on the loop's core
# and on a helper core, a host-buffer copy and the launch rate, right before and after every
# slice (gil_contention declines slicing: its rounds run back to back, unprobed). Then
# scripts/slice_modes.py sets each round's and each slice pair's ratio beside those probes.
# Writes into $OUT: slice-modes.txt and each run's tables (result.json files, no exports).
set -uo pipefail
[ -f .revision ] && export BOTTLENECK_GIT_SHA="$(cat .revision)"
PY=${PY:-python3}
rounds=${ROUNDS:-6}
out=${OUT:-/var/tmp/slice-modes-out}
mkdir -p "$out"
results=/var/tmp/results/slice-modes
rm -rf "$results"
mkdir -p "$results"
scen='+scenario=[gil_contention,pageable_copies,kernel_flood,forced_sync]'
common=("$scen" "scenario.kernel_flood.variants=[baseline,cuda_graphs]" nsys.enabled=false
        harness.progress=false harness.report=false "harness.repeats=$rounds"
        "harness.timing.max_rounds=$rounds" harness.timing.slice_probes=true)
per=$(( ${LIMIT_S:-300} / ${RUNS:-2} ))
for run in $(seq 1 "${RUNS:-2}"); do
  start=$(date +%s)
  timeout --signal=INT --kill-after=30 "$per" \
    "$PY" -m harness run "${common[@]}" "harness.results_dir=$results/run-$run" "$@" \
    > "$out/run-$run.log" 2>&1
  echo "run $run: harness exit code $?, wall $(( $(date +%s) - start )) s" | tee -a "$out/slice-modes.txt"
done
PYTHONPATH=$PWD "$PY" scripts/slice_modes.py "$results"/run-*/*/ >> "$out/slice-modes.txt" 2>&1
for dir in "$results"/run-*/*/; do  # each run's speedups, its rounds and whether they were sliced
  "$PY" - "$dir" >> "$out/slice-modes.txt" 2>&1 <<'PY'
import sys
import pandas as pd
r = pd.read_csv(f"{sys.argv[1]}/runs.csv")
r = r[r["kind"] != "baseline"]
cols = ["scenario", "variant", "speedup", "speedup_ci_low", "speedup_ci_high", "paired_rounds",
        "slice_s"]
print(sys.argv[1]); print(r[[c for c in cols if c in r]].round(3).to_string(index=False))
PY
done
for dir in "$results"/run-*/*/; do
  name=$(basename "$(dirname "$dir")")
  tar -C "$dir" -cf - --exclude='*.nsys-rep' --exclude='*.sqlite' . | xz -T0 -6 > "$out/$name-tables.tar.xz"
done
tail -n 80 "$out/slice-modes.txt"
ls -la "$out"
