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

from own_process import one_rank_gloo_group, run_in_own_process  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.torch]

if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with the gloo backend is not available", allow_module_level=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def simulated_run(args: list[str], out, workers: int = 2) -> dict:
    """`gradblock train ARGS` as the single-process simulation with `workers` workers, built from
    the DDP run's own command line: the options it leaves unset take the parser's values (the
    recipe's, shim/setup/recipe.py) exactly as under torchrun."""
    from gradblock.shim.training.arguments import build_parser, config_from_args
    from gradblock.shim.training.trainer import run_training
    return run_training(config_from_args(build_parser().parse_args(
        [*args, "--workers", str(workers), "--out", str(out)])))


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
    """One 2-process run of shim.exchange.ddp_check: every compressor for a few steps, tiny buckets,
    an empty all_gather message, and a frame corrupted by rank 1."""
    out = tmp_path_factory.mktemp("ddp_check")
    proc = torchrun(["gradblock.shim.exchange.ddp_check", "--out", str(out), "--corrupt-rank", "1"])
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


def test_ddp_flag_outside_torchrun_is_a_clear_error(monkeypatch, capsys):
    from gradblock import cli
    for var in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    assert cli.main(["train", "--ddp", "--data", "digits", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gradblock train: ConfigError: --ddp needs torchrun")
    assert len(err.strip().splitlines()) == 1


# ------------------------------------------------------------------------------ in one process
# A one-rank gloo group: the hook's future chain, its error path, timing and state_dict,
# without starting torchrun. Each case runs in its own interpreter (tests/own_process.py):
# gloo's threads must not outlive it inside the pytest worker.

IN_ONE_PROCESS = ["future_decodes", "times_itself_only_when_asked", "state_dict_resumes",
                  "decode_error_keeps_its_class", "drain_waits_for_the_steps_work"]


@pytest.mark.parametrize("case", IN_ONE_PROCESS)
def test_hook_in_a_one_rank_group(case):
    run_in_own_process("test_ddp_hook", f"case_{case}")


def _hooked(name="coarse", seed=0, **kw):
    from gradblock.shim.compress.compressors import build_compressor, layers_of
    from gradblock.shim.exchange.ddp_check import make_model
    from gradblock.shim.exchange.hook import register
    model = make_model("cpu")
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.001)
    state = register(ddp, build_compressor(name, layers_of(model), 1, k=2), **kw)
    return model, ddp, state


def _batch(seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(8, 1, 8, 8, generator=g), torch.randint(0, 10, (8,), generator=g)


def _train(model, ddp, state, seeds):
    import torch.nn.functional as F
    from gradblock.shim.exchange.optim import GlobalMomentumSGD
    opt = GlobalMomentumSGD(model.parameters(), lr=0.1, momentum=0.9)
    grads = []
    for s in seeds:
        x, y = _batch(s)
        opt.zero_grad(set_to_none=True)
        state.reset_step()
        state.backward(F.cross_entropy(ddp(x), y))
        grads.append([p.grad.clone() for p in model.parameters()])
        opt.step()
    return grads


def case_future_decodes():
    """The hook hands DDP a Future chained on the all_gather, whose value is the bucket's
    averaged gradient; training through it gives the bits of the registered hook."""
    with one_rank_gloo_group():
        from gradblock.shim.compress.compressors import build_compressor, layers_of
        from gradblock.shim.exchange.ddp_check import make_model
        from gradblock.shim.exchange.hook import GradblockHookState, gradblock_hook
        model, ddp, state = _hooked()
        _train(model, ddp, state, [1, 2])          # step 2 runs on DDP's rebuilt (tiny) buckets
        spied = make_model("cpu")
        spied_ddp = torch.nn.parallel.DistributedDataParallel(spied, bucket_cap_mb=0.001)
        spied_state = GradblockHookState(build_compressor("coarse", layers_of(spied), 1, k=2),
                                         spied_ddp, spied_ddp.process_group)
        futures = []

        def spy(st, bucket):
            fut = gradblock_hook(st, bucket)
            futures.append((fut, bucket.buffer()))
            return fut

        # DDP checks real annotations (this module's are strings: __future__ annotations)
        spy.__annotations__ = dict(gradblock_hook.__annotations__)

        spied_ddp.register_comm_hook(spied_state, spy)
        _train(spied, spied_ddp, spied_state, [1, 2])
        assert len(futures) > 2                               # tiny buckets: several per step
        for fut, buffer in futures:
            assert callable(getattr(fut, "then", None)) and fut.done()     # a torch future
            assert fut.value() is buffer or torch.equal(fut.value(), buffer)
        for a, b in zip(model.parameters(), spied.parameters()):
            assert torch.equal(a, b)


def case_times_itself_only_when_asked():
    with one_rank_gloo_group():
        model, ddp, state = _hooked()
        _train(model, ddp, state, [1])
        assert state.times.compress_s >= 0 and state.times.exchange_s == 0.0
        model, ddp, state = _hooked(timed=True)
        _train(model, ddp, state, [1])
        assert state.times.exchange_s > 0.0
        assert state.stats.bytes_sent > 0 and state.padded_bytes >= state.stats.bytes_sent


def case_state_dict_resumes():
    """PowerSGD's pattern: state_dict() after two steps, load_state_dict() into a fresh hook on
    a copy of the model; the next step's gradients are the same bits as the original's."""
    with one_rank_gloo_group():
        from gradblock.shim.exchange.state import CheckpointError
        model, ddp, state = _hooked()
        _train(model, ddp, state, [1, 2])
        saved = state.state_dict()
        assert saved["workers"][0]["steps"] and saved["config"] == state.compressor.config()
        model2, ddp2, state2 = _hooked()
        model2.load_state_dict(model.state_dict())
        state2.load_state_dict(saved)
        a = _train(model, ddp, state, [3])
        b = _train(model2, ddp2, state2, [3])
        for ga, gb in zip(a[0], b[0]):
            assert torch.equal(ga, gb)
        fresh_model, fresh_ddp, fresh = _hooked()
        fresh_model.load_state_dict(model.state_dict())
        c = _train(fresh_model, fresh_ddp, fresh, [3])          # without the residuals: differs
        assert any(not torch.equal(ga, gc) for ga, gc in zip(a[0], c[0]))
        _, _, other = _hooked("topk")
        with pytest.raises(CheckpointError, match="differs"):
            other.load_state_dict(saved)
        broken = {**saved, "workers": {0: {"layers": {}, "steps": saved["workers"][0]["steps"]}}}
        with pytest.raises(CheckpointError, match="no state for layer"):
            state2.load_state_dict(broken)


def flip_last_crc(message, layers, sender):
    """An outgoing filter (the hook's `outgoing_filter`) that corrupts the last frame's CRC."""
    out = message.clone()
    out[-1] ^= 1
    return out


def case_decode_error_keeps_its_class():
    """DDP reports a callback's exception as RuntimeError; backward() re-raises the original."""
    with one_rank_gloo_group():
        from gradblock.codec import errors as E
        model, ddp, state = _hooked(outgoing_filter=flip_last_crc)
        with pytest.raises(E.CrcMismatchError, match="peer rank 0, layer"):
            _train(model, ddp, state, [1])


def case_drain_waits_for_the_steps_work():
    """drain() returns once every tracked future is done (a future finished late by another
    thread, as gloo's do), and gives up after its timeout on one that never finishes."""
    import threading
    import time
    with one_rank_gloo_group():
        _, _, state = _hooked()
        late = torch.futures.Future()
        state.track(late)
        threading.Timer(0.3, lambda: late.set_result(1)).start()
        t0 = time.monotonic()
        assert state.drain() and late.done() and time.monotonic() - t0 >= 0.25
        never = torch.futures.Future()
        state.track(never)
        t0 = time.monotonic()
        assert not state.drain(timeout_s=0.2) and 0.15 <= time.monotonic() - t0 < 5
        assert state.drain(timeout_s=0)            # the list went with the first drain
        never.set_result(0)


@pytest.mark.slow
def test_train_ddp_equals_simulation_and_resumes(tmp_path):
    """`gradblock train --ddp` under torchrun: both ranks end with the parameters of the
    single-process simulation; a DDP run stopped and resumed from per-rank checkpoints ends
    with the same bits too. 22 steps per epoch: the stop (17) is before the epoch boundary,
    the end (30) after it."""
    common = ["--data", "digits", "--compressor", "coarse", "--k", "2", "--epochs", "2",
              "--device", "cpu",              # a GPU machine's "auto" would pick CUDA
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

    sim = simulated_run(common, tmp_path / "sim")
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


@pytest.mark.slow
def test_ddp_resume_refused_on_one_rank_stops_every_rank(tmp_path):
    """Rank 1's checkpoint is missing: rank 1 names it, rank 0 is told, both exit 2 (none
    hangs in the next collective)."""
    common = ["gradblock.cli", "train", "--ddp", "--data", "digits", "--epochs", "1",
              "--device", "cpu", "--threads", "1", "--no-progress"]
    ckpt = tmp_path / "ck.pt"
    first = torchrun([*common, "--max-steps", "2", "--checkpoint", str(ckpt)])
    assert first.returncode == 0, first.stderr
    (tmp_path / "ck.rank1.pt").unlink()
    again = torchrun([*common, "--resume", str(ckpt)], timeout=120)
    assert again.returncode != 0
    assert "CheckpointError: checkpoint" in again.stderr and "ck.rank1.pt does not exist" in again.stderr
    assert "another rank refused its checkpoint" in again.stderr
    assert "shim/" not in again.stderr          # torchrun's own report only, no gradblock frames
