"""Weight decay and local gradient clipping on the worker, learning-rate schedules, and the GRU
model: exact float steps, resume across a schedule change, every compressor on the GRU, and
`train --ddp` against the simulation (shim/training/schedule.py, shim/setup/models.py)."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="training needs torch")

from gradblock.shim.setup.config import TrainConfig  # noqa: E402
from gradblock.shim.errors import ConfigError  # noqa: E402
from gradblock.shim.training.schedule import clip_threshold, lr_at, worker_grad  # noqa: E402
from gradblock.shim.training.trainer import run_training  # noqa: E402

pytestmark = pytest.mark.torch

# digits: 1438 training samples; 4 workers x 32 -> 11 steps per epoch
BASE = dict(data="digits", epochs=2, batch_size=32, workers=4, threads=1, progress=False,
            eval_every=0)


# ------------------------------------------------------------------------------ learning rate

def test_step_schedule_rates():
    cfg = TrainConfig(lr=0.1, lr_schedule="step", lr_milestones=(1.0, 1.5), lr_gamma=0.1).check()
    # 10 steps an epoch: milestones at steps 10 and 15
    assert [lr_at(cfg, 10, s) for s in (0, 9, 10, 14, 15, 40)] == \
        [0.1, 0.1, 0.1 * 0.1 ** 1, 0.1 * 0.1 ** 1, 0.1 * 0.1 ** 2, 0.1 * 0.1 ** 2]


def test_cosine_schedule_rates_and_warmup():
    cfg = TrainConfig(lr=0.2, epochs=3, lr_schedule="cosine", lr_warmup_epochs=0.5).check()
    T = 30                                       # 3 epochs x 10 steps
    want = [0.2 * (1 + math.cos(math.pi * min(s, T - 1) / T)) / 2 for s in range(40)]
    got = [lr_at(cfg, 10, s) for s in range(40)]
    assert got[5:] == want[5:]                   # after the 5-step warm-up: the curve itself
    assert got[:5] == [want[s] * (s + 1) / 5 for s in range(5)]
    assert got[29] == got[39] > 0                # the last rate is held, never 0
    cfg2 = TrainConfig(lr=0.2, epochs=3, lr_schedule="cosine", lr_schedule_epochs=1.0).check()
    assert lr_at(cfg2, 10, 9) == lr_at(cfg2, 10, 25) == 0.2 * (1 + math.cos(math.pi * 9 / 10)) / 2


@pytest.mark.parametrize("kw,field", [
    (dict(lr_schedule="step"), "lr_milestones"),
    (dict(lr_milestones=(1.0,)), "lr_milestones"),
    (dict(lr_schedule="step", lr_milestones=(2.0, 1.0)), "lr_milestones"),
    (dict(lr_schedule="linear"), "lr_schedule"),
    (dict(lr_schedule_epochs=2.0), "lr_schedule_epochs"),
    (dict(lr_schedule="cosine", lr_schedule_epochs=0.0), "lr_schedule_epochs"),
    (dict(weight_decay=-1e-4), "weight_decay"),
    (dict(clip_norm=math.inf), "clip_norm"),
    (dict(lr_schedule="step", lr_milestones=(1.0,), lr_gamma=0.0), "lr_gamma"),
])
def test_bad_schedule_settings_are_named(kw, field):
    with pytest.raises(ConfigError, match=f"^{field} must be"):
        TrainConfig(**kw).check()


def test_bad_schedule_from_the_cli_is_one_line(capsys):
    from gradblock import cli
    assert cli.main(["train", "--data", "digits", "--no-progress", "--lr-schedule", "step"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gradblock train: ConfigError: lr_milestones must be") and \
        len(err.strip().splitlines()) == 1


# ------------------------------------------------------------------------------ the worker's gradient

def test_worker_grad_is_the_documented_float_steps():
    rng = np.random.default_rng(5)
    g = rng.standard_normal((7, 9)).astype(np.float32)
    w = rng.standard_normal((7, 9)).astype(np.float32)
    wd, C, n = 5e-4, 0.3, 4
    t = clip_threshold(C, n)
    assert t == C / math.sqrt(n)
    got = worker_grad(torch.from_numpy(g), torch.from_numpy(w), wd, t).numpy()
    d = np.float32(wd) * w                              # float32(wd32 * w)
    h = g + d                                           # float32(g + d)
    norm = math.sqrt(float(np.sum(h.astype(np.float64) ** 2)))
    assert norm > t                                     # this case clips
    want = h * np.float32(t / norm)
    assert got.dtype == np.float32 and np.array_equal(got, want)
    # under the threshold: weight decay only; both off: the same tensor values
    assert np.array_equal(worker_grad(torch.from_numpy(g), torch.from_numpy(w), wd, 1e9).numpy(), h)
    assert np.array_equal(worker_grad(torch.from_numpy(g), torch.from_numpy(w), 0.0, 0.0).numpy(), g)


def test_clipping_bounds_every_layers_update():
    """One dense step, no momentum: each layer moves by lr * (mean of the N clipped gradients),
    so by at most lr * C / sqrt(N) in L2 norm; with one worker the clipped layers sit at it."""
    from gradblock.shim.training.trainer import Trainer
    C, lr, N = 0.05, 0.5, 1
    cfg = TrainConfig(**dict(BASE, compressor="dense", momentum=0.0, lr=lr, clip_norm=C,
                             max_steps=1, workers=N))
    trainer = Trainer(cfg)
    before = {n: p.detach().clone() for n, p in trainer.problem.model.named_parameters()}
    trainer.run()
    bound = lr * C / math.sqrt(N)
    moved = {n: float(torch.linalg.vector_norm((p.detach() - before[n]).double()))
             for n, p in trainer.problem.model.named_parameters()}
    trainer.close()
    assert all(v <= bound * (1 + 1e-5) for v in moved.values()), moved
    assert sum(v > (1 - 1e-5) * bound for v in moved.values()) >= 3, moved   # clipped layers


def test_weight_decay_reaches_the_compressor():
    """One dense step without momentum, with and without decay: the two differ by
    lr * wd * w (what the workers added to their gradients before compression)."""
    from gradblock.shim.training.trainer import Trainer
    cfg = TrainConfig(**dict(BASE, compressor="dense", momentum=0.0, lr=0.1, weight_decay=0.5,
                             max_steps=1))
    trainer = Trainer(cfg)
    before = trainer.problem.model.fc2.bias.detach().clone()
    trainer.run()
    after = trainer.problem.model.fc2.bias.detach()
    trainer.close()
    plain = Trainer(TrainConfig(**dict(BASE, compressor="dense", momentum=0.0, lr=0.1,
                                       max_steps=1)))
    plain.run()
    diff = (plain.problem.model.fc2.bias.detach() - after).double()
    plain.close()
    # the decay moved fc2.bias by lr * wd * w (up to float32 rounding of the sums)
    assert torch.allclose(diff, (0.1 * 0.5 * before).double(), rtol=1e-4, atol=1e-6)


# ------------------------------------------------------------------------------ resume

@pytest.mark.parametrize("stops,extra", [
    # a step schedule (milestone at step 11 = epoch 1), weight decay, clipping, correction:
    # stopped just before the change point and resumed across it
    ((10, 13), dict(compressor="coarse", local_momentum=0.9, momentum=0.0, range=100.0,
                    lr_schedule="step", lr_milestones=(1.0,), lr_gamma=0.2, weight_decay=1e-3,
                    clip_norm=0.5)),
    # cosine over the run, clipping, topk
    ((7,), dict(compressor="topk", lr_schedule="cosine", clip_norm=0.5)),
])
def test_resume_across_a_schedule_change_is_bit_identical(tmp_path, stops, extra):
    cfg = dict(BASE, k=1, **extra)
    whole = run_training(TrainConfig(**cfg, out=str(tmp_path / "whole")))
    ckpt = str(tmp_path / "ck.pt")
    resume = None
    for stop in stops:
        part = run_training(TrainConfig(**cfg, max_steps=stop, checkpoint=ckpt, resume=resume))
        assert part["steps"] == stop
        resume = ckpt
    rest = run_training(TrainConfig(**cfg, resume=ckpt, out=str(tmp_path / "rest")))
    a = torch.load(tmp_path / "whole" / "model.pt", weights_only=True)
    b = torch.load(tmp_path / "rest" / "model.pt", weights_only=True)
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert whole["curves"] == rest["curves"] and whole["bytes_sent"] == rest["bytes_sent"]


def test_cosine_horizon_is_kept_by_the_checkpoint(tmp_path):
    """A cosine run of 1 epoch resumed with --epochs 2 stays on the 1-epoch curve (the
    checkpoint's horizon), and a different horizon is refused by name."""
    from gradblock.shim.errors import CheckpointError
    from gradblock.shim.training.trainer import Trainer
    ckpt = str(tmp_path / "ck.pt")
    cfg = dict(BASE, compressor="dense", lr_schedule="cosine", epochs=1)
    run_training(TrainConfig(**cfg, checkpoint=ckpt))
    t = Trainer(TrainConfig(**dict(cfg, epochs=2), resume=ckpt))
    assert t.cfg.lr_schedule_epochs == 1.0 and t.lr_at(15) == t.lr_at(10)
    t.close()
    with pytest.raises(CheckpointError, match="lr_schedule_epochs=1.0 \\(now 3.0\\)"):
        run_training(TrainConfig(**dict(cfg, epochs=3, lr_schedule_epochs=3.0), resume=ckpt))


# ------------------------------------------------------------------------------ the GRU

def test_gru_blocks_are_rows_of_the_stacked_gates():
    from gradblock.refmodel.selection import block_layout
    from gradblock.shim.compress.compressors import layers_of
    from gradblock.shim.setup.models import build_model
    m = build_model("gru", 10, (1, 28, 28))
    layers = {lay.name: lay for lay in layers_of(m)}
    for name, cols in (("gru.weight_ih_l0", 28), ("gru.weight_hh_l0", 128)):
        lay = layers[name]
        assert lay.shape == (3 * 128, cols)
        assert block_layout(lay.shape).block_size == cols          # one row a block
        p = dict(m.named_parameters())[name]
        assert p.is_contiguous() and p.stride() == (cols, 1)       # a row is contiguous
    assert sum(p.numel() for p in m.parameters()) == 61962
    out = m(torch.zeros(3, 1, 28, 28))
    assert out.shape == (3, 10)


def _compressors():
    from gradblock.shim.compress.compressors import COMPRESSORS
    try:
        from gradblock.shim.exchange.peers import PEERS
    except ImportError:
        PEERS = ()
    # the peers start N gloo processes (~15 s each): slow
    return list(COMPRESSORS) + [pytest.param(p, marks=pytest.mark.slow) for p in PEERS]


@pytest.mark.parametrize("compressor", _compressors())
def test_every_compressor_trains_the_gru(compressor):
    """A few steps of the GRU (digits: 8 steps of 8 values) in the simulation, with weight
    decay, clipping and a step schedule on the way."""
    cfg = TrainConfig(**dict(BASE, model="gru", compressor=compressor, k=4, max_steps=3,
                             workers=2, weight_decay=1e-4, clip_norm=1.0, lr_schedule="step",
                             lr_milestones=(0.1,)))
    r = run_training(cfg)
    assert r["steps"] == 3 and r["config"]["model"] == "gru"
    assert r["final_test_acc"] is not None and math.isfinite(r["final_test_loss"])


@pytest.mark.slow
def test_train_ddp_gru_with_decay_clipping_schedule_equals_simulation(tmp_path):
    """`gradblock train --ddp` (2 ranks, gloo) on the GRU with weight decay, clipping and a
    step schedule ends with the parameters of the 2-worker simulation, bit for bit; so does
    a DDP run stopped before the schedule's milestone (step 3 of 8) and resumed from its
    per-rank checkpoints."""
    from test_ddp_hook import simulated_run, torchrun
    args = ["--data", "digits", "--model", "gru", "--compressor", "coarse", "--k", "4",
            "--epochs", "1", "--threads", "1", "--no-progress", "--max-steps", "8",
            "--weight-decay", "0.001", "--clip-norm", "0.5", "--lr-schedule", "step",
            "--lr-milestones", "0.2", "--local-momentum", "0.9", "--momentum", "0",
            "--range", "100"]
    proc = torchrun(["gradblock.cli", "train", "--ddp", *args, "--out", str(tmp_path / "ddp")])
    assert proc.returncode == 0, proc.stderr
    ckpt = str(tmp_path / "ck.pt")
    stop_at_3 = [("3" if prev == "--max-steps" else a) for prev, a in zip([None, *args], args)]
    part = torchrun(["gradblock.cli", "train", "--ddp", *stop_at_3, "--checkpoint", ckpt])
    assert part.returncode == 0, part.stderr
    rest = torchrun(["gradblock.cli", "train", "--ddp", *args, "--resume", ckpt,
                     "--out", str(tmp_path / "resumed")])
    assert rest.returncode == 0, rest.stderr
    sim = simulated_run(args, tmp_path / "sim")
    want = torch.load(tmp_path / "sim" / "model.pt", weights_only=True)
    for run in ("ddp", "resumed"):
        for r in (0, 1):
            got = torch.load(tmp_path / run / f"model.rank{r}.pt", weights_only=True)
            for k, v in want.items():
                assert torch.equal(got[k], v), (run, r, k)
    res = json.loads((tmp_path / "ddp" / "result.json").read_text())
    assert res["bytes_sent"] == sim["bytes_sent"]
