#!/usr/bin/env bash
# The test command (README and CI): the whole suite on the CPU, on TEST_WORKERS (default 3)
# pytest-xdist workers (3 on a 2-core box: the end-to-end tests wait on their child processes
# and nsys for about a quarter of their time, which a third worker fills); a module's tests
# stay together (tests/conftest.py), so each harness run a module needs is made once, and the files are handed out in collection order, the slow ones
# first (tests/conftest.py: SLOW_FIRST; xdist's own order, by number of tests, left the long
# end-to-end files with few tests for last). TEST_WORKERS=0 runs everything in this process.
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python -m pytest -q -ra -n "${TEST_WORKERS:-3}" --dist loadscope --no-loadscope-reorder "$@"
