#!/usr/bin/env bash
# On the GPU machine, from the checkout root, one short call (~3-4 minutes):
#   source .gpu-stage/bin/env.sh && OUT=$OUT bash scripts/device/capture-fixtures.sh
# Writes into $OUT (issue 26 item 7: exports of processes that never flushed their CUDA activity):
#  unflushed_sigterm.sqlite.xz  the training loop of scripts/device/fixture_loop.py under
#      nsys profile --trace=cuda,nvtx,osrt --sample=none --cpuctxsw=none, killed mid-loop by
#      `timeout -s TERM` (inside nsys, so the app gets the signal and nsys still writes its report)
#  unflushed_os_exit.sqlite.xz  the same loop for LOOP_S seconds, leaving through os._exit(0)
#  trace-overhead.csv  microseconds per tiny kernel launch and per .item(), unprofiled and under
#      --trace=cuda,nvtx,osrt, --trace=cuda and --trace=nvtx,osrt (what nsys adds per call)
#  fixtures.log  everything printed, with each export's row counts (CUDA API calls, kernels)
# Env: OUT (default /var/tmp/fixtures-out), PYTHON (python3), TERM_AFTER_S (default 20: the
#      SIGTERM comes that long after start, so after ~5-10 s of import and set-up, mid-loop at
#      ~100 ms a step), LOOP_S (default 2), LAUNCHES (20000), ITEMS (2000), TRACES (the --trace
#      values of (c), space-separated, "none" for unprofiled; default: all four; empty: skip (c)).
set -u
cd "$(dirname "$0")/../.."
py=${PYTHON:-python3}
out=${OUT:-/var/tmp/fixtures-out}
work=$(mktemp -d /tmp/fixtures.XXXXXX)
term_after=${TERM_AFTER_S:-20}
loop_s=${LOOP_S:-2}
mkdir -p "$out"
exec > >(tee -a "$out/fixtures.log") 2>&1
export PYTHONUNBUFFERED=1
prog=scripts/device/fixture_loop.py
nsys_opts=(--sample=none --cpuctxsw=none --force-overwrite=true)
echo "== capture-fixtures: $(date -u +%FT%TZ) host=$(hostname)"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nsys_version=$(nsys --version 2>/dev/null | grep -o '[0-9][0-9.-]*[0-9]' | head -1)
echo "nsys: $(command -v nsys || echo missing) $nsys_version"
command -v nsys >/dev/null || { echo "no nsys on PATH (source .gpu-stage/bin/env.sh first)"; exit 2; }

counts() {  # row counts of an export: CUDA API calls, kernels, OS-runtime calls
  "$py" - "$1" <<'PYEOF'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
have = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
for t in ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL", "OSRT_API"):
    n = db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] if t in have else "absent"
    print(f"    {t}: {n}")
PYEOF
}

fixture() {  # $1: name; the rest: the command nsys profiles
  local name=$1 t0 rc
  shift
  t0=$(date +%s)
  timeout -k 10 180 nsys profile --trace=cuda,nvtx,osrt "${nsys_opts[@]}" -o "$work/$name" "$@" \
    >"$work/$name.log" 2>&1
  rc=$?
  echo "  $name: nsys rc=$rc $(( $(date +%s) - t0 )) s; the loop's last lines:"
  grep -E '^(step|RESULT)' "$work/$name.log" | tail -2 | sed 's/^/    | /'
  if [ ! -f "$work/$name.nsys-rep" ]; then
    echo "  $name: NO REPORT"; tail -5 "$work/$name.log" | sed 's/^/    | /'; return 1
  fi
  timeout -k 10 240 nsys export --type sqlite --force-overwrite=true -o "$work/$name.sqlite" \
    "$work/$name.nsys-rep" >"$work/$name.export.log" 2>&1 || { echo "  $name: EXPORT FAILED"; return 1; }
  counts "$work/$name.sqlite"
  xz -9e -T0 -c "$work/$name.sqlite" >"$work/$name.sqlite.xz" && mv "$work/$name.sqlite.xz" "$out/"
  local kb=$(( $(stat -c %s "$out/$name.sqlite.xz") / 1024 ))
  echo "  $name: $out/$name.sqlite.xz $kb KB$([ "$kb" -ge 300 ] && echo ' (OVER 300 KB: shorten the loop)')"
}

echo "== (a) SIGTERM mid-loop (timeout -s TERM $term_after inside nsys)"
fixture unflushed_sigterm timeout -s TERM "$term_after" "$py" "$prog" train --seconds 600
grep -q '^step' "$work/unflushed_sigterm.log" \
  || echo "  WARNING: the SIGTERM came before the loop's first 10 steps: raise TERM_AFTER_S"
echo "== (b) os._exit(0) after a ${loop_s} s loop"
fixture unflushed_os_exit "$py" "$prog" train --seconds "$loop_s" --exit os_exit

echo "== (c) tracing cost per call: ${LAUNCHES:-20000} launches, ${ITEMS:-2000} .item() calls"
csv=$work/trace-overhead.csv
echo "trace,us_per_launch,us_per_item,us_per_linear,launches,items,rounds,device,nsys_version" >"$csv"
for trace in ${TRACES-none cuda,nvtx,osrt cuda nvtx,osrt}; do
  cmd=("$py" "$prog" overhead --launches "${LAUNCHES:-20000}" --items "${ITEMS:-2000}")
  range=()  # VALUE@range: inside a cudaProfilerApi capture range, as the harness profiles
  case "$trace" in *@range) range=(--capture-range=cudaProfilerApi --capture-range-end=stop)
    cmd+=(--profiler-range) ;; esac
  if [ "$trace" = none ]; then
    timeout -k 10 120 "${cmd[@]}" >"$work/overhead-none.log" 2>&1
  else
    timeout -k 10 180 nsys profile --trace="${trace%@range}" "${range[@]}" "${nsys_opts[@]}" \
      -o "$work/overhead-${trace//[,@]/-}" "${cmd[@]}" >"$work/overhead-${trace//[,@]/-}.log" 2>&1
  fi
  echo "  rc=$? --trace=$trace: $(grep '^RESULT' "$work/overhead-${trace//[,@]/-}.log" | tail -1)"
  "$py" -c '
import csv, json, sys
rows = [ln for ln in open(sys.argv[1], errors="replace") if ln.startswith("RESULT ")]
if rows:
    r = json.loads(rows[-1][len("RESULT "):])
    keys = ("us_per_launch", "us_per_item", "us_per_linear", "launches", "items", "rounds",
            "device")
    out = csv.writer(sys.stdout, lineterminator="\n")
    out.writerow([sys.argv[2], *(r[k] for k in keys), sys.argv[3]])
' "$work/overhead-${trace//[,@]/-}.log" "$trace" "$nsys_version" >>"$csv" || true
done
mv "$csv" "$out/trace-overhead.csv"
cat "$out/trace-overhead.csv"
rm -rf "$work"
echo "done: $(ls "$out" | tr '\n' ' ')"
