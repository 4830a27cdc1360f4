#!/usr/bin/env bash
# On the GPU machine, from the checkout root:
#   source .gpu-stage/bin/env.sh && PART=1of3 BUDGET_S=570 OUT=$OUT bash scripts/device/capture-corpus.sh
# Times and profiles the wild corpus (corpus/wild/*.py, labels in corpus/wild/labels.csv):
#  1. plan (corpus/plan.py): the scripts of this call; PART=KofN deals the corpus into N calls of
#     near-equal estimated time (heaviest first, each to the lightest part); a script that needs
#     more GPUs (labels' `gpus`) than the machine has is skipped with a message;
#  2. timing: REPEATS (default 2) rounds; each round runs every script with `none` and each of
#     its switches, one process each (interleaved: r1 all scripts/variants, then r2 ...), forked
#     by corpus/timer.py from a parent that has imported torch once; `procs`=2 scripts as 2 ranks
#     forked the same way, with the environment torch.distributed.run gives its workers; an
#     entry runs its labels' `source` script (default: its own name) with its `device`;
#  3. profiling: every script once, unchanged, whole process (`procs`=2: under
#     python -m torch.distributed.run --standalone --nproc_per_node=2), under
#     nsys profile --trace=<labels' nsys_trace> --sample=none --cpuctxsw=none (clean_compile_short
#     with empty compiler caches, its whole compile in the capture: corpus/plan.py's COLD_CACHE);
#     a --trace value this nsys lacks (python-gil before 2024) is dropped with a note; the SQLite
#     exports and xz run in the background (<= 4 at once) while the next script is profiled,
#     never beside a timing process; a profile that made no report is tried once more;
#  4. $OUT: corpus-timing.csv, corpus-measured.csv (corpus/measure.py), corpus-exports.tar
#     (NAME.sqlite.xz), capture.log; prints the table last.
# Env: ONLY="a b" (script names; PART is then ignored), PART=KofN (any N; the ~28-script corpus
#      fits 3 calls: PART=1of3, 2of3, 3of3 with BUDGET_S=570 each), REPEATS, PROFILE=0 (timing
#      only: keep the committed exports), OUT, BUDGET_S (the call's seconds: timing stops early
#      enough to leave each selected script its estimated profile time, profiling stops before
#      the budget), PYTHON (default python3), GPUS (default: nvidia-smi's count; GPUS=1 on a
#      CPU box runs the single-GPU scripts at their CPU size, a dry run), LABELS (default
#      corpus/wild/labels.csv), SCRIPT_ARGS (appended to every timed run, e.g. "--seconds 0"),
#      PROFILE_ARGS (appended to the profiled run only, e.g. "--seconds 0.3": a shorter loop
#      than the timed one, so that the export stays small; the scripts round it up to a whole
#      period or cycle of their own; the timing keeps the scripts' own length), PROFILE_EST_S
#      (every profile's estimated seconds for BUDGET_S, instead of corpus/plan.py's),
#      REMOVALS_ONLY=1 (time each script's full-removal switches only, beside none: with
#      PROFILE=0, the measurements the committed exports' predictions are checked against).
#      Per-run time limits and time estimates are corpus/plan.py's.
set -u
cd "$(dirname "$0")/../.."
py=${PYTHON:-python3}
repeats=${REPEATS:-2}
out=${OUT:-/var/tmp/corpus-out}
work=${WORK:-/var/tmp/corpus-capture}
labels=${LABELS:-corpus/wild/labels.csv}
mkdir -p "$out"
rm -rf "$work" && mkdir -p "$work/logs" "$work/profiles" "$work/cold"
exec > >(tee -a "$out/capture.log") 2>&1
export TORCHINDUCTOR_CACHE_DIR=/tmp/corpus-inductor-cache TRITON_CACHE_DIR=/tmp/corpus-triton-cache
export PYTHONUNBUFFERED=1
t_start=$(date +%s)
echo "== capture-corpus: $(date -u +%FT%TZ) host=$(hostname) nproc=$(nproc)"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
gpus=${GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}
echo "nsys: $(command -v nsys || echo missing) $(nsys --version 2>/dev/null); GPUs: $gpus"

# the --trace values this nsys accepts (empty when its help cannot be read: then none is dropped)
nsys_traces=" $(nsys profile --help 2>&1 | sed -n '/-t, --trace=/,/Select the API/p' \
  | grep -o "'[a-z0-9-]*'" | tr -d "'" | tr '\n' ' ')"
trace_for() {  # $1: a script's nsys_trace -> the values this nsys accepts; a note per value dropped
  local v kept=()
  IFS=, read -ra vals <<<"$1"
  for v in "${vals[@]}"; do
    if [ "$nsys_traces" = " " ] || [[ "$nsys_traces" == *" $v "* ]]; then kept+=("$v")
    else echo "  note: this nsys has no --trace=$v; profiling without it" >&2; fi
  done
  (IFS=,; echo "${kept[*]}")
}

# this call's entries: "name procs gpus limit_s profile_s trace cache source device fix1 fix2 ..."
removals=()
[ "${REMOVALS_ONLY:-0}" = 1 ] && removals=(--removals-only)
mapfile -t selected < <("$py" corpus/plan.py "$labels" --part "${PART:-}" --only "${ONLY:-}" \
  --gpus "$gpus" --repeats "$repeats" --profile-s "${PROFILE_EST_S:-0}" "${removals[@]}")
if [ ${#selected[@]} -eq 0 ]; then echo "no script selected"; exit 2; fi
echo "scripts (${#selected[@]}): $(for s in "${selected[@]}"; do printf '%s ' "${s%% *}"; done)"

launcher() {  # the command that runs script $1 in $2 processes with --device $3 (auto: none)
  local dev=""
  [ "$3" = auto ] || dev=" --device $3"
  if [ "$2" = 1 ]; then echo "$py corpus/wild/$1.py$dev"
  else echo "$py -m torch.distributed.run --standalone --nproc_per_node=$2 corpus/wild/$1.py$dev"; fi
}

# BUDGET_S: the call's seconds; timing stops early enough to leave each profile its estimate
budget=${BUDGET_S:-0}
profile_total=0  # PROFILE=0: nothing is profiled, so timing may use the whole budget
[ "${PROFILE:-1}" = 0 ] || for spec in "${selected[@]}"; do
  read -r _ _ _ _ prof_s _ <<<"$spec"
  profile_total=$((profile_total + prof_s))
done
deadline=()
[ "$budget" -gt 0 ] && deadline=(--deadline $(( t_start + budget - profile_total - 20 )))
rm -f "$out/corpus-timing.csv"
echo "== timing: $repeats round(s) (corpus/timer.py: one forked process per run)"
for spec in "${selected[@]}"; do
  read -r name procs _ limit_s _ _ _ source device fixes <<<"$spec"
  echo "$name $procs $limit_s source=$source device=$device $fixes"
done | "$py" corpus/timer.py --repeats "$repeats" --csv "$out/corpus-timing.csv" \
  --logs "$work/logs" --script-args="${SCRIPT_ARGS:-}" "${deadline[@]}"
echo "timing done: $(( $(date +%s) - t_start )) s"

export_one() {  # nsys-rep -> sqlite -> xz, in the background
  local d=$1 n=$2
  nsys export --type sqlite --force-overwrite=true -o "$d/$n.sqlite" "$d/$n.nsys-rep" >"$d/$n.export.log" 2>&1 \
    && xz -9e -T0 -f "$d/$n.sqlite" && echo "  exported $n: $(du -k "$d/$n.sqlite.xz" | cut -f1) KB xz" \
    || echo "  EXPORT FAILED $n: $(tail -2 "$d/$n.export.log")"
}
echo "== profiling${PROFILE_ARGS:+ (each run with: $PROFILE_ARGS)}"
prof=$work/profiles
pids=()
[ "${PROFILE:-1}" = 0 ] && selected_profile=() || selected_profile=("${selected[@]}")
for spec in "${selected_profile[@]}"; do
  read -r name procs _ limit_s prof_s trace cache source device _ <<<"$spec"
  if [ "$budget" -gt 0 ] && [ $(( $(date +%s) + prof_s )) -gt $(( t_start + budget - 10 )) ]; then
    echo "  DEADLINE: $name and later scripts not profiled"
    break
  fi
  while [ "$(jobs -rp | wc -l)" -ge 4 ]; do wait -n "${pids[@]}"; done
  trace=$(trace_for "$trace")
  caches=()
  [ "$cache" = cold ] && caches=(TORCHINDUCTOR_CACHE_DIR="$work/cold/$name/inductor" \
    TRITON_CACHE_DIR="$work/cold/$name/triton")
  for try in 1 2; do  # a second try only when nsys made no report yet ran in time, and time is left
    rm -rf "$work/cold/$name"
    t0=$(date +%s)
    # shellcheck disable=SC2046,SC2086
    env "${caches[@]}" timeout -k 10 $(( limit_s + 60 )) nsys profile --trace="$trace" --sample=none --cpuctxsw=none \
      --force-overwrite=true -o "$prof/$name" $(launcher "$source" "$procs" "$device") ${PROFILE_ARGS:-} \
      >"$work/logs/$name.profile.log" 2>&1
    rc=$?
    echo "  profiled $name rc=$rc $(( $(date +%s) - t0 )) s (estimate $prof_s s, --trace=$trace)" \
      "$(grep '^RESULT' "$work/logs/$name.profile.log" | tail -1)"
    [ -f "$prof/$name.nsys-rep" ] && break
    [ "$rc" = 124 ] || [ "$rc" = 137 ] && break  # past its limit: a second try would be too
    [ "$budget" -gt 0 ] && [ $(( $(date +%s) + prof_s )) -gt $(( t_start + budget - 10 )) ] && break
    [ "$try" = 1 ] && echo "  no report from nsys; trying $name once more"
  done
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
echo "== measured (label rule: the label class's best switch >= 1.2 and largest; clean: none > 1.1)"
"$py" corpus/measure.py summarize "$out/corpus-timing.csv" "$labels" "$out/corpus-measured.csv"
