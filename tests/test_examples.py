"""Every recipe under examples/ (docs/ddp.md) runs 2 gloo ranks for a few steps under torchrun:
the hook really ran on every rank (bytes counted) and the replicas end identical. A recipe
whose framework is not installed is skipped, saying which extra installs it."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the examples need torch")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

# example -> the module it needs beyond torch, and the extra that installs it
CASES = {"ddp_torchrun.py": None,
         "lightning_ddp.py": ("lightning", "gradblock[lightning]"),
         "accelerate_ddp.py": ("accelerate", "gradblock[accelerate]"),
         # transformers is ~140 MB installed: its own extra, not the test extra
         "hf_trainer.py": ("transformers", "gradblock[hf]")}


@pytest.mark.slow
@pytest.mark.parametrize("example, options", [(e, ()) for e in sorted(CASES)] + [
    ("ddp_torchrun.py", ("--dtype", "bfloat16")), ("ddp_torchrun.py", ("--dtype", "float16"))])
def test_example_runs_two_gloo_ranks_with_identical_replicas(example, options, tmp_path):
    """bf16 / fp16 parameters too (issue 32 item 3): the codec widens their gradients."""
    need = CASES[example]
    if need and importlib.util.find_spec(need[0]) is None:
        pytest.skip(f"{need[0]} is not installed (pip install \"{need[1]}\")")
    report = tmp_path / "report"
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="",
               GLOO_SOCKET_IFNAME=os.environ.get("GLOO_SOCKET_IFNAME", "lo"))
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         str(EXAMPLES / example), "--steps", "4", "--report", str(report), *options]
        + (["--out", str(tmp_path / "hf_out")] if example == "hf_trainer.py" else []),
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    ranks = [json.loads((report / f"rank{r}.json").read_text()) for r in range(2)
             if (report / f"rank{r}.json").is_file()]
    teardown_abort = (proc.returncode != 0 and len(ranks) == 2
                      and "terminate called without an active exception" in proc.stderr)
    assert proc.returncode == 0 or teardown_abort, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert all(r["steps"] >= 4 for r in ranks)
    assert all(r["bytes_sent"] > 0 for r in ranks), ranks            # the hook ran
    assert ranks[0]["params_sha256"] == ranks[1]["params_sha256"]   # identical replicas
    if teardown_abort:
        # seen about once in 20-30 runs on a loaded 2-core host, after both ranks finished and
        # wrote their reports, with the hook and not (0 in 10) without it: gloo's threads at
        # the end of the process; not root-caused (docs/ddp.md), shown here, not hidden
        pytest.xfail("a rank aborted at teardown (SIGABRT, 'terminate called without an "
                     "active exception') after the run was checked")
