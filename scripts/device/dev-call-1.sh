#!/usr/bin/env bash
# The lead's first GPU call: (a) harness run of the five new scenarios, one round, profiled;
# (b) ncu's facts; (c) `harness kernels` on that run; (d) a few new corpus scripts, with what
# is left of TOTAL_S. Everything lands in $OUT in at most 8 files.
set -u
cd "$(dirname "$0")/../.."
source .gpu-stage/bin/env.sh
git_sha=$(cat .revision 2>/dev/null)
T0=$(date +%s); total=${TOTAL_S:-575}
left() { echo $(( total - ($(date +%s) - T0) - ${1:-0} )); }
exec > >(tee -a "$OUT/dev1.log") 2>&1
echo "== dev-call-1 $(date -u +%FT%TZ) $(nproc) cores; sha ${git_sha:-?}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
# (a)
LIMIT_S=${HARNESS_S:-265} SQLITE_MAX_MB=60 OUT=$OUT bash scripts/device/run-reference.sh dev1 \
  "+scenario=[fp32_matmul,unfused_chain,nchw_conv,empty_cache,sync_checkpoint]" harness.repeats=1
run=$(ls -d /var/tmp/results/dev1/*/ 2>/dev/null | tail -1)
echo "== (a) done at $(( $(date +%s) - T0 )) s: $run"
# (b)
NCU=/usr/local/cuda/bin/ncu; [ -x $NCU ] || NCU=$(ls -d /opt/nvidia/nsight-compute/*/ncu | tail -1)
f=/var/tmp/ncu-facts; mkdir -p $f
$NCU --version > $f/version.txt 2>&1
$NCU --list-sections > $f/list-sections.txt 2>&1
$NCU --list-sets > $f/list-sets.txt 2>&1
timeout 40 $NCU --query-metrics > $f/query-metrics.txt 2>&1
echo "== (b) done at $(( $(date +%s) - T0 )) s"
# (c)
if [ -n "$run" ]; then
  t=$(date +%s)
  timeout -k 5 $(( $(left 150) < 110 ? $(left 150) : 110 )) python3 -m harness.kernels.cli "$run" --budget-s 90 \
    > $f/kernels.stdout 2>&1
  echo "harness kernels rc=$? in $(( $(date +%s) - t )) s"; tail -25 $f/kernels.stdout
  for x in kernels.csv kernel_limits.csv kernels_run.json; do [ -f "$run/$x" ] && cp "$run/$x" $f/; done
  for d in "$run"/*/*/ncu; do
    [ -d "$d" ] || continue
    v=$(basename "$(dirname "$d")"); s=$(basename "$(dirname "$(dirname "$d")")")
    mkdir -p $f/run/$s/$v; cp "$d"/ncu.csv "$d"/outcome.json "$d"/stdout.log "$d"/stderr.log $f/run/$s/$v/ 2>/dev/null
  done
fi
tar -C /var/tmp -cf - ncu-facts | xz -T0 > "$OUT/ncu.tar.xz"
echo "== (c) done at $(( $(date +%s) - T0 )) s"
# (d)
b=$(left 20)
if [ "$b" -ge 60 ]; then
  ONLY="${CORPUS_ONLY:-ac_empty_cache_varlen bio_torch_save lt_resnet_nchw fm_mlp_fp32 ue_layernorm_gelu}" \
    LABELS=corpus/wild/pending/labels.csv REPEATS=2 BUDGET_S=$b OUT=/var/tmp/corpus-d1 \
    bash scripts/device/capture-corpus.sh > /var/tmp/corpus-d1.log 2>&1
  tail -25 /var/tmp/corpus-d1.log
  cp /var/tmp/corpus-d1.log /var/tmp/corpus-d1/ 2>/dev/null
  tar -C /var/tmp -cf "$OUT/corpus.tar" corpus-d1
fi
echo "== all done at $(( $(date +%s) - T0 )) s"; ls -la "$OUT"
