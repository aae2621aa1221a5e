#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite. Extra arguments go to pytest, e.g.
#   bash scripts/test.sh -m "not slow"     # the quick subset
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/env.sh
# loadfile keeps each test file (and so each RTL build directory) on one worker. A crashed
# worker ends the run at once: xdist 3.8 replacing it under loadfile can deadlock the end of
# the run (pytest-xdist #784, #1378), which CI would see as a timeout instead of the crash.
exec python -m pytest -n "${GRADBLOCK_JOBS:-2}" --dist loadfile --max-worker-restart=0 "$@"
