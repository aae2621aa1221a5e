#!/usr/bin/env bash
# Median ms per LeNet-5 step, 4 gloo ranks on localhost: DDP allreduce vs the gradblock hook.
#   bash scripts/hook_bench.sh [STEPS] [METHODS...]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
steps=${1:-60}; shift || true
methods=${*:-allreduce coarse dense topk}
for m in $methods; do
  port=$(python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  OMP_NUM_THREADS=1 torchrun --nproc-per-node 4 --master-addr 127.0.0.1 --master-port "$port" \
    scripts/hook_bench.py --method "$m" --steps "$steps" 2>/dev/null | grep '^{'
done
