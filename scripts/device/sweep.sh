#!/usr/bin/env bash
# On the GPU machine (after `source .gpu-stage/bin/env.sh`): run several harness invocations,
# one per line of a plan file ("LABEL override override ..."), into one results folder, and
# re-pack every run's tables into $OUT/sweep-tables.tar.xz after each one, so whatever finished
# comes back even if the call is cut off. Used to size scenarios by measurement.
set -uo pipefail
plan=$1
results=/var/tmp/results/sweep
mkdir -p "$results"
while read -r label overrides; do
  [ -z "$label" ] || [ "${label:0:1}" = "#" ] && continue
  echo "=== $label: $overrides"
  # shellcheck disable=SC2086  # the overrides are words on purpose
  timeout 400 python3 -m harness run harness.results_dir="$results/$label" harness.progress=false $overrides 2>&1 \
    | grep -v '^\s*$' | tail -12
  [ -n "${OUT:-}" ] && tar -C "$results" -cJf "$OUT/sweep-tables.tar.xz" \
    --exclude='*.nsys-rep' --exclude='*.sqlite' --exclude='*.qdstrm' .
done < "$plan"
# KEEP_SQLITE=1: also bring the SQLite exports back (those under 60 MB, xz-compressed).
if [ -n "${KEEP_SQLITE:-}" ] && [ -n "${OUT:-}" ]; then
  (cd "$results" && find . -name '*.sqlite' -size -60M -print0 | tar --null -T - -cJf "$OUT/sweep-sqlite.tar.xz")
fi
