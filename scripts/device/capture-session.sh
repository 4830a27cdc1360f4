#!/usr/bin/env bash
# On the GPU machine, from the checkout root, one call that spends a fixed budget on the corpus
# captures a session still needs, most needed first (2026-11-25: the device time left after the
# reference run):
#   source .gpu-stage/bin/env.sh && BUDGET_S=300 OUT=$OUT bash scripts/device/capture-session.sh
#  1. capture-fixtures.sh: the two unflushed exports (killed, os._exit) and the tracing cost per
#     call unprofiled and under --trace=cuda,nvtx,osrt;
#  2. capture-corpus.sh on NEW (scripts never captured: timed with every switch and profiled);
#  3. capture-corpus.sh REMOVALS_ONLY=1 PROFILE=0 on REMOVALS (scripts whose committed exports
#     stay: each full-removal switch timed beside none, shorter loops);
#  4. capture-corpus.sh on LAST (REPEATS=1) if the budget still allows it.
# Each part gets what is left of BUDGET_S (less a margin for packing); $OUT gets session.tar
# (every part's files) and session.log. Unpack here: tar -xf session.tar; then
# python -m scripts.ingest_corpus part2 part3 part4 (see corpus/wild/README.md).
set -u
cd "$(dirname "$0")/../.."
out=${OUT:-/var/tmp/session-out}
work=$(mktemp -d /var/tmp/session.XXXXXX)
budget=${BUDGET_S:-300}
t0=$(date +%s)
mkdir -p "$out"
exec > >(tee -a "$out/session.log") 2>&1
left() { echo $(( budget - ($(date +%s) - t0) - ${1:-15} )); }
atleast() { local v; v=$(left "$2"); echo $(( v > $1 ? v : $1 )); }  # timeout 0 would mean none
NEW=${NEW-"gil_metrics_thread gil_shard_prep gil_log_shipper hs_grad_hooks"}
REMOVALS=${REMOVALS-"ds_cpu_augment ds_few_workers ds_slow_storage pg_cuda_ram pg_nonblocking_unpinned lb_python_timesteps hs_step_logging hs_hard_mining"}
LAST=${LAST-"clean_cudnn_short clean_compile_short"}
echo "== capture-session: budget ${budget} s"
OUT=$work/part1 TERM_AFTER_S=${TERM_AFTER_S:-12} TRACES=${TRACES-"none cuda,nvtx,osrt cuda,nvtx,osrt@range"} \
  timeout -k 5 "$(atleast 30 200)" bash scripts/device/capture-fixtures.sh
echo "== part 2 (new scripts): $(left) s left"
[ -n "$NEW" ] && [ "$(left 60)" -gt 0 ] && OUT=$work/part2 ONLY=$NEW BUDGET_S=$(left) \
  bash scripts/device/capture-corpus.sh
echo "== part 3 (removal switches, timing only): $(left) s left"
[ -n "$REMOVALS" ] && [ "$(left 40)" -gt 0 ] && OUT=$work/part3 ONLY=$REMOVALS REMOVALS_ONLY=1 PROFILE=0 \
  SCRIPT_ARGS=${SCRIPT_ARGS:-"--seconds 0.8"} BUDGET_S=$(left) bash scripts/device/capture-corpus.sh
echo "== part 4 (last): $(left) s left"
[ -n "$LAST" ] && [ "$(left 120)" -gt 0 ] && OUT=$work/part4 ONLY=$LAST REPEATS=1 BUDGET_S=$(left) \
  bash scripts/device/capture-corpus.sh
tar -cf "$out/session.tar" -C "$work" .
echo "== done in $(( $(date +%s) - t0 )) s: $(du -k "$out/session.tar" | cut -f1) KB"
