#!/usr/bin/env bash
# On the lent GPU machine, from the checkout root, after `source .gpu-stage/bin/env.sh`:
#   bash scripts/device/dali-sweep.sh [NAME=OVERRIDES ...]
# Why DALI stays 17-19% behind `ideal` on a 16-core H200 host: times sync_loading's `dali` beside
# `ideal` (same run, rounds interleaved, no nsys) once per DALI setting, so each ratio is paired
# within its run. Each argument is NAME=override[,override...]; the default sweep is below.
# Prints one line per setting (dali and ideal mean step, dali's share of ideal) and writes
# $OUT/dali-sweep.csv.
set -uo pipefail
[ -f .revision ] && export BOTTLENECK_GIT_SHA="$(cat .revision)"
s=scenario.sync_loading.full
configs=("$@")
[ ${#configs[@]} -gt 0 ] || configs=(
  "default="
  "hw065=$s.dali_hw_decoder_load=0.65"
  "hw0=$s.dali_hw_decoder_load=0.0"
  "prefetch4=$s.prefetch=4"
  "threads8=$s.dali_threads=8"
)
out=${OUT:-/var/tmp}/dali-sweep.csv
echo "setting,variant,step_ms_mean,share_of_ideal,loader_only_samples_per_s" > "$out"
for c in "${configs[@]}"; do
  name=${c%%=*}; over=${c#*=}
  dir=/var/tmp/dali-sweep/$name; mkdir -p "$dir"
  start=$(date +%s)
  # shellcheck disable=SC2046
  python3 -m harness run +scenario=sync_loading "scenario.sync_loading.variants=[dali,ideal]" \
    nsys.enabled=false harness.repeats=2 harness.progress=false harness.results_dir="$dir" \
    $(echo "$over" | tr ',' ' ') > "$dir.log" 2>&1
  rc=$?
  run=$(ls -d "$dir"/*/ 2>/dev/null | tail -1)
  python3 - "$run" "$name" "$out" "$rc" "$(( $(date +%s) - start ))" <<'PY'
import csv, glob, json, statistics, sys
run, name, out, rc, wall = sys.argv[1:]
rows = list(csv.DictReader(open(f"{run}/runs.csv"))) if run else []
lo = {}
for f in glob.glob(f"{run}/sync_loading/dali/timing-*/result.json"):
    lo.setdefault("x", []).append(json.load(open(f)).get("metrics", {}).get("loader_only_samples_per_s", float("nan")))
with open(out, "a") as fh:
    for r in rows:
        lr = statistics.mean(lo["x"]) if r["variant"] == "dali" and lo else ""
        fh.write(f"{name},{r['variant']},{r['step_ms_mean']},{r['share_of_ideal']},{lr}\n")
        print(f"{name:10s} {r['variant']:6s} step {float(r['step_ms_mean'] or 'nan'):7.2f} ms  "
              f"of ideal {float(r['share_of_ideal'] or 'nan'):.3f}  loader-only {lr}  (rc {rc}, {wall} s)")
PY
done
