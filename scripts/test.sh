#!/usr/bin/env bash
# The test command (README and CI): the whole suite on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python -m pytest -q -ra "$@"
