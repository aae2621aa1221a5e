"""scripts/gpu-check.sh and its Python phases (bench/gpu_check.py, bench/gpu_step.py), on the
CPU: the codec comparison finds a planted difference, the timing module runs its tiny
configuration, and the whole script's CPU rows pass with exit status 3 ("no GPU here, every
CPU phase passed") and one summary table (slow)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the GPU check's phases need torch")

from gradblock.bench import gpu_check  # noqa: E402

from own_process import run_in_own_process  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FEW = [("allgather", 1, "l2", 0.9), ("allreduce", 0.1, "l1", 0.0)]


def test_codec_check_passes_on_the_cpu_torch_path():
    rep = gpu_check.check_codec(torch.device("cpu"), "lenet5", 2, 2, 4, configs=FEW, jobs=0,
                                log=lambda *a, **k: None)
    assert rep["ok"], rep
    assert [c["ok"] for c in rep["configs"]] == [True, True]
    assert all(c["compared"] > 0 for c in rep["configs"])


def test_codec_check_names_a_planted_difference(monkeypatch):
    real = gpu_check._reference_allgather

    def off_by_one(grads_np, res, vel, layers, cfg):
        msgs, avg = real(grads_np, res, vel, layers, cfg)
        res[1][2] = res[1][2].copy()
        res[1][2].reshape(-1)[0] ^= 1          # one residual bit of worker 1, layer 2
        return msgs, avg

    monkeypatch.setattr(gpu_check, "_reference_allgather", off_by_one)
    rep = gpu_check.check_codec(torch.device("cpu"), "lenet5", 2, 2, 4, configs=FEW[:1],
                                jobs=0, log=lambda *a, **k: None)
    assert not rep["ok"]
    assert rep["configs"][0]["mismatch"].startswith("step 0 residual worker 1 layer 2 ")


def case_hook_check_passes_and_names_a_planted_difference():
    """The DDP hook's device codec on CPU tensors against the reference at world size 1; a
    planted one-bit difference in the reference's residual is found and named."""
    rep = gpu_check.check_hook(torch.device("cpu"), "lenet5", 2, 4, "device", configs=FEW,
                               jobs=0, log=lambda *a, **k: None, graphs="both")
    assert rep["ok"] and all(c["compared"] > 0 for c in rep["configs"]), rep
    assert len(rep["configs"]) == 2 * len(FEW)         # eager and the CUDA graphs' plumbing
    real = gpu_check._reference_allgather

    def off_by_one(grads_np, res, vel, layers, cfg):
        msgs, avg = real(grads_np, res, vel, layers, cfg)
        res[0][3] = res[0][3].copy()
        res[0][3].reshape(-1)[-1] ^= 1
        return msgs, avg

    gpu_check._reference_allgather = off_by_one
    rep = gpu_check.check_hook(torch.device("cpu"), "lenet5", 2, 4, "device", configs=FEW[:1],
                               jobs=0, log=lambda *a, **k: None)
    assert not rep["ok"]
    assert rep["configs"][0]["mismatch"].startswith("step 0 residual worker 0 layer 3 "), rep


def test_hook_check_passes_and_names_a_planted_difference():
    run_in_own_process("test_gpu_check", "case_hook_check_passes_and_names_a_planted_difference")


def test_digest_sees_dtype_shape_and_bits():
    a = np.arange(6, dtype=np.float32)
    assert gpu_check._digest(a) == gpu_check._digest(torch.arange(6, dtype=torch.float32))
    assert gpu_check._digest(a) != gpu_check._digest(a.reshape(2, 3).reshape(-1)[::-1].copy())
    assert gpu_check._digest(np.zeros(1, np.float32)) != gpu_check._digest(
        np.array([-0.0], np.float32))


def case_gpu_step_tiny(out: str):
    from gradblock.bench import gpu_step
    assert gpu_step.main(["--device", "cpu", "--tiny", "--models", "lenet5", "--warmup", "0",
                          "--steps", "2", "--json", out]) == 0


def test_gpu_step_tiny_runs_every_method_on_the_cpu(tmp_path):
    out = tmp_path / "timing.json"
    run_in_own_process("test_gpu_check", "case_gpu_step_tiny", str(out))
    rep = json.loads(out.read_text())
    from gradblock.bench.gpu_step import GRADBLOCK, METHODS
    assert [r["method"] for r in rep["rows"]] == list(METHODS)
    for r in rep["rows"]:
        assert r["median_ms"] > 0 and r["steps"] == 2 and r["aten_ops"] > 0
        assert r["overhead_pct"] is not None
    assert all(r["bytes_sent"] > 0 for r in rep["rows"] if r["method"] in GRADBLOCK)
    assert "| lenet5 | coarse1 |" in rep["table"]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("timeout") is None, reason="the script needs coreutils' timeout")
def test_script_cpu_rows_pass_with_exit_status_3(tmp_path):
    """The whole script in the project's venv (already installed: no pip run), without CUDA."""
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the script's exit status is 0 there, not 3")
    out = tmp_path / "out"
    env = dict(os.environ, OUT=str(out), PYTHON=shutil.which("python") or "python3")
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu-check.sh")], env=env,
                          capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 3, proc.stdout[-4000:] + proc.stderr[-2000:]
    summary = (out / "summary.txt").read_text()
    for phase in ("0 numba", "1 codec", "1 hook", "2 ddp", "2 sim N=3", "3 validate", "4 timing"):
        assert any(line.startswith(phase) and " cpu " in line and " pass " in line
                   for line in summary.splitlines()), (phase, summary)
    for phase in ("1 codec", "1 hook", "2 ddp", "3 validate", "4 timing"):
        assert any(line.startswith(phase) and "no GPU" in line
                   for line in summary.splitlines()), (phase, summary)
    assert "exit 3 (no GPU here; every CPU row passed)" in summary
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 8 and {"summary.txt", "log.txt", "codec_cpu.json", "hook_cpu.json"} <= set(files)
