"""Momentum correction, factor masking and the sparsity warm-up in the training shim: the coarse
compressor against the §7 reference bit for bit, the float variant of topk / dlgs, the warm-up
schedule, the conflict with global momentum, and `validate --seeds`."""
from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="training needs torch")

from gradblock.refmodel import momentum as ref  # noqa: E402
from gradblock.shim.compress.compressors import (LayerInfo, build_compressor, decode_group,  # noqa: E402
                                        encode_group)
from gradblock.shim.setup.config import TrainConfig  # noqa: E402
from gradblock.shim.errors import ConfigError  # noqa: E402
from gradblock.shim.compress.warmup import Warmup  # noqa: E402

pytestmark = pytest.mark.torch

LAYERS = [LayerInfo(0, "conv.weight", (6, 1, 3, 3)), LayerInfo(1, "conv.bias", (6,)),
          LayerInfo(2, "fc.weight", (10, 24))]


def grads_for(rng, scale=1.0):
    return [torch.from_numpy((rng.standard_normal(lay.shape) * scale).astype(np.float32))
            for lay in LAYERS]


@pytest.mark.parametrize("mask", [True, False])
def test_coarse_with_correction_is_the_reference_bit_for_bit(mask):
    comp = build_compressor("coarse", LAYERS, 1, k=1, R=10.0, local_momentum=0.9,
                            momentum_mask=mask)
    ws = comp.new_worker_state()
    rng = np.random.default_rng(1)
    r = [None] * 3
    u = [None] * 3
    for _ in range(5):
        grads = grads_for(rng, 3.0)
        msg, stats = encode_group(comp, LAYERS, grads, ws)
        steps = [ref.momentum_layer(g.numpy(), r[j], u[j], 0.9, R=10.0, k=1, layer_id=j,
                                    mask=mask) for j, g in enumerate(grads)]
        np.testing.assert_array_equal(msg.numpy().view(np.uint32),
                                      np.concatenate([s.frame for s in steps]))
        assert stats.sat_momentum == sum(s.sat_momentum for s in steps)
        r = [s.residual_out for s in steps]
        u = [s.velocity_out for s in steps]
        for j in range(3):
            np.testing.assert_array_equal(ws.layers[j]["residual"].numpy(), r[j])
            np.testing.assert_array_equal(ws.layers[j]["velocity"].numpy(), u[j])


def test_float_variant_masks_the_sent_elements():
    lay = [LayerInfo(0, "w", (4, 5))]
    comp = build_compressor("topk", lay, 1, k=1, local_momentum=0.5)      # 5 elements per step
    ws = comp.new_worker_state()
    g1 = torch.arange(20, dtype=torch.float32).reshape(4, 5) - 10.0
    encode_group(comp, lay, [g1], ws)
    u1 = g1.clone().reshape(-1)
    sent = torch.topk(u1.abs(), 5).indices
    u1[sent] = 0.0
    assert torch.equal(ws.layers[0]["velocity"].reshape(-1), u1)
    assert torch.equal(ws.layers[0]["residual"].reshape(-1), u1)   # residual: acc off the sent
    g2 = torch.ones(4, 5)
    msg, _ = encode_group(comp, lay, [g2], ws)
    u2 = u1 * 0.5 + 1.0                                              # float32(m * u) + g
    acc = u1 + u2
    out = decode_group(comp, lay, [msg])[0].reshape(-1)
    top = torch.topk(acc.abs(), 5).indices
    assert torch.equal(out[top], acc[top]) and int((out != 0).sum()) == 5


def test_dense_layers_keep_ordinary_momentum():
    comp = build_compressor("coarse", LAYERS, 1, k=1, local_momentum=0.5, dense_below=10)
    ws = comp.new_worker_state()
    g = grads_for(np.random.default_rng(0))
    encode_group(comp, LAYERS, g, ws)
    msg, _ = encode_group(comp, LAYERS, g, ws)
    bias = decode_group(comp, LAYERS, [msg])[1]
    assert torch.equal(bias, g[1] * 0.5 + g[1])                     # u2 = m*u1 + g, never masked
    assert comp.state_spec(LAYERS[1]) == {"velocity": (torch.float32, (6,))}


def test_warmup_schedule_is_a_pure_decaying_function_of_the_step():
    w = Warmup(100, 0.25)
    counts = [w.count(s, 120, 1) for s in range(0, 120)]
    assert counts[0] == 30 and counts[-1] == 1 and counts[100] == 1
    assert all(a >= b for a, b in zip(counts, counts[1:]))
    assert Warmup().count(0, 120, 1) == 1 and w.count(0, 4, 4) == 4 and w.count(0, 2, 1) == 1
    with pytest.raises(ValueError):
        Warmup(10, 0.0)
    with pytest.raises(ValueError):
        Warmup(-1, 0.5)


def test_warmup_sends_more_blocks_first_and_counts_them():
    lay = [LayerInfo(0, "fc", (120, 8))]
    comp = build_compressor("coarse", lay, 1, k=1, warmup=Warmup(4, 0.5))
    plain = build_compressor("coarse", lay, 1, k=1)
    ws, wp = comp.new_worker_state(), plain.new_worker_state()
    rng = np.random.default_rng(3)
    sent = []
    for _ in range(6):
        g = torch.from_numpy(rng.standard_normal((120, 8)).astype(np.float32))
        _, s = encode_group(comp, lay, [g], ws)
        _, p = encode_group(plain, lay, [g.clone()], wp)
        sent.append((s.elements_sent, s.bytes_sent, p.bytes_sent))
    blocks = [e // 8 for e, _, _ in sent]
    assert blocks == [Warmup(4, 0.5).count(s, 120, 1) for s in range(6)] and blocks[0] == 60
    assert sent[0][1] > 10 * sent[0][2]             # the warm-up's bytes are counted
    assert blocks[4:] == [1, 1]


def test_local_and_global_momentum_together_are_refused(capsys):
    with pytest.raises(ConfigError, match="--momentum 0"):
        TrainConfig(data="digits", local_momentum=0.9, momentum=0.9).check()
    with pytest.raises(ConfigError, match="local_momentum"):
        TrainConfig(data="digits", local_momentum=1.0, momentum=0.0).check()
    from gradblock import cli
    # both explicit (unset, --momentum follows --local-momentum: the recipe of issue 32)
    assert cli.main(["train", "--data", "digits", "--local-momentum", "0.9", "--momentum", "0.9",
                     "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "MomentumConflictError" not in err[0] and "--momentum 0" in err[0]


def test_validate_seeds_rows_and_figure(tmp_path, capsys):
    from gradblock.shim.training.validate import validate_main
    out = tmp_path / "val"
    assert validate_main(["--data", "digits", "--epochs", "1", "--train-subset", "256",
                          "--test-subset", "100", "--threads", "1", "--no-progress",
                          "--compressors", "dense", "coarse1", "--local-momentum", "0.9",
                          "--momentum", "0", "--uncorrected", "--seeds", "0", "1",
                          "--out", str(out)]) == 0
    data = json.loads((out / "validate.json").read_text())
    rows = {r["name"]: r for r in data["rows"]}
    assert list(rows) == ["dense", "coarse1", "coarse1_plain"]
    for r in rows.values():
        assert r["seeds"] == [0, 1] and len(r["accs"]) == 2
        assert r["acc_mean"] == pytest.approx(sum(r["accs"]) / 2)
        assert r["acc_std"] == pytest.approx(abs(r["accs"][0] - r["accs"][1]) / 2 ** 0.5)
    dense_runs = [x for x in data["runs"] if x["row"] == "dense"]
    # dense stands in with global momentum for the local momentum the compressed rows use
    assert all(x["config"]["momentum"] == 0.9 and x["config"]["local_momentum"] == 0.0
               for x in dense_runs)
    c1 = [x for x in data["runs"] if x["row"] == "coarse1"]
    assert all(x["config"]["momentum"] == 0.0 and x["compressor_config"]["local_momentum_fix"]
               == 58982 for x in c1)
    assert rows["coarse1"]["compression"] > 10 and rows["dense"]["compression"] == 1.0
    assert {x["config"]["seed"] for x in c1} == {0, 1}
    assert (out / "validate_acc_compression.png").read_bytes()[:4] == b"\x89PNG"


def test_demo_validation_cycles_fc1_blocks():
    """The demo's validation is long enough for k = 1 to send each of fc1's 120 rows more
    than twice, with correction on, and its arguments parse."""
    from gradblock.demo import VALIDATION_ARGS
    from gradblock.shim.training.validate import build_parser
    args = build_parser().parse_args(VALIDATION_ARGS)
    steps = args.train_subset // (4 * args.batch_size) * args.epochs
    assert steps >= 3 * 120 and args.local_momentum == 0.9 and args.momentum == 0.0
    assert args.compressors == ["dense", "coarse1"]


@pytest.mark.slow
def test_ddp_with_correction_and_warmup_equals_simulation_and_resumes(tmp_path):
    """`gradblock train --ddp` with --local-momentum and the sparsity warm-up under torchrun
    (2 ranks, gloo): the parameters of the single-process simulation, bit for bit, also after
    a stop and resume from per-rank checkpoints (velocities included)."""
    from tests.test_ddp_hook import simulated_run, torchrun

    common = ["--data", "digits", "--compressor", "coarse", "--k", "1", "--epochs", "2",
              "--local-momentum", "0.9", "--momentum", "0", "--sparsity-warmup-steps", "12",
              "--device", "cpu",              # a GPU machine's "auto" would pick CUDA
              "--batch-size", "32", "--threads", "1", "--no-progress", "--max-steps", "26"]
    full = torchrun(["gradblock.cli", "train", "--ddp", *common, "--out", str(tmp_path / "full")])
    assert full.returncode == 0, full.stderr
    ckpt = tmp_path / "ck.pt"
    part = torchrun(["gradblock.cli", "train", "--ddp", *common[:-1], "9", "--checkpoint",
                     str(ckpt)])
    assert part.returncode == 0, part.stderr
    rest = torchrun(["gradblock.cli", "train", "--ddp", *common, "--resume", str(ckpt),
                     "--out", str(tmp_path / "resumed")])
    assert rest.returncode == 0, rest.stderr
    sim = simulated_run(common, tmp_path / "sim")
    sim_params = torch.load(tmp_path / "sim" / "model.pt", weights_only=True)
    for run in ("full", "resumed"):
        for r in (0, 1):
            state = torch.load(tmp_path / run / f"model.rank{r}.pt", weights_only=True)
            for k, v in sim_params.items():
                assert torch.equal(state[k], v), (run, r, k)
    a = json.loads((tmp_path / "full" / "result.json").read_text())
    assert a["bytes_sent"] == sim["bytes_sent"] and a["sat_momentum"] == sim["sat_momentum"]
