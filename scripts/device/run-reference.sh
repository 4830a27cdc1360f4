#!/usr/bin/env bash
# On the lent GPU machine, from the checkout root, after `source .gpu-stage/bin/env.sh`:
#   bash scripts/device/run-reference.sh NAME [harness overrides...]
# Runs `python -m harness run` with the given overrides into /var/tmp/results/NAME, then packs
# what comes back into $OUT: the run's tables, manifest and per-variant JSON/logs (no .nsys-rep),
# and its SQLite exports compressed separately.
set -uo pipefail
name=$1; shift
results=/var/tmp/results/$name
mkdir -p "$results"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,temperature.gpu --format=csv
start=$(date +%s)
python3 -m harness run harness.results_dir="$results" harness.progress=false "$@"
rc=$?
echo "harness exit code: $rc; wall: $(( $(date +%s) - start )) s"
run=$(ls -d "$results"/*/ | tail -1)
if [ -n "${OUT:-}" ] && [ -n "$run" ]; then
  tar -C "$run" -cJf "$OUT/$name-tables.tar.xz" --exclude='*.nsys-rep' --exclude='*.sqlite' --exclude='*.qdstrm' .
  # The exports in 15 MB pieces (what comes back is capped at 16 MB a file, 8 files):
  #   cat NAME-sqlite.tar.xz.* | tar -xJ
  (cd "$run" && find . -name '*.sqlite' -print0 | tar --null -T - -cJf - ) \
    | split -b 15M -d -a 1 - "$OUT/$name-sqlite.tar.xz."
  ls -la "$OUT"
fi
exit $rc
