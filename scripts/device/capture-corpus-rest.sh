#!/usr/bin/env bash
# On the GPU machine (one H200), from the checkout root, one call of at most ~480 s:
#   source .gpu-stage/bin/env.sh && OUT=$OUT bash scripts/device/capture-corpus-rest.sh
# The corpus scripts of issues 49 and 50 (corpus/wild/pending/labels.csv), all seventeen.
# capture-corpus.sh times each with `none` and every switch (REPEATS, default
# 2: the second round as far as BUDGET_S leaves time beside the profiles, the first in full) and
# profiles each once, whole process, with a short loop (PROFILE_ARGS, default "--seconds 0.3":
# the scripts round it up to a whole period or cycle; the timing keeps their own 1.5 s loops).
# Back here, two files:
#   $OUT/corpus-rest.tar.N (15 MB pieces: cat them)   corpus-rest/{corpus-timing.csv,corpus-measured.csv,corpus-exports.tar,
#                          capture.log}
#   $OUT/corpus-rest.log   this call's log, the table last (each switch's speedup, each
#                          export's size as .sqlite.xz)
# Then, here: python -m corpus.ingest_pending corpus-rest   (corpus/wild/README.md)
# Env: SCRIPTS (default: the list below), REPEATS, BUDGET_S (default 465: capture-corpus.sh's
# share of the call), PROFILE_ARGS, PROFILE_EST_S (default 19: a short profile's seconds on the
# H200, from the first call's 18-22 s at full length), OUT.
set -u
cd "$(dirname "$0")/../.."
out=${OUT:-/var/tmp/corpus-rest-out}
mkdir -p "$out"
exec > >(tee -a "$out/corpus-rest.log") 2>&1
t0=$(date +%s)
scripts=${SCRIPTS:-fm_mlp_fp32 ue_layernorm_gelu lt_resnet_nchw ac_empty_cache_varlen \
fm_vit_tf32_off fm_convnet_fp32 ue_swiglu ue_softmax_attention lt_unet_decoder \
lt_depthwise ac_del_infer ac_fragmentation bio_torch_save bio_csv_log bio_np_save_acts \
ds_bucketed_text lb_bucketed_graphs}
work=$(mktemp -d /var/tmp/corpus-rest.XXXXXX)
echo "== capture-corpus-rest: $(date -u +%FT%TZ) host=$(hostname) nproc=$(nproc)"
echo "scripts: $scripts"
ONLY="$scripts" LABELS=corpus/wild/pending/labels.csv REPEATS=${REPEATS:-2} \
  BUDGET_S=${BUDGET_S:-465} PROFILE_ARGS=${PROFILE_ARGS---seconds 0.3} \
  PROFILE_EST_S=${PROFILE_EST_S:-19} OUT="$work/corpus-rest" \
  bash scripts/device/capture-corpus.sh
echo "capture done: $(( $(date +%s) - t0 )) s"
# what comes back is capped at 16 MB a file: pieces (cat corpus-rest.tar.* > corpus-rest.tar)
tar -cf - -C "$work" corpus-rest | split -b 15M -d -a 1 - "$out/corpus-rest.tar."
echo "== files in \$OUT:"
ls -la "$out"
echo "== exports (.sqlite.xz, KB; corpus/ingest_pending.py packs and cuts them here)"
tar -tvf "$work/corpus-rest/corpus-exports.tar" 2>/dev/null \
  | awk '{printf "%-28s %6d\n", $NF, $3 / 1024}' | sed 's|^\./||'
echo "== summary ($(( $(date +%s) - t0 )) s)"
python3 scripts/device/new_classes_table.py --corpus "$work/corpus-rest/corpus-measured.csv"
