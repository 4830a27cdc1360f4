#!/usr/bin/env bash
# On the lent GPU machine, from the checkout root, after `source .gpu-stage/bin/env.sh`:
#   bash scripts/device/bench-speed.sh
# One call for the detector-speed figures on the GPU host:
#  1. (STANDIN=1, default) a stand-in: the committed, trimmed H100 kernel_flood baseline export
#     tiled 56 times (126 MB): scripts/bench_detectors.py (best of 3) and one cold
#     `python -m harness diagnose`;
#  2. scripts/device/bench-export.sh (a real >= 1 GB export made by the suite), under a time
#     limit, keeping nsys's own logs of the profiled worker in $OUT when it fails.
set -uo pipefail
out=${OUT:-/var/tmp/bench-speed}
mkdir -p "$out"
big=/var/tmp/big.sqlite
if [ "${STANDIN:-1}" = 1 ]; then
xz -dkc tests/data/h100/h100_kernel_flood__baseline.sqlite.xz >/var/tmp/kf_base.sqlite
python3 scripts/bench_detectors.py --tile /var/tmp/kf_base.sqlite 56 "$big" --repeat 3 \
  --csv "$out/bench_detectors_standin.csv"
ls -la "$big"
t0=$(date +%s.%N)
python3 -m harness diagnose "$big" | head -3
t1=$(date +%s.%N)
python3 -c "print(f'harness diagnose wall time (stand-in): {$t1 - $t0:.2f} s')"
rm -f "$big"
fi
OUT=$out timeout --signal=INT --kill-after=20 "${BENCH_EXPORT_S:-330}" bash scripts/device/bench-export.sh
echo "bench-export.sh exit code: $?"
run=$(ls -d /var/tmp/results/bench-export/*/ 2>/dev/null | tail -1)
if [ -n "$run" ]; then
  for f in $(find "$run" -name 'std*.log' -path '*profile*'); do
    cp "$f" "$out/profile-$(basename "$f")"
  done
  find "$run" -name 'status.json' -path '*profile*' -exec cp {} "$out/profile-status.json" \;
fi
ls -la "$out"
