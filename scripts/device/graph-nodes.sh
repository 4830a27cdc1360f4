#!/usr/bin/env bash
# On the GPU machine, from the checkout root:
#   source .gpu-stage/bin/env.sh && OUT=$OUT bash scripts/device/graph-nodes.sh SCRIPT...
# Profiles each wild-corpus script's `--fix graphs` run (FIX=NAME: `--fix NAME`) with CUDA
# graphs traced per node (nsys --cuda-graph-trace=node), so that the replay's kernels and the
# GPU's time between them can be set beside the baseline's kernels: what a launch-bound
# prediction (the same kernels replayed from one graph) assumes. Prints, per script, the
# replays' span, their kernels' summed time and count (medians over the replays), and keeps the
# xz'd exports under $OUT.
set -u
out=${OUT:-/var/tmp/graph-nodes}
mkdir -p "$out"
for name in "$@"; do
  timeout 120 nsys profile --trace=cuda,nvtx --cuda-graph-trace=node --sample=none \
    --cpuctxsw=none --force-overwrite=true -o "$out/$name" \
    python3 "corpus/wild/$name.py" --fix "${FIX:-graphs}" >"$out/$name.log" 2>&1
  nsys export --type sqlite --force-overwrite=true -o "$out/$name.sqlite" "$out/$name.nsys-rep" \
    >>"$out/$name.log" 2>&1
  rm -f "$out/$name.nsys-rep"
  python3 - "$out/$name.sqlite" "$name" <<'PY'
import sqlite3, statistics, sys
db = sqlite3.connect(sys.argv[1])
rows = db.execute(
    "SELECT correlationId, start, end FROM CUPTI_ACTIVITY_KIND_KERNEL "
    "WHERE graphNodeId IS NOT NULL ORDER BY start").fetchall()
by = {}
for corr, s, e in rows:
    by.setdefault(corr, []).append((s, e))
reps = [v for v in by.values() if len(v) > 1]
print(f"{sys.argv[2]}: {len(rows)} graph kernels, {sum(e - s for _, s, e in rows) / 1e3:.0f} us")
if not reps:
    sys.exit(0)
n = [len(v) for v in reps]
span = [(max(e for _, e in v) - min(s for s, _ in v)) / 1e3 for v in reps]
busy = [sum(e - s for s, e in v) / 1e3 for v in reps]
print(f"{sys.argv[2]}: {len(reps)} replays; kernels {statistics.median(n)}; span_us "
      f"{statistics.median(span):.1f}; kernel_sum_us {statistics.median(busy):.1f}; "
      f"gap_per_kernel_us {(statistics.median(span) - statistics.median(busy)) / statistics.median(n):.3f}")
PY
  grep '^RESULT' "$out/$name.log" | tail -1
  xz -T0 -f "$out/$name.sqlite"
done
