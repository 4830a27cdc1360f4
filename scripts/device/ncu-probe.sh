#!/usr/bin/env bash
# On the GPU machine, from the checkout's root, with the machine's own python3 (no install):
#   OUT=$OUT bash scripts/device/ncu-probe.sh [RUN_DIR]
# What Nsight Compute does with the kernels row's command line (harness/kernels/command.py;
# the first GPU run of this probe's step 7 showed an NVTX filter loses the backward thread's
# kernels: the row now takes the cudaProfilerStart/Stop window alone, as step 2 prints it):
#  1. ncu --version, --list-sections, --list-sets, the pipe/occupancy/DRAM metric names this
#     GPU has, nvidia-smi's clocks before and after (ncu runs with --clock-control none);
#  2. seven small standalone PyTorch workloads (fp32 GEMM without TF32, with TF32, bf16 GEMM,
#     an elementwise chain, a tiny-kernel launch-bound loop, a bf16 conv in NCHW and in
#     channels_last), each under the row's exact ncu command (the profiler window, one launch
#     per launch configuration, the row's sections and metrics, raw CSV with base units): its
#     CSV, its report, stdout and wall time; all leave through
#     os._exit after the window (as the harness's workers do) but gemm_bf16, which exits
#     normally: each profiles one GEMM configuration, so a lost result shows as a missing row;
#  3. the row's name filter on a real nsys export: nsys profiles a small bf16 MLP step, the
#     row's planner picks its top kernels by mangled name, ncu profiles exactly those;
#  4. what a profiled launch costs (6 GEMM launches against step 2's one), what
#     MemoryWorkloadAnalysis adds (6 with SpeedOfLight only), and ncu alone (nothing profiled);
#  5. whether two ncu processes at once serialize (their `measure` windows and walls);
#  6. what ncu does with a --metrics name the GPU lacks, plain and as regex:;
#  7. with RUN_DIR (a run folder of `harness run` on this machine): `harness kernels RUN_DIR`
#     (its tables, each variant's raw ncu CSV and outcome, and its wall time).
# Steps 1-6 start no new work past PROBE_BUDGET_S (default 110 s). Writes $OUT/probe.txt (the
# log), $OUT/walls.tsv (label, wall ms, exit code), and the raw outputs under
# $OUT/{facts,w,plan,cost,conc,metric,run}/.
set -uo pipefail
OUT=${OUT:-/var/tmp/ncu-probe}
RUN_DIR=${1:-}
BUDGET=${PROBE_BUDGET_S:-110}
PY=${PYTHON:-python3}
NCU=${NCU:-/usr/local/cuda/bin/ncu}
[ -x "$NCU" ] || NCU=$(ls -d /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1)
NSYS=${NSYS:-$(command -v nsys || ls -d /opt/nvidia/nsight-systems/*/bin/nsys /usr/local/cuda/bin/nsys 2>/dev/null | tail -1)}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 PYTORCH_NVML_BASED_CUDA_CHECK=1
mkdir -p "$OUT"/{facts,w,plan,cost,conc,metric,run}
LOG="$OUT/probe.txt"
WL="$OUT/ncu_workloads.py"
T0=$(date +%s)
say() { echo "$*" | tee -a "$LOG"; }
over() { [ $(( $(date +%s) - T0 )) -ge "$BUDGET" ]; }
timed() {  # label, stdout file, timeout seconds, command...
  local label=$1 out=$2 limit=$3; shift 3
  if over; then say "$label skipped: past the probe's ${BUDGET}s budget"; return 0; fi
  local t0 t1 rc
  t0=$(date +%s%N)
  timeout -k 5 "$limit" "$@" > "$out" 2>&1
  rc=$?
  t1=$(date +%s%N)
  printf '%s\t%s\t%s\n' "$label" "$(( (t1 - t0) / 1000000 ))" "$rc" >> "$OUT/walls.tsv"
  say "$label wall_ms=$(( (t1 - t0) / 1000000 )) rc=$rc"
  grep -E "^(MEASURE|RESULT)" "$out" | sed "s/^/  /" | tee -a "$LOG"
  [ $rc -eq 0 ] || tail -8 "$out" | sed "s/^/  | /" | tee -a "$LOG"
}
row_cmd() {  # the row's own command line (harness/kernels/command.py), into the array CMD
  mapfile -t CMD < <("$PY" -m harness.kernels.command --ncu "$NCU" "$@")
}
launches() {  # CSV file: its profiled launches (rows whose ID is a number)
  local n=0
  [ -f "$1" ] && n=$(grep -c '^"[0-9]' "$1")
  echo "${n:-0}"
}
set_after() {  # option value: in CMD, the value after that option becomes this one
  local i
  for i in "${!CMD[@]}"; do
    [ "${CMD[$i]}" = "$1" ] && CMD[$((i + 1))]=$2
  done
  return 0
}
cat > "$WL" <<'PYEOF'
"""Small standalone workloads for the ncu probe: warm-up, then `steps` steps inside an NVTX
`measure` range and a cudaProfilerStart/Stop range, as the harness's worker does."""
import argparse, os, sys, time
import torch

p = argparse.ArgumentParser()
p.add_argument("name")
p.add_argument("--steps", type=int, default=2)
p.add_argument("--warmup", type=int, default=3)
p.add_argument("--exit", choices=["os_exit", "normal"], default="os_exit")
a = p.parse_args()
try:
    import nvtx
    push, pop, how = (lambda n: nvtx.push_range(n)), nvtx.pop_range, "nvtx-package"
except ImportError:
    push, pop, how = torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop, "torch.cuda.nvtx"
dev = torch.device("cuda")
bf = torch.bfloat16


def gemm(dtype, tf32):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    x = torch.randn(4096, 4096, device=dev, dtype=dtype)
    w = torch.randn(4096, 4096, device=dev, dtype=dtype)
    return lambda: x @ w


def elementwise():
    x = torch.randn(1 << 26, device=dev)
    return lambda: (torch.tanh(x * 1.5 + 1.0) * x).relu().sum()


def tiny():
    t = torch.zeros(1, device=dev)

    def step():
        for _ in range(300):
            t.add_(1.0)
    return step


def conv(channels_last):
    m = torch.nn.Conv2d(64, 64, 3, padding=1).to(dev, bf)
    x = torch.randn(32, 64, 112, 112, device=dev, dtype=bf)
    if channels_last:
        m, x = m.to(memory_format=torch.channels_last), x.to(memory_format=torch.channels_last)
    x.requires_grad_(True)

    def step():
        m(x).float().square().mean().backward()
    return step


def mlp():
    m = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(),
                            torch.nn.Linear(4096, 1024)).to(dev)
    opt = torch.optim.AdamW(m.parameters(), fused=True)
    x = torch.randn(8192, 1024, device=dev)

    def step():
        with torch.autocast("cuda", dtype=bf):
            loss = m(x).float().square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


BUILD = {
    "gemm_fp32": lambda: gemm(torch.float32, False),
    "gemm_tf32": lambda: gemm(torch.float32, True),
    "gemm_bf16": lambda: gemm(bf, False),
    "elementwise": elementwise,
    "tiny_loop": tiny,
    "conv_nchw": lambda: conv(False),
    "conv_nhwc": lambda: conv(True),
    "mlp": mlp,
}
t_start = time.time()
step = BUILD[a.name]()
for _ in range(a.warmup):
    step()
torch.cuda.synchronize()
torch.cuda.profiler.start()
push("measure")
m0 = time.time()
for _ in range(a.steps):
    push("step")
    step()
    pop()
torch.cuda.synchronize()
m1 = time.time()
pop()
torch.cuda.profiler.stop()
print(f"MEASURE {a.name} start={m0:.3f} end={m1:.3f} measure_ms={(m1 - m0) * 1e3:.1f} "
      f"setup_ms={(m0 - t_start) * 1e3:.1f} nvtx={how} torch={torch.__version__} "
      f"gpu={torch.cuda.get_device_name()}", flush=True)
if a.exit == "os_exit":
    sys.stdout.flush()
    os._exit(0)
PYEOF

say "== 1. facts"
say "ncu: $NCU  nsys: ${NSYS:-none}  python: $($PY -c 'import sys; print(sys.version.split()[0])')"
"$NCU" --version > "$OUT/facts/version.txt" 2>&1; tail -1 "$OUT/facts/version.txt" | tee -a "$LOG"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem \
  --format=csv > "$OUT/facts/clocks-before.csv" 2>&1; cat "$OUT/facts/clocks-before.csv" | tee -a "$LOG"
"$NCU" --list-sections > "$OUT/facts/list-sections.txt" 2>&1
"$NCU" --list-sets > "$OUT/facts/list-sets.txt" 2>&1
timed query-metrics "$OUT/facts/query-metrics-base.txt" 60 "$NCU" --query-metrics
grep -E "pipe_tensor|pipe_fma|inst_executed_pipe|dram__throughput|gpu__dram|dram__bytes|warps_active|maximum_warps|compute_memory_throughput|sm__throughput" \
  "$OUT/facts/query-metrics-base.txt" > "$OUT/facts/query-metrics-pipes.txt"
wc -l < "$OUT/facts/query-metrics-pipes.txt" | sed 's/^/pipe-like base metrics: /' | tee -a "$LOG"
"$PY" -m harness.kernels.command --ncu "$NCU" --log LOG.csv --report REPORT -- PROGRAM \
  > "$OUT/facts/row-command.txt"

say "== 2. workloads under the row's command"
timed plain-gemm_fp32 "$OUT/w/plain-gemm_fp32.stdout" 60 "$PY" "$WL" gemm_fp32
for w in gemm_fp32 gemm_tf32 gemm_bf16 elementwise tiny_loop conv_nchw conv_nhwc; do
  how=os_exit; [ "$w" = gemm_bf16 ] && how=normal  # one GEMM config each: os._exit vs normal
  row_cmd --log "$OUT/w/$w.csv" --report "$OUT/w/$w" -- "$PY" "$WL" "$w" --exit "$how"
  timed "ncu-$w" "$OUT/w/$w.stdout" 90 "${CMD[@]}"
  say "  $w: $(launches "$OUT/w/$w.csv") profiled launches in the CSV"
done
if [ -f "$OUT/w/gemm_fp32.ncu-rep" ]; then
  "$NCU" --import "$OUT/w/gemm_fp32.ncu-rep" --csv --page raw --print-units base \
    --print-kernel-base mangled > "$OUT/w/gemm_fp32.import.csv" 2>&1
  "$NCU" --import "$OUT/w/gemm_fp32.ncu-rep" --csv --page details --print-units base \
    > "$OUT/w/gemm_fp32.details.csv" 2>&1
fi

say "== 3. the planner's names on a real nsys export"
if [ -n "${NSYS:-}" ] && ! over; then
  timed nsys-mlp "$OUT/plan/nsys.stdout" 90 "$NSYS" profile --trace=cuda,nvtx --sample=none \
    --cpuctxsw=none --capture-range=cudaProfilerApi --capture-range-end=stop \
    --force-overwrite=true -o "$OUT/plan/mlp" "$PY" "$WL" mlp --exit normal
  timed nsys-export "$OUT/plan/export.stdout" 90 "$NSYS" export --type=sqlite \
    --force-overwrite=true -o "$OUT/plan/mlp.sqlite" "$OUT/plan/mlp.nsys-rep"
  "$PY" -m harness.kernels.plan "$OUT/plan/mlp.sqlite" > "$OUT/plan/plan.csv" 2> "$OUT/plan/plan.err"
  "$PY" -m harness.kernels.plan "$OUT/plan/mlp.sqlite" --names > "$OUT/plan/names.txt" 2>> "$OUT/plan/plan.err"
  say "  planned $(wc -l < "$OUT/plan/names.txt") kernel names"
  NAMES=()
  while read -r n; do [ -n "$n" ] && NAMES+=(--name "$n"); done < "$OUT/plan/names.txt"
  row_cmd --log "$OUT/plan/mlp.csv" "${NAMES[@]}" -- "$PY" "$WL" mlp
  timed ncu-mlp-named "$OUT/plan/ncu.stdout" 90 "${CMD[@]}"
  say "  named: $(launches "$OUT/plan/mlp.csv") profiled launches"
  rm -f "$OUT/plan/mlp.nsys-rep"
  xz -T2 -f "$OUT/plan/mlp.sqlite" 2>/dev/null
fi

say "== 4. cost: one profiled launch, MemoryWorkloadAnalysis, ncu itself"
cost_cmd() {  # log, launch count, sections...: the row's command in global filter mode
  local log=$1 count=$2; shift 2
  row_cmd --log "$log" -- "$PY" "$WL" gemm_fp32 --steps 6
  set_after --filter-mode global
  set_after --launch-count "$count"
  local keep=() i=0
  while [ $i -lt ${#CMD[@]} ]; do  # the sections given, in place of the row's
    if [ "${CMD[$i]}" = --section ]; then i=$((i + 2)); continue; fi
    keep+=("${CMD[$i]}"); i=$((i + 1))
  done
  CMD=("${keep[0]}")
  for s in "$@"; do CMD+=(--section "$s"); done
  CMD+=("${keep[@]:1}")
}
cost_cmd "$OUT/cost/six.csv" 6 SpeedOfLight MemoryWorkloadAnalysis
timed cost-6-launches "$OUT/cost/six.stdout" 90 "${CMD[@]}"
cost_cmd "$OUT/cost/six-sol.csv" 6 SpeedOfLight
timed cost-6-launches-sol-only "$OUT/cost/six-sol.stdout" 90 "${CMD[@]}"
cost_cmd "$OUT/cost/none.csv" 6 SpeedOfLight MemoryWorkloadAnalysis
set_after --nvtx-include no_such_range/
timed cost-0-launches "$OUT/cost/none.stdout" 90 "${CMD[@]}"

say "== 5. two ncu processes at once"
if ! over; then
  cost_cmd "$OUT/conc/a.csv" 6 SpeedOfLight MemoryWorkloadAnalysis
  A=("${CMD[@]}")
  cost_cmd "$OUT/conc/b.csv" 6 SpeedOfLight MemoryWorkloadAnalysis
  B=("${CMD[@]}")
  t0=$(date +%s%N)
  timeout -k 5 120 "${A[@]}" > "$OUT/conc/a.stdout" 2>&1 &
  pa=$!
  timeout -k 5 120 "${B[@]}" > "$OUT/conc/b.stdout" 2>&1 &
  pb=$!
  wait $pa; ra=$?; ta=$(date +%s%N)
  wait $pb; rb=$?; tb=$(date +%s%N)
  say "concurrent a wall_ms=$(( (ta - t0) / 1000000 )) rc=$ra  b wall_ms=$(( (tb - t0) / 1000000 )) rc=$rb"
  printf 'conc-a\t%s\t%s\nconc-b\t%s\t%s\n' "$(( (ta - t0) / 1000000 ))" "$ra" "$(( (tb - t0) / 1000000 ))" "$rb" >> "$OUT/walls.tsv"
  grep -h "^MEASURE" "$OUT/conc/a.stdout" "$OUT/conc/b.stdout" | sed 's/^/  /' | tee -a "$LOG"
  ls -la "${TMPDIR:-/tmp}/nsight-compute-lock" 2>&1 | tee -a "$LOG"
fi

say "== 6. a metric the GPU lacks"
for m in "no_such_metric_zz.sum" "regex:^no_such_metric_zz$"; do
  tag=$(echo "$m" | tr -c 'a-z0-9' '_')
  timed "metric-$tag" "$OUT/metric/$tag.stdout" 60 "$NCU" --clock-control none \
    --profile-from-start off --nvtx --nvtx-include measure/ --launch-count 1 \
    --section SpeedOfLight --metrics "$m" --csv --page raw --print-units base \
    --log-file "$OUT/metric/$tag.csv" "$PY" "$WL" gemm_bf16
  tail -3 "$OUT/metric/$tag.csv" 2>/dev/null | cut -c1-300 | sed 's/^/  | /' | tee -a "$LOG"
done

nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > "$OUT/facts/clocks-after.csv" 2>&1
cat "$OUT/facts/clocks-after.csv" | tee -a "$LOG"
say "probe steps 1-6 took $(( $(date +%s) - T0 )) s"

if [ -n "$RUN_DIR" ]; then
  say "== 7. harness kernels $RUN_DIR"
  BUDGET=100000
  timed harness-kernels "$OUT/run/kernels.stdout" 600 "$PY" -m harness.kernels.cli "$RUN_DIR"
  for f in kernels.csv kernel_limits.csv kernels_run.json; do
    [ -f "$RUN_DIR/$f" ] && cp "$RUN_DIR/$f" "$OUT/run/"
  done
  for d in "$RUN_DIR"/*/*/ncu; do
    [ -d "$d" ] || continue
    v=$(basename "$(dirname "$d")"); s=$(basename "$(dirname "$(dirname "$d")")")
    mkdir -p "$OUT/run/$s/$v"
    cp "$d"/ncu.csv "$d"/outcome.json "$d"/stdout.log "$d"/stderr.log "$OUT/run/$s/$v/" 2>/dev/null
  done
  tail -30 "$OUT/run/kernels.stdout" | tee -a "$LOG"
fi
say "done in $(( $(date +%s) - T0 )) s"
