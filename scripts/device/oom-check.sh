#!/usr/bin/env bash
# On the lent GPU machine, from the checkout root, after `source .gpu-stage/bin/env.sh`:
#   OUT=$OUT bash scripts/device/oom-check.sh
# Issue 52's GPU check: a CUDA out-of-memory inside a variant must read `oom`, not `failed`.
# A helper process holds all but HEADROOM_MIB of the GPU's free memory (the card's settings are
# left alone), then one scenario runs with nsys off and one round; its runs.csv and the
# variants' logs come back in $OUT. The holder is stopped on the way out.
set -uo pipefail
results=/var/tmp/results/oom-check
rm -rf "$results" && mkdir -p "$results"
python3 - "${HEADROOM_MIB:-512}" <<'PY' &
import sys, time, torch
free, total = torch.cuda.mem_get_info()
keep = int(sys.argv[1]) * 2**20
held = torch.empty(max(free - keep, 0), dtype=torch.uint8, device="cuda")
print(f"holder: {held.numel() / 2**30:.1f} GiB held of {total / 2**30:.1f} GiB", flush=True)
time.sleep(300)
PY
holder=$!
trap 'kill $holder 2>/dev/null' EXIT
for _ in $(seq 60); do  # wait until the holder has its memory
  used=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
  [ "${used:-0}" -gt 100000 ] && break
  sleep 1
done
nvidia-smi --query-gpu=memory.used,memory.total --format=csv
python3 -m harness run harness.results_dir="$results" "+scenario=${SCENARIO:-fp32_matmul}" \
  harness.repeats=1 nsys.enabled=false kernels.enabled=false harness.report=false
echo "harness exit code: $?"
run=$(ls -d "$results"/*/ 2>/dev/null | tail -1)
[ -n "$run" ] && cut -d, -f1,2,8 "$run/runs.csv"
if [ -n "${OUT:-}" ] && [ -n "$run" ]; then
  tar -C "$run" -cJf "$OUT/oom-check.tar.xz" --exclude='*.sqlite' --exclude='*.nsys-rep' .
fi
