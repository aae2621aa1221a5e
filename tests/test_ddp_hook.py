"""The DDP hook under real multi-process torchrun runs (gloo on 127.0.0.1)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the DDP hook needs torch")
import torch.distributed as dist  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.torch]

if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with the gloo backend is not available", allow_module_level=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(args: list[str], nproc: int = 2, timeout: int = 300) -> subprocess.CompletedProcess:
    """`torchrun --nproc-per-node N -m ARGS` on 127.0.0.1 with a free port, from the repo root."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
           "--nproc-per-node", str(nproc), "--master-addr", "127.0.0.1",
           "--master-port", str(free_port()), "-m", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def selfcheck(tmp_path_factory):
    """One 2-process run of shim.ddp_check: every compressor for a few steps, tiny buckets,
    an empty all_gather message, and a frame corrupted by rank 1."""
    out = tmp_path_factory.mktemp("ddp_check")
    proc = torchrun(["gradblock.shim.ddp_check", "--out", str(out), "--corrupt-rank", "1"])
    reports = {}
    for r in range(2):
        path = out / f"rank{r}.json"
        if not path.exists():
            pytest.fail(f"rank {r} wrote no report; torchrun said:\n{proc.stdout}\n{proc.stderr}")
        reports[r] = json.loads(path.read_text())
    for r, rep in reports.items():
        assert "error" not in rep, f"rank {r} failed:\n{rep['error']}"
    return proc, reports


@pytest.mark.parametrize("name", ["dense", "topk", "dlgs", "coarse"])
def test_hook_matches_simulation_on_every_rank(selfcheck, name):
    _, reports = selfcheck
    for r, rep in reports.items():
        assert rep["compressors"][name] == {"equal_to_simulation": True,
                                            "equal_on_all_ranks": True}, (r, rep)


def test_empty_message_does_not_hang_all_gather(selfcheck):
    _, reports = selfcheck
    assert all(rep["varlen_with_empty_message"] for rep in reports.values())


def test_corrupt_peer_frame_raises_on_every_rank_naming_rank_and_layer(selfcheck):
    proc, reports = selfcheck
    for rep in reports.values():
        c = rep["corruption"]
        assert c["raised"] == "CrcMismatchError", c
        assert "CRC_MISMATCH" in c["message"] and "peer rank 1, layer" in c["message"]
        assert "'fc2.bias'" in c["message"]        # the last layer of the only bucket
    assert proc.returncode == 0, proc.stderr


def test_ddp_flag_outside_torchrun_is_a_clear_error(monkeypatch):
    from gradblock.shim.train import train_main
    for var in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(SystemExit, match="--ddp needs torchrun"):
        train_main(["--ddp", "--data", "digits", "--no-progress"])


@pytest.mark.slow
def test_train_ddp_equals_simulation_and_resumes(tmp_path):
    """`gradblock train --ddp` under torchrun: both ranks end with the parameters of the
    single-process simulation; a DDP run stopped and resumed from per-rank checkpoints ends
    with the same bits too. 22 steps per epoch: the stop (17) is before the epoch boundary,
    the end (30) after it."""
    from gradblock.shim.train import TrainConfig, run_training

    common = ["--data", "digits", "--compressor", "coarse", "--k", "2", "--epochs", "2",
              "--batch-size", "32", "--threads", "1", "--no-progress", "--max-steps", "30"]
    full = torchrun(["gradblock.cli", "train", "--ddp", *common, "--out", str(tmp_path / "full")])
    assert full.returncode == 0, full.stderr
    ckpt = tmp_path / "ck.pt"
    part = torchrun(["gradblock.cli", "train", "--ddp", *common[:-1], "17", "--checkpoint",
                     str(ckpt)])
    assert part.returncode == 0, part.stderr
    assert (tmp_path / "ck.rank0.pt").exists() and (tmp_path / "ck.rank1.pt").exists()
    rest = torchrun(["gradblock.cli", "train", "--ddp", *common, "--resume", str(ckpt),
                     "--out", str(tmp_path / "resumed")])
    assert rest.returncode == 0, rest.stderr

    sim = run_training(TrainConfig(data="digits", compressor="coarse", k=2, epochs=2, batch_size=32,
                                   workers=2, threads=1, max_steps=30, progress=False,
                                   out=str(tmp_path / "sim")))
    assert sim["steps"] == 30
    sim_params = torch.load(tmp_path / "sim" / "model.pt", weights_only=True)
    for run in ("full", "resumed"):
        for r in (0, 1):
            state = torch.load(tmp_path / run / f"model.rank{r}.pt", weights_only=True)
            for k, v in sim_params.items():
                assert torch.equal(state[k], v), (run, r, k)
    a = json.loads((tmp_path / "full" / "result.json").read_text())
    b = json.loads((tmp_path / "resumed" / "result.json").read_text())
    assert a["curves"] == b["curves"] and a["bytes_sent"] == b["bytes_sent"]
    assert a["final_test_acc"] == b["final_test_acc"] == sim["final_test_acc"]
