#!/usr/bin/env bash
# On the GPU machine, from the checkout root:
#   source .gpu-stage/bin/env.sh && bash scripts/device/capture-corpus.sh
# Times and profiles the wild corpus (corpus/wild/*.py, labels in corpus/wild/labels.csv):
#  1. timing: REPEATS (default 2) rounds; each round runs every script with `none` and each of
#     its fixes, one process each (interleaved: r1 all scripts/variants, then r2 ...), forked by
#     corpus/timer.py from a parent that has imported torch once;
#  2. profiling: every script once, unchanged, whole process, under nsys; the SQLite exports
#     and xz run in the background (<= 4 at once) while the next script is profiled, never
#     beside a timing process;
#  3. $OUT: corpus-timing.csv, corpus-measured.csv (corpus/measure.py), corpus-exports.tar
#     (NAME.sqlite.xz), capture.log; prints the table last.
# Env: ONLY="a b" (script names), PART=1of2|2of2 (every other script), REPEATS, PROFILE=0 (timing
#      only: keep the committed exports), OUT, BUDGET_S (the call's seconds: timing and profiling
#      stop in time to leave the rest; the whole single-GPU corpus takes two calls, PART=1of2 and
#      PART=2of2 with BUDGET_S=570 each),
#      PYTHON (default python3), TIMEOUT_S (per process, default 90; clean_compile 240),
#      GPUS2=1 to include the 2-GPU scripts (run via python -m torch.distributed.run; default: skipped unless in ONLY).
set -u
cd "$(dirname "$0")/../.."
py=${PYTHON:-python3}
repeats=${REPEATS:-2}
out=${OUT:-/var/tmp/corpus-out}
work=${WORK:-/var/tmp/corpus-capture}
tmo=${TIMEOUT_S:-90}
labels=corpus/wild/labels.csv
mkdir -p "$out"
rm -rf "$work" && mkdir -p "$work/logs" "$work/profiles"
exec > >(tee -a "$out/capture.log") 2>&1
export TORCHINDUCTOR_CACHE_DIR=/tmp/corpus-inductor-cache TRITON_CACHE_DIR=/tmp/corpus-triton-cache
export PYTHONUNBUFFERED=1
t_start=$(date +%s)
echo "== capture-corpus: $(date -u +%FT%TZ) host=$(hostname) nproc=$(nproc)"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "nsys: $(command -v nsys || echo missing) $(nsys --version 2>/dev/null)"

# scripts and their variants, from the labels file: "name gpus fix1 fix2 ..."
mapfile -t specs < <("$py" - "$labels" <<'PYEOF'
import csv, sys
for r in csv.DictReader(open(sys.argv[1])):
    fixes = [r["label_fix"]] + [x for x in r["other_fixes"].split(";") if x]
    print(r["script"], r["gpus"], *fixes)
PYEOF
)
selected=()
i=0
for spec in "${specs[@]}"; do
  read -r name gpus _ <<<"$spec"
  i=$((i + 1))
  if [ -n "${ONLY:-}" ]; then
    [[ " $ONLY " == *" $name "* ]] || continue
  else
    [ "$gpus" = 1 ] || [ "${GPUS2:-0}" = 1 ] || continue
    case "${PART:-}" in
      1of2) [ $((i % 2)) = 1 ] || continue ;;
      2of2) [ $((i % 2)) = 0 ] || continue ;;
    esac
  fi
  selected+=("$spec")
done
echo "scripts (${#selected[@]}): $(for s in "${selected[@]}"; do printf '%s ' "${s%% *}"; done)"

launcher() {  # the command that runs script $1 with $2 GPUs
  if [ "$2" = 1 ]; then echo "$py corpus/wild/$1.py"
  else echo "$py -m torch.distributed.run --standalone --nproc_per_node=$2 corpus/wild/$1.py"; fi
}
limit() { [ "$1" = clean_compile ] && echo 240 || echo "$tmo"; }

# BUDGET_S: the call's seconds; timing stops early enough to leave each profile ~25 s
budget=${BUDGET_S:-0}
deadline=()
[ "$budget" -gt 0 ] && deadline=(--deadline $(( t_start + budget - 25 * ${#selected[@]} - 20 )))
rm -f "$out/corpus-timing.csv"
echo "== timing: $repeats round(s) (corpus/timer.py: one forked process per run)"
for spec in "${selected[@]}"; do
  read -r name gpus fixes <<<"$spec"
  echo "$name $gpus $(limit "$name") $fixes"
done | "$py" corpus/timer.py --repeats "$repeats" --csv "$out/corpus-timing.csv" \
  --logs "$work/logs" "${deadline[@]}"
echo "timing done: $(( $(date +%s) - t_start )) s"

export_one() {  # nsys-rep -> sqlite -> xz, in the background
  local d=$1 n=$2
  nsys export --type sqlite --force-overwrite=true -o "$d/$n.sqlite" "$d/$n.nsys-rep" >"$d/$n.export.log" 2>&1 \
    && xz -9e -T0 -f "$d/$n.sqlite" && echo "  exported $n: $(du -k "$d/$n.sqlite.xz" | cut -f1) KB xz" \
    || echo "  EXPORT FAILED $n: $(tail -2 "$d/$n.export.log")"
}
echo "== profiling"
prof=$work/profiles
pids=()
[ "${PROFILE:-1}" = 0 ] && selected_profile=() || selected_profile=("${selected[@]}")
for spec in "${selected_profile[@]}"; do
  read -r name gpus _ <<<"$spec"
  if [ "$budget" -gt 0 ] && [ $(( $(date +%s) + 40 )) -gt $(( t_start + budget )) ]; then
    echo "  DEADLINE: $name and later scripts not profiled"
    break
  fi
  while [ "$(jobs -rp | wc -l)" -ge 4 ]; do wait -n "${pids[@]}"; done
  t0=$(date +%s)
  # shellcheck disable=SC2046
  timeout -k 10 $(( $(limit "$name") + 60 )) nsys profile --trace=cuda,nvtx,osrt --sample=none --cpuctxsw=none \
    --force-overwrite=true -o "$prof/$name" $(launcher "$name" "$gpus") >"$work/logs/$name.profile.log" 2>&1
  rc=$?
  echo "  profiled $name rc=$rc $(( $(date +%s) - t0 )) s $(grep '^RESULT' "$work/logs/$name.profile.log" | tail -1)"
  if [ -f "$prof/$name.nsys-rep" ]; then
    export_one "$prof" "$name" &
    pids+=($!)
  else
    tail -5 "$work/logs/$name.profile.log" | sed 's/^/    | /'
  fi
done
# only the export jobs: a bare `wait` would also wait for the tee behind `exec > >(tee ...)`
[ ${#pids[@]} -gt 0 ] && wait "${pids[@]}"
(cd "$prof" && ls ./*.sqlite.xz >/dev/null 2>&1 && tar -cf "$out/corpus-exports.tar" ./*.sqlite.xz)
echo "exports: $(du -k "$out/corpus-exports.tar" 2>/dev/null | cut -f1) KB tar; total $(( $(date +%s) - t_start )) s"
echo "== measured (label rule: label_fix largest and >= 1.2; clean: no fix > 1.1)"
"$py" corpus/measure.py summarize "$out/corpus-timing.csv" "$labels" "$out/corpus-measured.csv"
