#!/usr/bin/env bash
# Set up (idempotent) and run the main job on the embedded default: golden vectors from real
# gradients checked against the reference, the RTL on both simulators, a short training validation.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/env.sh
exec gradblock demo "$@"
