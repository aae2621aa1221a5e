#!/usr/bin/env bash
# The GPU check (docs/gpu.md): one command on a bare machine with a GPU -- no .venv, no apt,
# no network -- whose python3 holds torch (CUDA), numba, scikit-learn, pytest and hypothesis.
#
#   bash scripts/gpu-check.sh            # results in $OUT when set, else a new temp folder
#
# Set-up: the project from this working tree with that python3 and no network (pip's
# editable install without deps or build isolation when setuptools is importable, else a
# generated folder on PYTHONPATH that maps the tree's folders into the gradblock namespace as
# pyproject.toml's package-dir does). Data: scikit-learn's bundled digits and synthetic
# batches only. Every phase has its own timeout; the rows run on the CPU always (gloo, the
# baseline) and on CUDA when torch sees a GPU:
#   0 numba     numba's kernels compiled once (a fresh tree has no cache), before any rank
#   1 codec     the device codec bit for bit against the numpy reference on real gradients
#               (ResNet-50 on CUDA), residuals carried, k 1 and 0.01, L1/L2, momentum
#               correction off/on, the all_gather and allreduce exchanges
#               and the DDP hook's own codec (on CUDA the device codec, eager and as CUDA
#               graphs) on the same gradients
#   2 ddp       the hook under DDP (2 gloo ranks; NCCL at world size 1), DDP vs simulation
#               bit for bit, the shim's own self-check; the simulated-worker path with N = 3
#   3 validate  `gradblock validate` dense vs coarse with momentum correction on digits, on the
#               CPU and on CUDA, tables side by side
#   4 timing    bench/gpu_step.py: ResNet-50 and LeNet-5 steps per DDP hook (tiny on the CPU)
# Exit status: 0 every row passed on a GPU; 3 no GPU here and every CPU row passed; 1 a row
# failed or timed out; 2 the set-up failed.
set -uo pipefail
tree=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python3}
out=${OUT:-}
[ -n "$out" ] || out=$(mktemp -d -t gradblock-gpu-check-XXXXXX)
mkdir -p "$out"
work=$(mktemp -d -t gradblock-gpu-work-XXXXXX)
trap 'rm -rf "$work"' EXIT
log="$out/log.txt"
: >"$log"
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
# every rank is on this machine: gloo on the loopback (a machine without network may have no
# other interface its host name resolves to)
export GLOO_SOCKET_IFNAME=${GLOO_SOCKET_IFNAME:-lo}
T_CODEC=${GPU_CHECK_T_CODEC:-240} T_DDP=${GPU_CHECK_T_DDP:-150} T_VALIDATE=${GPU_CHECK_T_VALIDATE:-150}
T_TIMING=${GPU_CHECK_T_TIMING:-240}   # seconds; GPU_CHECK_T_WARM (300) too

say() { echo "$*" | tee -a "$log"; }

# ---------------------------------------------------------------- set-up (no network)
say "== set-up: $($PY --version 2>&1) at $(command -v "$PY")"
cd "$work"   # imports below must not see the tree as the current folder
mode=${GPU_CHECK_INSTALL:-auto}   # auto | pip | path
installed=$("$PY" -c 'import gradblock.codec, gradblock.shim, os; print(os.path.realpath(gradblock.__path__[0]))' 2>/dev/null)
if [ "$mode" = auto ] && [ "$installed" = "$(realpath "$tree/gradblock")" ]; then
    say "gradblock already installed from this tree"
else
    ok=0
    if [ "$mode" != path ] && "$PY" -c 'import setuptools' 2>/dev/null; then
        if "$PY" -m pip install -q --no-deps --no-build-isolation --no-index -e "$tree" >>"$log" 2>&1 \
            && "$PY" -c 'import gradblock.codec, gradblock.shim' 2>>"$log"; then
            ok=1; say "installed with pip (editable, no deps, no network)"
        else
            say "pip's editable install failed (see log.txt); the tree goes on PYTHONPATH"
        fi
    fi
    if [ $ok = 0 ]; then
        [ "$mode" = pip ] && { say "set-up failed: GPU_CHECK_INSTALL=pip and pip could not install"; exit 2; }
        # pyproject's package-dir map as a folder of links: gradblock/<x> -> the tree's folder
        "$PY" - "$tree" "$work/site" <<'PY' 2>>"$log" || { say "set-up failed: no package map"; exit 2; }
import os, sys, tomllib
tree, site = sys.argv[1], sys.argv[2]
with open(os.path.join(tree, "pyproject.toml"), "rb") as f:
    dirs = tomllib.load(f)["tool"]["setuptools"]["package-dir"]
root = os.path.join(site, "gradblock")
os.makedirs(root)
for name in os.listdir(os.path.join(tree, dirs["gradblock"])):   # the top package, file by file
    if name != "__pycache__":
        os.symlink(os.path.join(tree, dirs["gradblock"], name), os.path.join(root, name))
for pkg, path in sorted(dirs.items()):
    parts = pkg.split(".")
    if len(parts) == 2:                  # gradblock.x; deeper ones live inside their parent
        link = os.path.join(root, parts[1])
        if not os.path.lexists(link):
            os.symlink(os.path.join(tree, path), link)
PY
        export PYTHONPATH="$work/site${PYTHONPATH:+:$PYTHONPATH}"
        "$PY" -c 'import gradblock.codec, gradblock.shim, gradblock.bench' 2>>"$log" \
            || { say "set-up failed: gradblock does not import from $work/site (log.txt)"; exit 2; }
        say "gradblock on PYTHONPATH from a generated package map ($work/site)"
    fi
fi
# progress bars only: a no-op tqdm when the machine has none
if ! "$PY" -c 'import tqdm' 2>/dev/null; then
    mkdir -p "$work/extra"
    cat >"$work/extra/tqdm.py" <<'PY'
"""A no-op stand-in for tqdm (gpu-check.sh: the bare machine has none; bars are off)."""
class tqdm:
    def __init__(self, *a, **k): pass
    def update(self, n=1): pass
    def set_description(self, *a, **k): pass
    def set_postfix(self, *a, **k): pass
    def close(self): pass
    def __enter__(self): return self
    def __exit__(self, *a): return False
PY
    export PYTHONPATH="$work/extra${PYTHONPATH:+:$PYTHONPATH}"
    say "no tqdm on this python: a no-op stand-in is on PYTHONPATH"
fi
# the console script, bound to this python
mkdir -p "$work/bin"
printf '#!/bin/sh\nexec "%s" -c "import sys; from gradblock.cli import main; sys.exit(main())" "$@"\n' \
    "$(command -v "$PY")" >"$work/bin/gradblock"
chmod +x "$work/bin/gradblock"
export PATH="$work/bin:$PATH"
gpu=$("$PY" -c 'import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")' 2>>"$log")
say "torch $("$PY" -c 'import torch; print(torch.__version__)'), GPU: ${gpu:-none}"

# ---------------------------------------------------------------- rows
rows=()          # "phase|device|status|seconds|detail"
failed=0
row() {          # row PHASE DEVICE TIMEOUT COMMAND...: run, keep the RESULT line as detail
    local phase=$1 dev=$2 limit=$3; shift 3
    local t0=$SECONDS st detail rc
    say "== $phase ($dev)"
    # into the log as it runs: a run cut short from outside still leaves what each row printed
    timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$work/row.txt" >>"$log"
    rc=${PIPESTATUS[0]}
    detail=$(grep -a '^RESULT ' "$work/row.txt" | cut -c8- | sed 's/^pass //' | sort -u | paste -sd ';' - | sed 's/;/; /g; s/;  /; /g')
    if [ $rc = 124 ] || [ $rc = 137 ]; then st=TIMEOUT; detail="over ${limit} s"
    elif [ $rc = 0 ]; then st=pass
    else st=FAIL; [ -n "$detail" ] || detail="exit $rc: $(grep -av '^\s*$' "$work/row.txt" | tail -n 1 | cut -c1-120)"
    fi
    detail=${detail#pass }; detail=${detail#FAIL }
    [ $st = pass ] || failed=1
    rows+=("$phase|$dev|$st|$((SECONDS - t0))|$detail")
    say "   $st ($((SECONDS - t0)) s) $detail"
}
nogpu() { rows+=("$1|cuda|no GPU|0|torch sees no CUDA device"); }
port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
trun() { local n=$1; shift; "$PY" -m torch.distributed.run --nnodes 1 --nproc-per-node "$n" \
    --master-addr 127.0.0.1 --master-port "$(port)" "$@"; }
example() {      # example DEVICE N NAME [OPTIONS]: examples/ddp_torchrun.py (gradblock.ddp)
    local dev=$1 n=$2 name=$3; shift 3
    local rc=0
    (if [ "$dev" = cpu ]; then export CUDA_VISIBLE_DEVICES=; fi     # the example picks gloo
     trun "$n" "$tree/examples/ddp_torchrun.py" --steps 5 --report "$work/$name" "$@") \
        >"$work/$name.log" 2>&1 || rc=$?
    cat "$work/$name.log"
    # a rank's abort at teardown after the run (docs/ddp.md, "Known issue") is noted, and the
    # run is judged by its reports
    if [ $rc != 0 ] && ! grep -q "terminate called without an active exception" "$work/$name.log"; then
        return 1
    fi
    "$PY" - "$work/$name" "$n" "$name" "$rc" <<'PY'
import json, sys
from pathlib import Path
files = [Path(sys.argv[1]) / f"rank{r}.json" for r in range(int(sys.argv[2]))]
ranks = [json.loads(f.read_text()) for f in files if f.is_file()]
ok = len(ranks) == len(files) and all(r["bytes_sent"] > 0 for r in ranks) \
    and len({r["params_sha256"] for r in ranks}) == 1
print(f"RESULT {'pass' if ok else 'FAIL'} gradblock.ddp {sys.argv[3]}: bytes "
      f"{[r['bytes_sent'] for r in ranks]}, replicas {'identical' if ok else 'DIFFER'}"
      + ("" if sys.argv[4] == "0" else " (a rank aborted at teardown after the run)"))
sys.exit(0 if ok else 1)
PY
}
ddp_pair() {     # ddp_pair DEVICE N: the hook vs the simulation, the shim's self-check, and
                 # the public API (gradblock.ddp) through the plain-DDP recipe of examples/
    trun "$2" -m gradblock.bench.gpu_check ddp --device "$1" --json "$work/ddp_$1.json" || return 1
    trun "$2" -m gradblock.bench.gpu_check selfcheck --out "$work/selfcheck_$1" --device "$1" \
        --corrupt-rank $(($2 - 1)) || return 1
    example "$1" "$2" "example" || return 1
    if [ "$1" = cuda ]; then example cuda "$2" "example-bf16" --dtype bfloat16 || return 1; fi
}
validate() {     # validate DEVICE: dense vs coarse1 with momentum correction on digits
    gradblock validate --device "$1" --data digits --compressors dense coarse1 \
        --local-momentum 0.9 --momentum 0 --range 100 --norm l2 --epochs 3 --batch-size 8 \
        --seeds 0 1 --workers 4 --threads 1 --no-progress --out "$work/validate_$1" || return 1
    cp "$work/validate_$1/validate.md" "$out/validate_$1.md"
    "$PY" - "$work/validate_$1/validate.json" <<'PY'
import json, sys
rows = {r["name"]: r for r in json.load(open(sys.argv[1]))["rows"]}
print("RESULT pass " + ", ".join(f"{n} {100 * r['acc_mean']:.2f}%" for n, r in rows.items()))
PY
}
export -f trun port example ddp_pair validate
export PY out work tree

cd "$work"
# numba's kernels compiled once here (a fresh tree has no cache: a minute or more), not by
# every rank of phase 2 at once
row "0 numba" cpu "${GPU_CHECK_T_WARM:-300}" "$PY" -m gradblock.bench.gpu_check warm
# 1 codec: on a GPU the CUDA row is the check (ResNet-50); without one the CPU row runs the
# same comparison with the torch ops on CPU tensors (ResNet-20: minutes less than ResNet-50)
# 1 hook: the DDP hook's own codec (on CUDA the device codec) on the same gradients, world 1
if [ -n "$gpu" ]; then
    row "1 codec" cuda "$T_CODEC" "$PY" -m gradblock.bench.gpu_check codec --device cuda \
        --model resnet50 --steps 3 --workers 2 --json "$out/codec_cuda.json"
    row "1 hook" cuda "$T_CODEC" "$PY" -m gradblock.bench.gpu_check hook --device cuda \
        --model resnet50 --steps 3 --graphs both --json "$out/hook_cuda.json"
else
    row "1 codec" cpu "$T_CODEC" "$PY" -m gradblock.bench.gpu_check codec --device cpu \
        --model resnet20 --steps 2 --workers 2 --json "$out/codec_cpu.json"
    nogpu "1 codec"
    # the device codec's own code on CPU tensors: what the GPU runs
    row "1 hook" cpu "$T_CODEC" "$PY" -m gradblock.bench.gpu_check hook --device cpu \
        --model resnet20 --steps 2 --codec device --graphs both --json "$out/hook_cpu.json"
    nogpu "1 hook"
fi
row "2 ddp" cpu "$T_DDP" bash -c 'ddp_pair cpu 2'
if [ -n "$gpu" ]; then
    ngpu=$("$PY" -c 'import torch; print(min(2, torch.cuda.device_count()))')
    row "2 ddp" cuda "$T_DDP" bash -c "ddp_pair cuda $ngpu"      # NCCL between 2 GPUs if there are
    row "2 sim N=3" cuda "$T_DDP" "$PY" -m gradblock.bench.gpu_check sim --device cuda --workers 3
else
    nogpu "2 ddp"
    row "2 sim N=3" cpu "$T_DDP" "$PY" -m gradblock.bench.gpu_check sim --device cpu --workers 3
    nogpu "2 sim N=3"
fi
row "3 validate" cpu "$T_VALIDATE" bash -c 'validate cpu'
if [ -n "$gpu" ]; then
    row "3 validate" cuda "$T_VALIDATE" bash -c 'validate cuda'
    row "4 timing" cuda "$T_TIMING" "$PY" -m gradblock.bench.gpu_step --device cuda \
        --json "$out/timing_cuda.json"
else
    nogpu "3 validate"
    # LeNet-5 only: torch's PowerSGD hook on gloo with several buckets (ResNet-50) hung here
    # once in four runs (issue 32 saw it crash gloo); NCCL is the GPU row's
    row "4 timing" cpu "$T_TIMING" "$PY" -m gradblock.bench.gpu_step --device cpu --tiny \
        --models lenet5 --warmup 1 --steps 2 --json "$out/timing_cpu.json"
    nogpu "4 timing"
fi

# ---------------------------------------------------------------- summary
{
    echo
    echo "gpu-check summary (GPU: ${gpu:-none}; outputs in $out)"
    printf '%-12s %-5s %-8s %6s  %s\n' phase dev status seconds detail
    for r in "${rows[@]}"; do
        IFS='|' read -r ph dv st sec det <<<"$r"
        printf '%-12s %-5s %-8s %6s  %s\n' "$ph" "$dv" "$st" "$sec" "$det"
    done
    for d in cpu cuda; do
        [ -f "$out/validate_$d.md" ] && { echo; echo "validate on $d:"; sed '/^per run:/,$d' "$out/validate_$d.md"; }
    done
    [ -f "$out/timing_cuda.json" ] && "$PY" -c 'import json,sys; print(); print(json.load(open(sys.argv[1]))["table"])' "$out/timing_cuda.json"
} | tee "$out/summary.txt" | tee -a "$log"
if [ $failed = 1 ]; then status=1; elif [ -z "$gpu" ]; then status=3; else status=0; fi
echo "gpu-check: exit $status ($([ $status = 0 ] && echo 'every row passed on the GPU' || { [ $status = 3 ] && echo 'no GPU here; every CPU row passed' || echo 'a row failed'; }))" | tee -a "$out/summary.txt"
exit $status
