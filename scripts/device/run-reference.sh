#!/usr/bin/env bash
# On the lent GPU machine, from the checkout root, after `source .gpu-stage/bin/env.sh`:
#   [LIMIT_S=540] [SQLITE_MAX_MB=40] [COLD=1] bash scripts/device/run-reference.sh NAME [harness overrides...]
# Runs `python -m harness run` with the given overrides into /var/tmp/results/NAME (resuming the
# newest run there when RESUME=1), stops it with SIGINT after LIMIT_S seconds (so the harness keeps
# what finished and the packing below still happens inside the device's 600 s call limit), prints
# where the wall time went (scripts/device/wall_table.py), then packs into $OUT: the run's tables,
# manifest and per-variant JSON/logs (no .nsys-rep), its Kineto traces, and its SQLite exports (each under
# SQLITE_MAX_MB) xz-compressed in 15 MB pieces.
set -uo pipefail
name=$1; shift
# the device's copy of the tree has no git metadata: .revision (written here before the call,
# `git rev-parse HEAD > .revision`) names the commit for the manifest (harness/core/envinfo.py)
[ -f .revision ] && export BOTTLENECK_GIT_SHA="$(cat .revision)"
results=/var/tmp/results/$name
mkdir -p "$results"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,temperature.gpu --format=csv
extra=()
if [ -n "${RESUME:-}" ] && last=$(ls -d "$results"/*/ 2>/dev/null | tail -1) && [ -n "$last" ]; then
  extra=("harness.resume=$last")
fi
# a cold run: wipe the compiler caches (inductor, Triton, CUDA's JIT); a resumed one keeps them (its
# first call compiled cold already; a wipe then made the resumed Nsight Compute row compile from
# scratch: 106 s for a 40 s budget, 2026-12-04)
if [ -n "${COLD:-}" ] && [ -z "${RESUME:-}" ]; then
  rm -rf /tmp/torchinductor_* "${TORCHINDUCTOR_CACHE_DIR:-/nonexistent}" ~/.triton ~/.cache/triton \
    ~/.cache/torch/kernels ~/.nv/ComputeCache 2>/dev/null
  echo "cold: compiler caches wiped"
fi
start=$(date +%s)
# Output is not a terminal here: the harness logs one line per finished worker run (no bar).
timeout --signal=INT --kill-after=30 "${LIMIT_S:-540}" \
  python3 -m harness run harness.results_dir="$results" "${extra[@]}" "$@"
rc=$?
echo "harness exit code: $rc; wall: $(( $(date +%s) - start )) s"
run=$(ls -d "$results"/*/ 2>/dev/null | tail -1)
if [ -n "$run" ] && [ -f "$run/timings.csv" ]; then
  python3 -m scripts.device.wall_table "$run" || true  # where the time went (both calls' workers)
fi
if [ -n "${OUT:-}" ] && [ -n "$run" ]; then
  # xz on every core: one thread took over 60 s for a cold run's exports (2026-11-27)
  tar -C "$run" -cf - --exclude='*.nsys-rep' --exclude='*.sqlite' --exclude='*.qdstrm' \
    --exclude='*.pt.trace.json.gz' . | xz -T0 -6 > "$OUT/$name-tables.tar.xz"
  # Kineto traces (kineto.enabled), already gzipped: cat NAME-kineto.tar.* | tar -x
  (cd "$run" && find . -name '*.pt.trace.json.gz' -print0 | tar --null -T - -cf - ) \
    | split -b 15M -d -a 1 - "$OUT/$name-kineto.tar."
  find "$OUT" -name "$name-kineto.tar.*" -size -11k -delete  # an empty tar: no kineto run
  # What comes back is capped at 16 MB a file and 8 files:  cat NAME-sqlite.tar.xz.* | tar -xJ
  if [ "${SQLITE_MAX_MB:-40}" != 0 ]; then  # 0: tables only
    (cd "$run" && find . -name '*.sqlite' -size -"${SQLITE_MAX_MB:-40}"M -print0 | tar --null -T - -cf - ) \
      | xz -T0 -6 | split -b 15M -d -a 1 - "$OUT/$name-sqlite.tar.xz."
  fi
  ls -la "$OUT"
fi
exit $rc
