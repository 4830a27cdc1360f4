#!/usr/bin/env bash
# On the GPU machine (one H200), from the checkout root, one call of at most ~540 s:
#   source .gpu-stage/bin/env.sh && OUT=$OUT bash scripts/device/dev-new-classes.sh
# The first GPU look at the five classes of issues 49 and 50:
#  (a) python3 -m harness run +scenario=[fp32_matmul,unfused_chain,nchw_conv,empty_cache,
#      sync_checkpoint] harness.repeats=2, through run-reference.sh: stopped with SIGINT after
#      HARNESS_S (default 330 s; the harness then keeps what finished, RESUME=1 in a later call
#      finishes it), its tables and SQLite exports packed into $OUT as
#      new-classes-tables.tar.xz and new-classes-sqlite.tar.xz.N (xz, 15 MB pieces);
#  (b) capture-corpus.sh on the new corpus scripts (LABELS=corpus/wild/pending/labels.csv: timed
#      with every switch, REPEATS=2, and profiled), each of CORPUS_PARTS (default "1of5"; or
#      CORPUS_ONLY="name ...") with what is left of the call's TOTAL_S (default 530 s) less the
#      packing; every part's files go into $OUT/corpus.tar;
#  then a short table: each variant's step and speedup, each corpus switch's speedup.
# Later calls capture the rest of the corpus alone:
#   SKIP_HARNESS=1 CORPUS_PARTS="2of5 3of5 4of5" OUT=$OUT bash scripts/device/dev-new-classes.sh
# (the parts are dealt by corpus/plan.py's estimates, ~45 s a script: 1of5 is ~3-4 scripts).
# Back here: at most 6 files (log, tables, <= 3 SQLite pieces, corpus.tar), ~20-50 MB in all;
#   cat new-classes-sqlite.tar.xz.* | tar -xJ       # the exports, beside the tables
#   tar -xf corpus.tar && python -m scripts.ingest_corpus corpus-1of5 ...   (corpus/wild/README.md)
set -u
cd "$(dirname "$0")/../.."
out=${OUT:-/var/tmp/new-classes-out}
mkdir -p "$out"
exec > >(tee -a "$out/new-classes.log") 2>&1
t0=$(date +%s)
total=${TOTAL_S:-530}
left() { echo $(( total - ($(date +%s) - t0) - ${1:-0} )); }
scenarios=${SCENARIOS:-fp32_matmul,unfused_chain,nchw_conv,empty_cache,sync_checkpoint}
echo "== dev-new-classes: $(date -u +%FT%TZ) host=$(hostname) nproc=$(nproc); budget ${total} s"

run_dir=""
if [ "${SKIP_HARNESS:-0}" != 1 ]; then
  echo "== (a) harness run +scenario=[$scenarios] harness.repeats=${REPEATS_HARNESS:-2}"
  LIMIT_S=${HARNESS_S:-330} SQLITE_MAX_MB=${SQLITE_MAX_MB:-40} OUT=$out \
    bash scripts/device/run-reference.sh new-classes "+scenario=[$scenarios]" \
    "harness.repeats=${REPEATS_HARNESS:-2}" ${HARNESS_ARGS:-}
  echo "harness part done: $(( $(date +%s) - t0 )) s"
  run_dir=$(ls -d /var/tmp/results/new-classes/*/ 2>/dev/null | tail -1)
  pieces=$(ls "$out"/new-classes-sqlite.tar.xz.* 2>/dev/null | wc -l)
  [ "$pieces" -gt 3 ] && echo "WARNING: $pieces SQLite pieces: more than the 8 files that come back allow beside the rest"
fi

work=$(mktemp -d /var/tmp/new-corpus.XXXXXX)
labels=corpus/wild/pending/labels.csv
if [ -n "${CORPUS_ONLY:-}" ]; then parts=(only); else read -ra parts <<<"${CORPUS_PARTS-1of5}"; fi
for part in "${parts[@]}"; do
  budget=$(left 25)  # packing and the table after the last part
  if [ "$budget" -lt 60 ]; then echo "== (b) corpus $part: only ${budget} s left, not started"; continue; fi
  echo "== (b) corpus $part: ${budget} s"
  sel=(PART="$part")
  [ "$part" = only ] && sel=(ONLY="$CORPUS_ONLY")
  env "${sel[@]}" LABELS=$labels REPEATS=${REPEATS:-2} BUDGET_S=$budget OUT="$work/corpus-$part" \
    bash scripts/device/capture-corpus.sh
done
ls "$work"/corpus-* >/dev/null 2>&1 && tar -cf "$out/corpus.tar" -C "$work" .

echo "== files in \$OUT ($(du -sh "$out" | cut -f1)):"
ls -la "$out"
echo "== summary ($(( $(date +%s) - t0 )) s)"
python3 scripts/device/new_classes_table.py ${run_dir:+--run "$run_dir"} \
  $(for m in "$work"/corpus-*/corpus-measured.csv; do [ -f "$m" ] && echo "--corpus $m"; done)
