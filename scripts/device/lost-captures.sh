#!/usr/bin/env bash
# On the GPU machine, after `source .gpu-stage/bin/env.sh` (issue 25): why traced fork servers
# lose capture ranges. 1. scripts/device/nsys_repeat_probe.py, every case (no harness);
# 2. +scenario=forced_sync with served profiles: the servers now log each signal's sender.
# Writes $OUT/repeat-probe.txt, $OUT/forced-sync.log and each server's log.
set -uo pipefail
out=${OUT:-/var/tmp/lost-captures}
mkdir -p "$out"
nsys --version
timeout 240 python3 scripts/device/nsys_repeat_probe.py > "$out/repeat-probe.txt" 2>&1
echo "repeat probe exit: $?"
grep "^CASE" "$out/repeat-probe.txt"
rm -rf /var/tmp/lost-captures-run
timeout 200 python3 -m harness run +scenario=forced_sync harness.repeats=1 \
  diagnosis.expert_rules.enabled=false harness.results_dir=/var/tmp/lost-captures-run \
  > "$out/forced-sync.log" 2>&1
echo "harness exit: $?"
grep -a "runs again\|again\|wall time" "$out/forced-sync.log" | cut -c1-240
for log in /var/tmp/lost-captures-run/*/servers/*/server.log; do
  grep -a "signal\|Capture range\|Generat\|terminated" "$log" | cut -c1-240
  cp "$log" "$out/server-$(basename "$(dirname "$log")").log"
done
