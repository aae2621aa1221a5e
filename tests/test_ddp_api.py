"""gradblock.ddp, the public DDP API (issue 32): a state built from settings alone, the process
group and the parameter map resolved at the first bucket, the recipe as the default, named
errors for bad settings; the CLI's defaults are the same recipe (same bits as its explicit
options). The DDP cases run in their own process (tests/own_process.py)."""
from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="gradblock.ddp needs torch")
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from gradblock import ddp as gb  # noqa: E402
from gradblock.codec.errors import GradblockError, UsageError  # noqa: E402

from own_process import one_rank_gloo_group, run_in_own_process  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def test_state_builds_from_settings_alone_with_the_recipe():
    assert not dist.is_initialized()
    state = gb.GradblockState()
    assert not state.resolved
    assert state.settings | {} == state.settings
    s = state.settings
    assert (s["name"], s["k"], s["norm"], s["R"], s["local_momentum"]) == \
        ("coarse", 1, "l2", 100.0, 0.9)
    assert state.stats.bytes_sent == 0 and state.error is None
    state.reset_step()                       # optional, and harmless before the first bucket
    # the range follows the momentum; global selection takes L1
    assert gb.GradblockState(local_momentum=0).settings["R"] == 10.0
    assert gb.GradblockState(exchange="allreduce").settings["norm"] == "l1"
    assert gb.GradblockState(**gb.PLAIN).settings["local_momentum"] == 0.0


@pytest.mark.parametrize("kw, match", [
    (dict(nonfinite="ignore"), "nonfinite"), (dict(codec="gpu"), "codec"),
    (dict(graphs="yes"), "graphs"),
    (dict(k=0), "k"), (dict(range=-1.0), "range"), (dict(norm="l3"), "norm"),
    (dict(local_momentum=1.5), "momentum"), (dict(compressor="zip"), "compressor"),
    (dict(exchange="allreduce", norm="l2"), "norm"), (dict(exchange="ring"), "exchange")])
def test_bad_settings_are_named_errors_at_construction(kw, match):
    """The contract's (or the parameter table's) named error, at construction, not at the
    first bucket; never a bare ValueError / TypeError."""
    with pytest.raises(GradblockError, match=match) as info:
        gb.GradblockState(**kw)
    assert type(info.value).__name__.endswith("Error") and type(info.value) is not GradblockError


def test_state_pickles_before_its_first_bucket():
    """Spawn launchers (Lightning's ddp_spawn, notebooks) pickle the callbacks and so the state."""
    import pickle
    state = pickle.loads(pickle.dumps(gb.GradblockState(k=2, exchange="allreduce")))
    assert state.settings == gb.GradblockState(k=2, exchange="allreduce").settings
    assert not state.resolved and state.stats.bytes_sent == 0


def test_state_needs_a_step_or_bind_before_checkpoints():
    state = gb.GradblockState()
    with pytest.raises(UsageError, match="before the first step"):
        state.state_dict()
    with pytest.raises(UsageError, match="bind"):
        state.load_state_dict({})


@pytest.mark.skipif(importlib.util.find_spec("lightning") is None,
                    reason="lightning is not installed (the test extra installs it)")
def test_lightning_strategy_builds_before_the_process_group():
    from lightning.pytorch.strategies import DDPStrategy
    assert not dist.is_initialized()
    strategy = DDPStrategy(ddp_comm_state=gb.GradblockState(), ddp_comm_hook=gb.gradblock_hook)
    assert strategy is not None


# ------------------------------------------------------------------------------ DDP cases

def _lenet(seed=0):
    from gradblock.shim.setup.models import build_model
    return build_model("lenet5", seed=seed)


def _batches(n=3):
    g = torch.Generator().manual_seed(5)
    return [(torch.randn(8, 1, 28, 28, generator=g), torch.randint(0, 10, (8,), generator=g))
            for _ in range(n)]


def _flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def case_state_before_group_equals_simulation():
    """The state is built before init_process_group; the hook's result is the simulation's
    bit for bit (one rank), bytes are counted, and an unbound state's checkpoint restores into
    a bound one."""
    from gradblock.shim.compress.compressors import build_compressor, layers_of
    from gradblock.shim.exchange.workers import SimulatedCluster
    for settings in (dict(), dict(exchange="allreduce"), dict(k=0.2, **gb.PLAIN)):
        state = gb.GradblockState(**settings)        # no process group yet
        with one_rank_gloo_group():
            model = _lenet()
            ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.01)
            ddp.register_comm_hook(state, gb.gradblock_hook)
            momentum = 0.0 if state.settings["local_momentum"] else 0.9
            opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=momentum)
            for x, y in _batches():
                opt.zero_grad(set_to_none=True)
                F.cross_entropy(ddp(x), y).backward()
                opt.step()
            assert state.resolved and state.stats.bytes_sent > 0
            saved = state.state_dict()
            restored = gb.GradblockState(**settings).bind(_lenet())
            restored.load_state_dict(saved)
        s = state.settings
        sim_model = _lenet()
        layers = layers_of(sim_model)
        comp = build_compressor("coarse", layers, 1, k=s["k"], R=s["R"], norm=s["norm"],
                                local_momentum=s["local_momentum"], exchange=s["exchange"])
        cluster = SimulatedCluster(sim_model, comp, layers, F.cross_entropy, "cpu", timed=False)
        sim_opt = torch.optim.SGD(sim_model.parameters(), lr=0.05, momentum=momentum)
        for x, y in _batches():
            cluster.step([(x, y)], sim_opt)
        assert torch.equal(_flat(model), _flat(sim_model)), settings


def case_peer_error_is_named_on_the_first_step():
    """A NaN gradient: state.backward re-raises the codec's own class, not DDP's
    RuntimeError, also on the first step (the state resolves inside it)."""
    from gradblock.refmodel.quantiser import NonFiniteError
    state = gb.GradblockState()
    with one_rank_gloo_group():
        model = _lenet()
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        ddp.register_comm_hook(state, gb.gradblock_hook)
        x, y = _batches(1)[0]
        x[0, 0, 0, 0] = float("nan")
        with pytest.raises(NonFiniteError):
            state.backward(F.cross_entropy(ddp(x), y))


def test_state_before_group_equals_simulation():
    run_in_own_process("test_ddp_api", "case_state_before_group_equals_simulation")


def test_peer_error_is_named_on_the_first_step():
    run_in_own_process("test_ddp_api", "case_peer_error_is_named_on_the_first_step")


def _bf16_accepted() -> bool:
    from gradblock.shim.compress.compressors import LayerInfo, build_compressor, encode_group
    layer = LayerInfo(0, "w", (4, 3))
    comp = build_compressor("coarse", [layer], 1)
    try:
        encode_group(comp, [layer], [torch.ones(4, 3, dtype=torch.bfloat16)],
                     comp.new_worker_state())
    except TypeError:
        return False
    return True


def case_bf16_parameters_train_with_identical_replicas():
    state = gb.GradblockState()
    with one_rank_gloo_group():
        model = _lenet().to(torch.bfloat16)
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        ddp.register_comm_hook(state, gb.gradblock_hook)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        for x, y in _batches():
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(ddp(x.to(torch.bfloat16)), y).backward()
            opt.step()
        assert state.stats.bytes_sent > 0
        assert all(p.dtype == torch.bfloat16 for p in model.parameters())


def case_gradscaler_skips_an_overflow_as_plain_ddp():
    """nonfinite="skip": an overflowing step is skipped by torch's GradScaler exactly as
    without the hook (parameters untouched, the scale backed off), and the next step trains."""
    outcomes = []
    for hooked in (False, True):
        with one_rank_gloo_group():
            model = _lenet()
            ddp = torch.nn.parallel.DistributedDataParallel(model)
            state = gb.GradblockState(nonfinite="skip")
            if hooked:
                ddp.register_comm_hook(state, gb.gradblock_hook)
            opt = torch.optim.SGD(model.parameters(), lr=0.05)
            scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 16)
            (x, y), (x2, y2) = _batches(2)
            x[0, 0, 0, 0] = float("inf")
            before = _flat(model).clone()
            for xb, yb in ((x, y), (x2, y2)):
                opt.zero_grad(set_to_none=True)
                scaler.scale(F.cross_entropy(ddp(xb), yb)).backward()
                scaler.step(opt)
                scaler.update()
                if xb is x:
                    skipped = torch.equal(_flat(model), before)
                    scale = scaler.get_scale()
            outcomes.append((skipped, scale, not torch.equal(_flat(model), before)))
            if hooked:
                assert state.stats.bytes_sent > 0
    assert outcomes[0] == outcomes[1] == (True, 2.0 ** 15, True), outcomes


def test_gradscaler_skips_an_overflow_as_plain_ddp():
    run_in_own_process("test_ddp_api", "case_gradscaler_skips_an_overflow_as_plain_ddp")


def test_bf16_parameters_through_the_public_api():
    if not _bf16_accepted():
        pytest.skip("the codec refuses bf16 gradients (TypeError): issue 29 item 6's mixed "
                    "precision has not landed; gradblock.ddp passes them through once it does")
    run_in_own_process("test_ddp_api", "case_bf16_parameters_train_with_identical_replicas")


# ------------------------------------------------------------------------------ CLI defaults

def _train(tmp: Path, name: str, *options: str) -> bytes:
    out = tmp / name
    subprocess.run([sys.executable, "-m", "gradblock.cli", "train", "--data", "digits",
                    "--compressor", "coarse", "--epochs", "1", "--train-subset", "256",
                    "--test-subset", "64", "--workers", "2", "--batch-size", "16", "--threads",
                    "1", "--device", "cpu", "--no-progress", "--out", str(out), *options],
                   check=True, cwd=tmp, capture_output=True, text=True,
                   env=dict(os.environ, OMP_NUM_THREADS="1"))
    weights = torch.load(out / "model.pt", weights_only=True)    # the final parameters
    return b"".join(name.encode() + hashlib.sha256(t.numpy().tobytes()).digest()
                    for name, t in weights.items())


def test_cli_defaults_are_the_recipe_bit_for_bit(tmp_path):
    """No option = the documented recipe's explicit options, the same final weights."""
    default = _train(tmp_path, "default")
    explicit = _train(tmp_path, "explicit", "--local-momentum", "0.9", "--momentum", "0",
                      "--range", "100", "--norm", "l2")
    plain = _train(tmp_path, "plain", "--local-momentum", "0", "--momentum", "0.9",
                   "--range", "10", "--norm", "l1")
    assert default and default == explicit
    assert default != plain


def test_compile_notice_is_one_line_only_when_slow(monkeypatch, capfd):
    import time
    monkeypatch.setattr(gb, "COMPILE_NOTICE_S", 0.05)
    with gb._compile_notice(True):
        time.sleep(0.3)                     # numba compiling, as far as the notice knows
    err = capfd.readouterr().err
    assert err.count("gradblock: compiling the numba kernels") == 1 and err.count("\n") == 1
    with gb._compile_notice(True):
        pass                                # kernels loaded from the cache: quiet
    time.sleep(0.1)
    assert capfd.readouterr().err == ""


def case_lightning_callback_registers_once():
    """The callback registers on the strategy's DDP model, and leaves a state the strategy
    registered itself (Lightning does on CUDA) instead of registering it twice."""
    from types import SimpleNamespace
    from gradblock.lightning import GradblockCallback
    with one_rank_gloo_group():
        for already in (False, True):
            model = _lenet()
            ddp = torch.nn.parallel.DistributedDataParallel(model)
            callback = GradblockCallback(k=2)
            if already:
                ddp.register_comm_hook(callback.state, gb.gradblock_hook)
            callback.on_fit_start(SimpleNamespace(strategy=SimpleNamespace(model=ddp)), model)
            assert [s for _, s in ddp._comm_hooks] == [callback.state]
            x, y = _batches(1)[0]
            F.cross_entropy(ddp(x), y).backward()
            assert callback.state.stats.bytes_sent > 0
        with pytest.raises(UsageError, match="DDP strategy"):
            GradblockCallback().on_fit_start(SimpleNamespace(strategy=SimpleNamespace(
                model=_lenet())), None)


@pytest.mark.skipif(importlib.util.find_spec("lightning") is None,
                    reason="lightning is not installed (the test extra installs it)")
def test_lightning_callback_registers_once():
    run_in_own_process("test_ddp_api", "case_lightning_callback_registers_once")
