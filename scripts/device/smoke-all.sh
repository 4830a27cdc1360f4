#!/usr/bin/env bash
# On the lent GPU machine, from the checkout root, after `source .gpu-stage/bin/env.sh`:
#   bash scripts/device/smoke-all.sh
# Every scenario's every variant at smoke size, profiled, through tests/harness_cli.py (that is
# `python -m harness` with torch barred from the harness's own process): on a GPU box the
# GPU-only variants (CUDA graphs, compiled graphs, pinned copies, NCCL) build from their
# workload modules, and the parent still imports no torch. The run's tables and console output
# come back in $OUT. Overrides: SCENARIOS (default all), HARNESS_ARGS (space-separated).
set -uo pipefail
results=/var/tmp/results/smoke-all
out=${OUT:-$results}
rm -rf "$results"
mkdir -p "$results" "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
t0=$(date +%s)
# shellcheck disable=SC2086
python3 tests/harness_cli.py run "+scenario=${SCENARIOS:-all}" size=smoke harness.repeats=1 \
  harness.progress=false harness.results_dir="$results" ${HARNESS_ARGS-} >"$out/console.txt" 2>&1
rc=$?
t1=$(date +%s)
echo "harness run: exit $rc, $((t1 - t0)) s" | tee -a "$out/console.txt"
tail -40 "$out/console.txt"
run=$(ls -d "$results"/*/ | tail -1)
for f in runs.csv diagnosis.csv timings.csv verdicts.csv wall_time.json manifest.json; do
  [ -f "$run/$f" ] && cp "$run/$f" "$out/"
done
grep -l '"status": "failed"' "$run"/*/*/*/status.json 2>/dev/null | head -5 | while read -r s; do
  d=$(dirname "$s")
  tail -30 "$d/stderr.log" >"$out/failed-$(echo "$d" | tr / _ | tail -c 80).log" 2>/dev/null
done
exit "$rc"
