#!/usr/bin/env bash
# The CUDA checks, for a machine with a GPU (docs/network.md, "The all_gather path"):
#   1. every CUDA test with GRADBLOCK_REQUIRE_CUDA=1 (a CUDA test that skips fails instead);
#   2. the DDP self-check on NCCL: every compressor through the hook vs the simulation on the
#      same device, bit for bit, and a corrupted frame named (python -m gradblock.shim.exchange.ddp_check);
#   3. one short validation on the GPU (gradblock validate --device cuda --quick);
#   4. one netbench figure on the GPU when `gradblock netbench` takes --device.
# Outputs under $GPU_CHECK_OUT (default: a new temporary directory). Exit status: the first failure's.
#   bash scripts/gpu-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
python - <<'PY' || exit 2
import sys, torch
if not torch.cuda.is_available():
    sys.exit("gpu-check: torch sees no CUDA device; nothing to check here")
print(f"gpu-check: {torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
PY
out=${GPU_CHECK_OUT:-$(mktemp -d -t gradblock-gpu-check-XXXXXX)}
mkdir -p "$out"
export GRADBLOCK_REQUIRE_CUDA=1 OMP_NUM_THREADS=1
echo "== 1. CUDA tests (GRADBLOCK_REQUIRE_CUDA=1)"
python -m pytest tests -q -p no:cacheprovider -k "cuda or gpu" -x 2>&1 | tee "$out/pytest.txt"
echo "== 2. DDP self-check on NCCL"
ngpu=$(python -c 'import torch; print(min(2, torch.cuda.device_count()))')
port=$(python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
python -m torch.distributed.run --nnodes 1 --nproc-per-node "$ngpu" --master-addr 127.0.0.1 \
  --master-port "$port" -m gradblock.shim.exchange.ddp_check --out "$out/ddp_check" --device cuda \
  --corrupt-rank $((ngpu - 1))
python - "$out/ddp_check" "$ngpu" <<'PY'
import json, sys
from pathlib import Path
for r in range(int(sys.argv[2])):
    rep = json.loads((Path(sys.argv[1]) / f"rank{r}.json").read_text())
    print(f"rank {r}: ok={rep['ok']} {rep['compressors']}")
    if not rep["ok"]:
        sys.exit(f"ddp_check on CUDA failed on rank {r}: {rep.get('error', rep)}")
PY
echo "== 3. one validation on the GPU"
gradblock validate --device cuda --quick --no-progress --out "$out/validate" 2>&1 | tail -n 20
echo "== 4. netbench on the GPU"
if gradblock netbench --help 2>/dev/null | grep -q -- "--device"; then
  gradblock netbench --device cuda --methods allreduce coarse1 --rates unshaped --workers 2 \
    --quick --json "$out/netbench.json" --no-progress
else
  echo "gradblock netbench has no --device option: its ranks run on the CPU; no GPU figure"
fi
echo "gpu-check: all passed; outputs in $out"
