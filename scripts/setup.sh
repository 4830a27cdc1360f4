#!/usr/bin/env bash
# Fresh machine -> .venv with the project and its dev, DALI and slurm extras (slurm: Hydra's
# submitit launcher, three small pure-Python wheels), plus nsys where it can, and Debian's
# chromium for the report's browser test (Playwright drives it; it never downloads a browser).
# - No NVIDIA GPU: torch is pinned to 2.13.0 first (on these machines a small CPU wheel; an
#   unpinned torch pulls a multi-GB CUDA build) and Debian's nsys 2022.4 is installed.
# - NVIDIA GPU: the venv sees the system's site-packages, so an existing CUDA torch and nsys
#   (e.g. an NVIDIA PyTorch container) are used as they are.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  [ -d .venv ] || "$PY" -m venv --system-site-packages .venv
  .venv/bin/python -c "import torch" 2>/dev/null || .venv/bin/python -m pip install -q torch
else
  [ -d .venv ] || "$PY" -m venv .venv
  .venv/bin/python -m pip install -q "torch==2.13.0"
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    bash scripts/install-nsys-cpu.sh
  else
    echo "not root or no apt-get: nsys not installed (runs go unprofiled; nsys tests skip)" >&2
  fi
fi
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "not root or no apt-get: chromium not installed (the report's browser test skips)" >&2
  fi
fi
.venv/bin/python -m pip install -q -e '.[dev,dali,slurm]'
# The tools extra (harness/tools: HTA, nsys-ai) without the packages HTA declares for its
# notebooks (jupyterlab pulls ~90): the two wheels and what they import, ~20 s on a CPU machine
# with a cold pip cache (6 s warm), 160 MB, most of it duckdb's wheel.
TOOLS_RUNTIME="plotly narwhals pydot psutil duckdb rich markdown-it-py mdurl"
.venv/bin/python -m pip install -q --no-deps holistictraceanalysis==0.5.0 nsys-ai==0.3.0 $TOOLS_RUNTIME
