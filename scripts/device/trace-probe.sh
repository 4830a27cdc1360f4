#!/usr/bin/env bash
# On a 2-GPU machine, from the checkout root, after `source .gpu-stage/bin/env.sh`:
#   bash scripts/device/trace-probe.sh [PLAN_FILE]
# What each nsys --trace setting costs the distributed scenarios' steps: one torchrun of
# scripts/device/trace_probe.py per (scenario, setting), unprofiled ('none') or under
#   nsys profile --trace=SETTING --sample=none --cpuctxsw=none
#        --capture-range=cudaProfilerApi --capture-range-end=repeat
# (the harness's options; `repeat`, so every variant's window is traced). Plan lines:
#   "TAG SCENARIO VARIANTS SETTING [more nsys args]"  (SETTING 'none': no nsys).
# Prints the PROBE lines and leaves them in $OUT/trace-probe.txt.
set -uo pipefail
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}  # trace_probe.py imports harness, scenarios
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
out=${OUT:-/var/tmp/trace-probe}
mkdir -p "$out" /var/tmp/trace-probe-reps
plan=$(mktemp)
if [ $# -ge 1 ]; then cp "$1" "$plan"; else
  cat > "$plan" <<'EOF'
none        ddp_bucketing       ideal,tuned_buckets  none
all         ddp_bucketing       ideal,tuned_buckets  cuda,nvtx,osrt
no_osrt     ddp_bucketing       ideal,tuned_buckets  cuda,nvtx
cuda_only   ddp_bucketing       ideal,tuned_buckets  cuda
no_cuda     ddp_bucketing       ideal,tuned_buckets  nvtx,osrt
none        pipeline_imbalance  baseline,balanced    none
all         pipeline_imbalance  baseline,balanced    cuda,nvtx,osrt
EOF
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nsys --version
nsys profile --help 2>&1 | grep -iE "event-trace|osrt-backtrace|osrt-threshold" | head -8
start=$(date +%s)
while read -r tag scenario variants setting more; do
  [ -z "$tag" ] || [ "${tag:0:1}" = "#" ] && continue
  t0=$(date +%s)
  cmd=(python3 -m torch.distributed.run --standalone --nproc-per-node=2
       scripts/device/trace_probe.py --scenario "$scenario" ${PROBE_ARGS:-} --variants "$variants" --tag "$tag")
  if [ "$setting" != none ]; then
    # shellcheck disable=SC2086  # extra nsys arguments are words on purpose
    cmd=(nsys profile "--trace=$setting" --sample=none --cpuctxsw=none
         --capture-range=cudaProfilerApi --capture-range-end=repeat $more
         --output="/var/tmp/trace-probe-reps/$scenario-$tag" --force-overwrite=true "${cmd[@]}")
  fi
  timeout 240 "${cmd[@]}" > "/var/tmp/trace-probe-reps/$scenario-$tag.log" 2>&1
  rc=$?
  grep '^PROBE' "/var/tmp/trace-probe-reps/$scenario-$tag.log" | sed "s/^PROBE/PROBE $scenario/" \
    | tee -a "$out/trace-probe.txt"
  echo "  ($scenario $tag: rc $rc, $(( $(date +%s) - t0 )) s)"
  [ $rc -ne 0 ] && grep -E "Error|error:|Traceback" "/var/tmp/trace-probe-reps/$scenario-$tag.log" | sort | uniq -c | head -8
done < "$plan"
echo "trace-probe: $(( $(date +%s) - start )) s"
