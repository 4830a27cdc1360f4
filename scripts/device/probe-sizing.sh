#!/usr/bin/env bash
# On the lent GPU machine, from the checkout root, after `source .gpu-stage/bin/env.sh`:
#   bash scripts/device/probe-sizing.sh
# One call, four harness runs (each packed into $OUT by run-reference.sh), to choose nsys
# settings per scenario and check forced_sync's sizing before the reference run:
#  1. forced_sync, every variant, traced without OS-runtime interposition (cuda,nvtx);
#  2. kernel_flood baseline and cuda_graphs, the same;
#  3. both baselines again with osrt (the A/B that says what osrt costs the host loop);
#  4. forced_sync baseline and ideal at 1.5x the batch (more GPU time per step), cuda,nvtx.
# The results land in results/reference/h100/sizing/ with a note on what they decided.
set -uo pipefail
ref=scripts/device/run-reference.sh
common=(diagnosis.expert_rules.enabled=false)
LIMIT_S=200 bash "$ref" fs_cuda_nvtx +scenario=forced_sync \
  'scenario.forced_sync.nsys_trace=[cuda,nvtx]' "${common[@]}"
SQLITE_MAX_MB=0 LIMIT_S=90 bash "$ref" kf_cuda_nvtx +scenario=kernel_flood \
  'scenario.kernel_flood.variants=[baseline,cuda_graphs]' \
  'scenario.kernel_flood.nsys_trace=[cuda,nvtx]' harness.repeats=1 "${common[@]}"
SQLITE_MAX_MB=0 LIMIT_S=100 bash "$ref" osrt_ab '+scenario=[forced_sync,kernel_flood]' \
  'scenario.forced_sync.variants=[baseline]' 'scenario.kernel_flood.variants=[baseline]' \
  'scenario.forced_sync.nsys_trace=[cuda,nvtx,osrt]' \
  'scenario.kernel_flood.nsys_trace=[cuda,nvtx,osrt]' harness.repeats=1 "${common[@]}"
LIMIT_S=90 bash "$ref" fs_batch12k +scenario=forced_sync \
  'scenario.forced_sync.variants=[baseline,ideal]' scenario.forced_sync.full.batch=12288 \
  'scenario.forced_sync.nsys_trace=[cuda,nvtx]' harness.repeats=1 "${common[@]}"
