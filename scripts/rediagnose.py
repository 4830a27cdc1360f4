"""``python scripts/rediagnose.py RUN_DIR [--expert-rules] [--tools]``: the same command as
``harness rediagnose`` (:mod:`harness.rediagnose`), kept for the scripts and checks
that call it by its path."""

from __future__ import annotations

import sys

from harness.rediagnose import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
