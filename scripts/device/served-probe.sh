#!/usr/bin/env bash
# On the GPU machine, after `source .gpu-stage/bin/env.sh`: why traced fork servers lose captures.
# Runs +scenario=forced_sync (one timing round, served profiles) under three settings and prints,
# per traced server, its captures, the signals it logged and which profiles ran again:
#   default | nsys.exit_after_capture=false | nsys.extra_args=["--kill=none"] (nsys's --kill
#   default, sigterm, signals the target's process group when nsys ends its session)
set -uo pipefail
out=${OUT:-/var/tmp/served-probe}
mkdir -p "$out"
i=0
for extra in "" "nsys.exit_after_capture=false" 'nsys.extra_args=["--kill=none"]'; do
  i=$((i + 1))
  dir=/var/tmp/served-probe/$i
  rm -rf "$dir"
  echo "== setting $i: ${extra:-default}"
  timeout 280 python3 -m harness run +scenario=forced_sync harness.repeats=1 \
    diagnosis.expert_rules.enabled=false harness.results_dir="$dir" $extra > "$out/run-$i.log" 2>&1
  echo "harness exit: $?"
  grep -a "runs again\|FAILED\|wall time" "$out/run-$i.log" | cut -c1-200
  for log in "$dir"/*/servers/*/server.log; do
    echo "  $(basename "$(dirname "$log")"): captures $(grep -ac 'Capture range started' "$log");" \
      "$(grep -a 'fork server:' "$log" | cut -c1-80 | tr '\n' ' ')"
    cp "$log" "$out/server-$i.log"
  done
done
