#!/usr/bin/env bash
# On the GPU machine, from the checkout root:
#   source .gpu-stage/bin/env.sh && [BUDGET_S=570] OUT=$OUT bash scripts/device/capture-corpus-kineto.sh
# Captures every wild-corpus script (corpus/wild/*.py, corpus/plan.py's selection: PART, ONLY,
# GPUS as capture-corpus.sh takes them) once, unchanged, under the PyTorch Profiler
# (corpus/kineto_capture.py: the whole process, CPU and CUDA activities; procs=2 scripts under
# torch.distributed.run, one trace per rank), so HTA can be scored on code the suite did not write:
#   $OUT/corpus-kineto.tar  kineto/<name>/<name>-rank<r>.pt.trace.json.gz (unpack in corpus/wild/:
#                           harness score corpus/wild --tool hta reads corpus/wild/kineto/<name>/)
#   $OUT/kineto.log         each script's seconds and trace size
# Nothing else runs beside a capture (the profiler's own overhead is what the step times carry).
# Scripts run lightest first (plan.py's profile estimate), so a BUDGET_S (the call's seconds)
# that runs out leaves out the heaviest (whole compiles, autotuning), each with a line; entries
# that run on CPUs alone (gpus 0) are left out: HTA's analyses are of GPU time.
set -u
cd "$(dirname "$0")/../.."
py=${PYTHON:-python3}
out=${OUT:-/var/tmp/corpus-out}
work=${WORK:-/var/tmp/corpus-kineto}
labels=${LABELS:-corpus/wild/labels.csv}
mkdir -p "$out" && rm -rf "$work" && mkdir -p "$work/kineto"
exec > >(tee -a "$out/kineto.log") 2>&1
export PYTHONUNBUFFERED=1
gpus=${GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}
args=("$labels" --gpus "$gpus")
[ -n "${PART:-}" ] && args+=(--part "$PART")
[ -n "${ONLY:-}" ] && args+=(--only "$ONLY")
"$py" corpus/plan.py "${args[@]}" | sort -s -n -k5 >"$work/plan.txt" || exit 2
t_start=$(date +%s)
budget=${BUDGET_S:-0}
while read -r name procs gpus_needed limit_s profile_s _trace _cache source device _fixes; do
  if [ "$gpus_needed" = 0 ]; then echo "== $name left out: runs on CPUs alone"; continue; fi
  if [ "$budget" -gt 0 ] && [ $(( $(date +%s) + profile_s )) -gt $(( t_start + budget - 15 )) ]; then
    echo "== $name left out: BUDGET_S ($budget s) would run out"; continue
  fi
  script="corpus/wild/${source}.py"
  dev=(); [ "$device" != auto ] && dev=(--device "$device")
  t0=$(date +%s.%N)
  if [ "$procs" -gt 1 ]; then
    timeout "$limit_s" "$py" -m torch.distributed.run --standalone --nproc_per_node="$procs" \
      corpus/kineto_capture.py "$work/kineto/$name" "$name" "$script" "${dev[@]}" </dev/null
  else
    timeout "$limit_s" "$py" corpus/kineto_capture.py "$work/kineto/$name" "$name" "$script" \
      "${dev[@]}" </dev/null
  fi
  rc=$?
  echo "== $name rc=$rc $(echo "$(date +%s.%N) - $t0" | bc) s $(du -cb "$work/kineto/$name"/* 2>/dev/null | tail -1)"
done <"$work/plan.txt"
tar -C "$work" -cf "$out/corpus-kineto.tar" kineto
echo "wrote $out/corpus-kineto.tar"
