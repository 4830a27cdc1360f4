#!/usr/bin/env bash
# On the GPU machine, from the checkout's root (issue 25): what nsys costs a profiled worker.
#   source .gpu-stage/bin/env.sh && OUT=$OUT bash scripts/device/nsys-probe.sh
# 1. `import torch, torch._dynamo` plain and under nsys with three --trace settings;
# 2. one CUDA process per window length under the harness's options (capture range ended by
#    cudaProfilerStop): how long cudaProfilerStop holds the process, and nsys's whole wall;
# 3. one traced fork server (never touches CUDA) forking a child per window, with
#    --capture-range-end=repeat and --trace-fork-before-exec=true: does each child get a report
#    of its own, and what does it cost.
# Every report is exported and its kernels and processes counted. Writes $OUT/nsys-probe.txt
# (the reports themselves are removed).
set -uo pipefail
OUT=${OUT:-/var/tmp/nsys-probe}
mkdir -p "$OUT/reps"
LOG="$OUT/nsys-probe.txt"
P="python3 scripts/device/nsys_probe.py"
NS=(--sample=none --cpuctxsw=none --force-overwrite=true)
export PYTORCH_NVML_BASED_CUDA_CHECK=1 PYTHONUNBUFFERED=1
say() { echo "$*" | tee -a "$LOG"; }
timed() {  # label, command...
  local label=$1; shift
  local t0=$(date +%s%N)
  "$@" > "$OUT/last.txt" 2>&1
  local rc=$?
  local t1=$(date +%s%N)
  grep -E "^(IMPORT|PROBE|SERVER|CHILD)" "$OUT/last.txt" | sed "s/^/$label /" | tee -a "$LOG"
  say "$label wall_ms=$(( (t1 - t0) / 1000000 )) rc=$rc"
  [ $rc -eq 0 ] || tail -5 "$OUT/last.txt" | tee -a "$LOG"
}
say "nsys: $(nsys --version 2>&1 | tail -1)"
nsys profile --help 2>&1 | grep -A4 -E "capture-range-end|trace-fork-before-exec" | head -30 >> "$LOG"

for i in 1 2; do timed "plain-import-$i" $P import; done
for tr in cuda,nvtx,osrt cuda,nvtx nvtx,osrt; do
  timed "nsys-import-$tr" nsys profile --trace=$tr "${NS[@]}" --capture-range=cudaProfilerApi \
    --capture-range-end=stop -o "$OUT/reps/imp-${tr//,/_}" $P import
done
for w in 3 0.5; do
  timed "single-stop-$w" nsys profile --trace=cuda,nvtx,osrt "${NS[@]}" \
    --capture-range=cudaProfilerApi --capture-range-end=stop -o "$OUT/reps/single-$w" $P single $w
done
timed "plain-single-3" $P single 3
timed "server-repeat" nsys profile --trace=cuda,nvtx,osrt "${NS[@]}" \
  --capture-range=cudaProfilerApi --capture-range-end=repeat --trace-fork-before-exec=true \
  -o "$OUT/reps/server" $P server 3 3 0.5

say "reports:"
ls -la "$OUT/reps" | tee -a "$LOG"
for rep in "$OUT"/reps/*.nsys-rep; do
  t0=$(date +%s%N)
  nsys export --type=sqlite --force-overwrite=true --quiet=true -o "${rep%.nsys-rep}.sqlite" "$rep" >/dev/null 2>&1
  say "export $(basename "$rep") ms=$(( ($(date +%s%N) - t0) / 1000000 ))"
done
python3 - "$OUT/reps" <<'EOF' | tee -a "$LOG"
import glob, sqlite3, sys
for db in sorted(glob.glob(sys.argv[1] + "/*.sqlite")):
    c = sqlite3.connect(db)
    have = {r[0] for r in c.execute("select name from sqlite_master where type='table'")}
    k = c.execute("select count(*), count(distinct globalPid), min(start), max(end) from CUPTI_ACTIVITY_KIND_KERNEL").fetchone() if "CUPTI_ACTIVITY_KIND_KERNEL" in have else None
    a = c.execute("select count(*), count(distinct globalTid / 16777216) from CUPTI_ACTIVITY_KIND_RUNTIME").fetchone() if "CUPTI_ACTIVITY_KIND_RUNTIME" in have else None
    span = (k[3] - k[2]) / 1e9 if k and k[2] else None
    print(f"REPORT {db.rsplit('/', 1)[-1]} kernels={k[0] if k else None} kernel_pids={k[1] if k else None} "
          f"kernel_span_s={span} api_rows={a[0] if a else None} api_pids={a[1] if a else None}")
EOF
rm -rf "$OUT/reps" "$OUT/last.txt"
