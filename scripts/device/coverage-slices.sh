#!/usr/bin/env bash
# Do the intervals hold their 95% on this host, and what does slicing cost? (docs/measurement.md)
# On the lent GPU machine, from the checkout root, after `source .gpu-stage/bin/env.sh`:
#   [ROUNDS=8] [LIMIT_S=540] bash scripts/device/coverage-slices.sh [harness overrides...]
# Two unprofiled runs of the same host-bound and GPU-bound pairs with many timing rounds each:
# sliced rounds (harness.timing.slices=true, the default) and back-to-back windows
# (slices=false, the same 1 s window budget), then
#   python -m harness.execution.coverage: many random splits of each run's rounds into two
#   disjoint sets of k = 2, 3, 5 rounds; how often one set's point lies inside the other's 95%
#   interval (and the bootstrap the t interval replaced), against what a calibrated interval
#   gives (90.7% for k = 3);
# and the slicing's cost from timings.csv (turn_gap_ms, slice_first_step_excess_ms).
# Writes into $OUT: coverage.csv, coverage.txt, slicing.txt, and each run's tables (no exports).
# On the CPU it runs the smoke sizes (a check of the script, not a measurement).
set -uo pipefail
[ -f .revision ] && export BOTTLENECK_GIT_SHA="$(cat .revision)"
PY=${PY:-python3}
rounds=${ROUNDS:-8}
out=${OUT:-/var/tmp/coverage-out}
mkdir -p "$out"
results=/var/tmp/results/coverage
rm -rf "$results"
mkdir -p "$results"
# kernel_flood's baseline is launch-bound (host), cuda_graphs GPU-bound: the pair the host's
# speed moves most; gil_contention's baseline is bound by a Python thread's GIL; forced_sync is
# GPU-bound with host syncs. No compiled variant: a compile's set-up (10 s) per round would
# cost more than the rounds measure.
scen='+scenario=[kernel_flood,gil_contention,forced_sync]'
common=("$scen" "scenario.kernel_flood.variants=[baseline,cuda_graphs]" nsys.enabled=false
        harness.progress=false "harness.repeats=$rounds" harness.max_window_s=1.0
        harness.timing.window_s=1.0 "harness.timing.max_rounds=$rounds")
per=$(( ${LIMIT_S:-540} / 2 ))
for mode in true false; do
  start=$(date +%s)
  timeout --signal=INT --kill-after=30 "$per" \
    "$PY" -m harness run "${common[@]}" "harness.timing.slices=$mode" \
    "harness.results_dir=$results/slices-$mode" "$@" > "$out/run-slices-$mode.log" 2>&1
  echo "slices=$mode: harness exit code $?, wall $(( $(date +%s) - start )) s" | tee -a "$out/coverage.txt"
done
runs=$(ls -d "$results"/slices-*/*/ 2>/dev/null)
"$PY" -m harness.execution.coverage $runs --k 2 3 5 --draws 400 --bootstrap \
  --out "$out/coverage.csv" >> "$out/coverage.txt" 2>&1
"$PY" - "$results" > "$out/slicing.txt" 2>&1 <<'EOF'
import sys
from pathlib import Path
import pandas as pd
pd.set_option("display.width", 200)
for run in sorted(Path(sys.argv[1]).glob("slices-*/*/")):
    t = pd.read_csv(run / "timings.csv")
    r = pd.read_csv(run / "runs.csv")
    print(f"== {run.parent.name}")
    if "slices" in t and t["slices"].notna().any():
        cols = ["slices", "slice_steps", "turn_gap_ms", "slice_first_step_excess_ms", "turn_gaps_s"]
        print(t.groupby(["scenario", "variant"])[cols].median().round(3).to_string())
        print("turn gaps summed:", round(float(t["turn_gaps_s"].sum()), 3), "s")
    keep = ["scenario", "variant", "repeats", "step_ms_mean", "speedup", "speedup_ci_low",
            "speedup_ci_high", "paired_rounds", "round_spread", "step_launches", "loop_cpu_launches",
            "slice_s"]
    print(r[[c for c in keep if c in r]].round(4).to_string(index=False))
EOF
for run in $runs; do
  name=$(basename "$(dirname "$run")")
  tar -C "$run" -cf - --exclude='*.nsys-rep' --exclude='*.sqlite' . | xz -T0 -6 > "$out/$name-tables.tar.xz"
done
cat "$out/coverage.txt" "$out/slicing.txt"
ls -la "$out"
