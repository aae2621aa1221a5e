#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite. Extra arguments go to pytest, e.g.
#   bash scripts/test.sh -m "not slow"     # the quick subset
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/env.sh
# loadfile keeps each test file (and so each RTL build directory) on one worker
exec python -m pytest -n "${GRADBLOCK_JOBS:-2}" --dist loadfile "$@"
