#!/usr/bin/env bash
# Size ddp_bucketing on a 2-GPU machine (2 x H200, NVLink), from the checkout root, after
# `source .gpu-stage/bin/env.sh`:
#   bash scripts/device/ddp-sizing.sh                 # the plan below, about 3-4 minutes
#   bash scripts/device/ddp-sizing.sh PLAN_FILE       # lines "LABEL DEPTH WIDTH BATCH [VARIANTS]"
#
# One unprofiled harness run per model size (harness.repeats=1, 5 warm-up + 20 measured steps),
# with tuned_buckets sweeping its bucket size in setup (scenario.ddp_bucketing.full.sweep_mb: each
# candidate timed for sweep_steps steps, the fastest used for the measured window). Prints one table
# row per model size: step times of every variant, speedups, tuned_buckets' share of ideal, the
# measured all-reduce (one flat all-reduce of the whole gradient, bus bandwidth), the baseline's
# comm phase, and the time per step of each candidate bucket size. Pick the full size where
# baseline/tuned_buckets >= 1.3 and tuned_buckets is within 10% of ideal, and set
# DdpSize.bucket_cap_mb to the fastest bucket size. Tables (no reports) are packed into
# $OUT/ddp-sizing-tables.tar.xz after every run, so whatever finished comes back.
set -uo pipefail
BUCKETS=${BUCKETS:-"[1,5,25,100,400]"}
STEPS=${STEPS:-20}
results=${RESULTS:-/var/tmp/results/ddp-sizing}
mkdir -p "$results"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
nvidia-smi topo -m 2>/dev/null | head -4

plan=$(mktemp)
if [ $# -ge 1 ]; then
  cp "$1" "$plan"
else
  cat > "$plan" <<'EOF'
# label          depth width batch  variants (default: baseline,tuned_buckets,ideal)
d48w1024b4096    48    1024  4096   baseline,ddp_default,tuned_buckets,ideal
d48w1024b2048    48    1024  2048
d96w512b8192     96    512   8192
d24w2048b2048    24    2048  2048
EOF
fi

start=$(date +%s)
while read -r label depth width batch variants; do
  [ -z "$label" ] || [ "${label:0:1}" = "#" ] && continue
  variants=${variants:-baseline,tuned_buckets,ideal}
  echo "=== $label: depth=$depth width=$width batch=$batch variants=$variants ($(( $(date +%s) - start )) s)"
  timeout 300 python3 -m harness run +scenario=ddp_bucketing size=full harness.repeats=1 \
    nsys.enabled=false harness.progress=false harness.results_dir="$results/$label" \
    "scenario.ddp_bucketing.variants=[$variants]" \
    scenario.ddp_bucketing.full.depth="$depth" scenario.ddp_bucketing.full.width="$width" \
    scenario.ddp_bucketing.full.batch="$batch" scenario.ddp_bucketing.full.warmup_steps=5 \
    scenario.ddp_bucketing.full.steps="$STEPS" "scenario.ddp_bucketing.full.sweep_mb=$BUCKETS" \
    2>&1 | grep -v '^\s*$' | tail -8
  [ -n "${OUT:-}" ] && tar -C "$results" -cJf "$OUT/ddp-sizing-tables.tar.xz" \
    --exclude='*.nsys-rep' --exclude='*.sqlite' --exclude='*.qdstrm' .
done < "$plan"
rm -f "$plan"
echo "wall: $(( $(date +%s) - start )) s"

python3 - "$results" <<'EOF'
"""One row per model size from the runs' runs.csv and result.json files."""
import json
import os
import sys
from pathlib import Path

import pandas as pd

rows = []
for runs_csv in sorted(Path(sys.argv[1]).glob("*/*/runs.csv")):
    run = runs_csv.parent
    runs = pd.read_csv(runs_csv).set_index("variant")
    cfg = json.loads((run / "manifest.json").read_text())["config"]["scenario"]["ddp_bucketing"]
    full = cfg["full"]
    row = {"label": run.parent.name, "depth": full["depth"], "width": full["width"],
           "batch": full["batch"]}
    metrics = {}
    for v in runs.index:
        res = run / "ddp_bucketing" / v / "timing-1" / "result.json"
        metrics[v] = json.loads(res.read_text())["metrics"] if res.is_file() else {}
        row[f"{v}_ms"] = runs.loc[v, "step_ms_mean"]
        if v != "baseline":
            row[f"{v}_x"] = runs.loc[v, "speedup"]
            row[f"{v}_ci_lo"] = runs.loc[v, "speedup_ci_low"]
    if "tuned_buckets" in runs.index:
        row["tuned_of_ideal"] = runs.loc["tuned_buckets", "share_of_ideal"]
    base = metrics.get("baseline", {})
    tuned = metrics.get("tuned_buckets", {})
    row["tensors"] = base.get("param_tensors")
    row["grad_mb"] = base.get("grad_mb")
    row["flat_allreduce_ms"] = base.get("grad_allreduce_ms")
    row["busbw_gbps"] = base.get("allreduce_busbw_gbps")
    row["base_comm_ms"] = base.get("comm_ms_per_step")
    row["bucket_mb"] = tuned.get("bucket_cap_mb")
    row["buckets"] = tuned.get("buckets")
    for key in sorted((k for k in tuned if k.startswith("sweep_")), key=lambda k: float(k[6:-5])):
        row[key.removeprefix("sweep_").removesuffix("_ms")] = tuned[key]
    rows.append(row)
table = pd.DataFrame(rows)
first = ["label", "depth", "width", "batch", "tensors", "grad_mb"]
first += [f"{v}_ms" for v in ("baseline", "ddp_default", "tuned_buckets", "ideal")]
first += ["ddp_default_x", "tuned_buckets_x", "tuned_buckets_ci_lo", "ideal_x", "tuned_of_ideal"]
first += ["flat_allreduce_ms", "busbw_gbps", "base_comm_ms", "bucket_mb", "buckets"]
first = [c for c in first if c in table.columns]
table = table[first + [c for c in table.columns if c not in first and not c.endswith("_ci_lo")]]
with pd.option_context("display.width", 250, "display.max_columns", 60):
    print(table.to_string(index=False, float_format=lambda x: f"{x:.3g}"))
if os.environ.get("OUT"):
    table.to_csv(Path(os.environ["OUT"]) / "ddp-sizing.csv", index=False)
EOF
