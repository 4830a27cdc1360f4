#!/usr/bin/env bash
# On the lent GPU machine, from the checkout root, after `source .gpu-stage/bin/env.sh`:
#   bash scripts/device/bench-export.sh
# Makes a >= 1 GB SQLite export with the suite itself (kernel_flood, one variant, many steps),
# then times the detectors on it (scripts/bench_detectors.py, best of 3) and
# `python -m harness diagnose` end to end, printing sizes and timings; the tables come back in
# $OUT (never the export itself).
#
# Default: the eager kernel_flood baseline, 2,200 measured steps. It is launch-bound (a CUDA API row
# per kernel), so both big tables grow: 836 MB, 5.1 M kernels, 9.8 M API rows, 510 s in one call
# on the H100. VARIANT=cuda_graphs (per-node graph tracing, ~40 MB of kernel rows a second) would
# be faster to fill, but its profiled process dies with SIGSEGV (exit 139) after the capture
# range ends and nsys has written the report, before the worker writes its result (2 of 2 runs,
# nsys 2025.3.1); the profiled worker's logs then come back in $OUT.
# Overrides: STEPS, VARIANT, SEVERITY (blocks), REPEAT (bench runs), HARNESS_ARGS (harness
# overrides, space-separated; default: expert rules off, whose nsys analyze on 1 GB takes minutes).
set -uo pipefail
steps=${STEPS:-2200}
variant=${VARIANT:-baseline}
severity=${SEVERITY:-64}
repeat=${REPEAT:-3}
results=/var/tmp/results/bench-export
out=${OUT:-$results}
rm -rf "$results"
mkdir -p "$results" "$out"
extra=()
[ "$variant" != baseline ] && extra+=(nsys.cuda_graph_trace=node)
# shellcheck disable=SC2206
extra+=(${HARNESS_ARGS-diagnosis.expert_rules.enabled=false})
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
nproc
t0=$(date +%s)
# harness.(profile_)max_window_s=null: measure all STEPS (the defaults cap the window at 10 s / 3 s).
python3 -m harness run +scenario=kernel_flood "scenario.kernel_flood.variants=[$variant]" \
  scenario.kernel_flood.severity="$severity" scenario.kernel_flood.full.steps="$steps" \
  harness.repeats=1 harness.max_window_s=null harness.profile_max_window_s=null harness.timeout_s=1200 nsys.export_timeout_s=900 \
  harness.progress=false harness.results_dir="$results" ${extra[@]+"${extra[@]}"} 2>&1 | tail -40
rc=${PIPESTATUS[0]}
t1=$(date +%s)
echo "harness run: exit $rc, $((t1 - t0)) s (timing run + profiled run + export + diagnosis)"
run=$(ls -d "$results"/*/ | tail -1)
db=$(find "$run" -name '*.sqlite' | head -1)
if [ -z "$db" ]; then
  echo "no SQLite export was made; see $run (the profiled worker's logs and status are in $out)" >&2
  for f in $(find "$run" -path '*profile*' \( -name 'std*.log' -o -name status.json \)); do
    cp "$f" "$out/profile-$(basename "$f")"
  done
  exit 1
fi
ls -la "$(dirname "$db")"
python3 - "$db" <<'EOF'
import sqlite3, sys
db = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY",
          "NVTX_EVENTS", "OSRT_API"):
    try:
        print(f"{t:38s} {db.execute(f'SELECT COUNT(*) FROM {t}').fetchone()[0]:>12,d} rows")
    except sqlite3.OperationalError:
        print(f"{t:38s} {'(absent)':>12s}")
EOF
echo "export size: $(du -m "$db" | cut -f1) MB"
echo "== detectors, best of $repeat (scripts/bench_detectors.py)"
python3 -m scripts.bench_detectors "$db" --repeat "$repeat" --csv "$out/bench_detectors.csv"
echo "== python -m harness diagnose (one cold process, export already made)"
t2=$(date +%s.%N)
python3 -m harness diagnose "$db" | head -3
t3=$(date +%s.%N)
python3 -c "print(f'harness diagnose wall time: {$t3 - $t2:.2f} s')"
echo "== cross-check at the end of the run (expert_rules.csv: nsys analyze, seconds per rule)"
python3 - "$run" <<'EOF'
import sys
from pathlib import Path
import pandas as pd
p = Path(sys.argv[1]) / "expert_rules.csv"
if p.is_file():
    df = pd.read_csv(p)
    cols = [c for c in ("variant", "rule", "status", "rows", "seconds", "reason") if c in df]
    print(df[cols].to_string(index=False))
EOF
for f in runs.csv diagnosis.csv expert_rules.csv crosscheck.csv manifest.json; do
  [ -f "$run/$f" ] && cp "$run/$f" "$out/"
done
echo "total: $(( $(date +%s) - t0 )) s; tables in $out"
exit "$rc"
