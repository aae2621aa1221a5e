"""shim/compress/compressors.py, shim/exchange/optim.py, shim/exchange/workers.py and shim/exchange/state.py (single process)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the training shim needs torch")

from gradblock.codec import errors as E  # noqa: E402
from gradblock.codec import zrle  # noqa: E402
from gradblock.refmodel.compress import compress_layer as ref_compress  # noqa: E402
from gradblock.refmodel.quantiser import NonFiniteError, QuantConfig  # noqa: E402
from gradblock.refmodel.quantiser import average as ref_average  # noqa: E402
from gradblock.shim.compress import compressors as C  # noqa: E402
from gradblock.shim.exchange.optim import GlobalMomentumSGD  # noqa: E402
from gradblock.shim.exchange.state import (CheckpointError, compressor_state, load_checkpoint, rank_path,  # noqa: E402
                        restore_compressor_state, save_checkpoint)
from gradblock.shim.exchange.workers import SimulatedCluster  # noqa: E402

pytestmark = pytest.mark.torch

LAYERS = [C.LayerInfo(0, "conv.weight", (4, 2, 3, 3)), C.LayerInfo(1, "conv.bias", (4,)),
          C.LayerInfo(2, "fc.weight", (10, 36)), C.LayerInfo(3, "fc.bias", (10,))]


def grads_for(seed: int, scale: float = 0.1) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(lay.shape, generator=g) * scale for lay in LAYERS]


def run_workers(comp: C.Compressor, steps: int = 3, seed: int = 0):
    """Encode every worker's gradients and reduce, `steps` times; returns the last averages,
    the messages and the worker states."""
    states = [comp.new_worker_state() for _ in range(comp.n_workers)]
    for s in range(steps):
        msgs, stats = zip(*[C.encode_group(comp, LAYERS, grads_for(seed + 100 * s + w), states[w])
                            for w in range(comp.n_workers)])
        avg = C.decode_group(comp, LAYERS, list(msgs))
    return avg, list(msgs), list(stats), states


# ------------------------------------------------------------------------------ each compressor

def test_dense_is_the_float64_mean():
    comp = C.build_compressor("dense", LAYERS, 3)
    avg, msgs, stats, _ = run_workers(comp, steps=1)
    grads = [grads_for(w) for w in range(3)]
    for j, lay in enumerate(LAYERS):
        expect = ((grads[0][j].double() + grads[1][j].double() + grads[2][j].double()) / 3).float()
        assert torch.equal(avg[j], expect)
    n = sum(lay.numel for lay in LAYERS)
    assert all(s.bytes_sent == 4 * n and m.numel() == n for s, m in zip(stats, msgs))


def test_coarse_frames_and_average_match_the_reference():
    comp = C.build_compressor("coarse", LAYERS, 2, k=2)
    states = [comp.new_worker_state() for _ in range(2)]
    ref_res = [[None] * len(LAYERS) for _ in range(2)]
    for step in range(3):
        msgs, sums = [], [np.zeros(lay.numel, dtype=np.int64) for lay in LAYERS]
        for w in range(2):
            grads = grads_for(10 * step + w, scale=2.0)
            msg, stats = C.encode_group(comp, LAYERS, grads, states[w])
            frames = []
            for j, lay in enumerate(LAYERS):
                ref = ref_compress(grads[j].numpy(), ref_res[w][j], k=2, layer_id=lay.index,
                                   where=lay.name)
                ref_res[w][j] = ref.residual_out
                frames.append(ref.frame)
                sums[j] += ref.payload.reshape(-1)
            np.testing.assert_array_equal(msg.numpy().view(np.uint32), np.concatenate(frames))
            assert stats.bytes_sent == 4 * sum(f.size for f in frames)
            msgs.append(msg)
        avg = C.decode_group(comp, LAYERS, msgs)
        for j, lay in enumerate(LAYERS):
            expect = ref_average(sums[j], 2, QuantConfig.from_range(10.0)).reshape(lay.shape)
            np.testing.assert_array_equal(avg[j].numpy().view(np.uint32), expect.view(np.uint32))


def test_topk_keeps_k_elements_with_error_feedback():
    comp = C.build_compressor("topk", LAYERS, 1, density=0.25)
    ws = comp.new_worker_state()
    g1, g2 = grads_for(1), grads_for(2)
    C.encode_group(comp, LAYERS, g1, ws)
    res1 = [ws.layers[lay.index]["residual"].clone() for lay in LAYERS]
    msg, stats = C.encode_group(comp, LAYERS, g2, ws)
    avg = C.decode_group(comp, LAYERS, [msg])
    for j, lay in enumerate(LAYERS):
        acc = res1[j] + g2[j]
        k = max(1, int(np.ceil(0.25 * lay.numel)))
        sent = avg[j] != 0
        assert int(sent.sum()) == k
        # what was sent plus the new residual is the accumulated gradient, exactly
        assert torch.equal(avg[j] + ws.layers[lay.index]["residual"], acc)
        # and every sent element is at least as large as every kept one
        assert acc.abs()[sent].min() >= acc.abs()[~sent].max()
    assert stats.bytes_sent == 4 * sum(1 + 2 * max(1, int(np.ceil(0.25 * lay.numel)))
                                       for lay in LAYERS)


def test_density_match_sends_as_many_elements_as_coarse():
    topk = C.build_compressor("topk", LAYERS, 1, k=2, density="match")
    coarse = C.build_compressor("coarse", LAYERS, 1, k=2)
    _, _, stats_t, _ = run_workers(topk, steps=1)
    _, _, stats_c, _ = run_workers(coarse, steps=1)
    assert [topk.k_elements(lay) for lay in LAYERS] == [2 * 18, 2, 2 * 36, 2]
    assert stats_t[0].elements_sent == stats_c[0].elements_sent == 2 * 18 + 2 + 2 * 36 + 2


def test_dlgs_reuses_its_threshold_between_recomputations():
    comp = C.build_compressor("dlgs", LAYERS, 1, density=0.1, interval=3)
    ws = comp.new_worker_state()
    thresholds, counts = [], []
    for step in range(6):
        _, stats = C.encode_group(comp, LAYERS, grads_for(step), ws)
        thresholds.append(float(ws.layers[2]["threshold"]))
        counts.append(stats.elements_sent)
    k_total = sum(comp.k_elements(lay) for lay in LAYERS)
    assert counts[0] == counts[3] == k_total            # recomputed: exactly top-k
    assert thresholds[0] == thresholds[1] == thresholds[2] != thresholds[3]
    assert thresholds[3] == thresholds[4] == thresholds[5]
    assert counts[1] != k_total or counts[2] != k_total   # in between: whatever passes


def test_dense_below_sends_small_layers_as_float32():
    comp = C.build_compressor("coarse", LAYERS, 1, k=1, dense_below=16)
    g = grads_for(3)
    msg, stats = C.encode_group(comp, LAYERS, g, comp.new_worker_state())
    avg = C.decode_group(comp, LAYERS, [msg])
    assert torch.equal(avg[1], g[1]) and torch.equal(avg[3], g[3])     # biases: exact floats
    frames = [ref_compress(g[j].numpy(), k=1, layer_id=j).frame for j in (0, 2)]
    assert stats.bytes_sent == 4 * (frames[0].size + 4 + frames[1].size + 10)


def test_nan_gradient_raises_and_leaves_the_state_alone():
    for name in C.COMPRESSORS:
        comp = C.build_compressor(name, LAYERS, 1, density=0.5)
        ws = comp.new_worker_state()
        C.encode_group(comp, LAYERS, grads_for(0), ws)
        before = ws.state_dict()
        bad = grads_for(1)
        bad[2][3, 4] = float("nan")
        with pytest.raises(NonFiniteError, match="fc.weight"):
            C.encode_group(comp, LAYERS, bad, ws)
        after = ws.state_dict()
        assert after["steps"] == before["steps"]
        for i, d in before["layers"].items():
            for key, v in d.items():
                assert torch.equal(after["layers"][i][key], v), (name, i, key)


def test_bad_configuration_is_named():
    with pytest.raises(ValueError, match="unknown compressor"):
        C.build_compressor("zip", LAYERS, 1)
    with pytest.raises(ValueError, match="density"):
        C.build_compressor("topk", LAYERS, 1, density=1.5)
    with pytest.raises(ValueError, match="k must be"):
        C.build_compressor("coarse", LAYERS, 1, k=0)
    with pytest.raises(ValueError, match="workers"):
        C.build_compressor("dense", LAYERS, 0)
    with pytest.raises(ValueError, match="interval"):
        C.build_compressor("dlgs", LAYERS, 1, interval=0)
    comp = C.build_compressor("coarse", LAYERS, 1)
    with pytest.raises(ValueError, match="gradient shape"):
        C.encode_group(comp, LAYERS, [torch.zeros(3)] + grads_for(0)[1:], comp.new_worker_state())


# ------------------------------------------------------------------------------ malformed peers

def corrupt(msg: torch.Tensor, at: int, value: int) -> torch.Tensor:
    out = msg.clone()
    out[at] = value
    return out


def test_corrupt_peer_frame_names_rank_and_layer():
    comp = C.build_compressor("coarse", LAYERS, 2)
    _, msgs, _, _ = run_workers(comp, steps=1)
    frame0 = int(msgs[1][3])                 # n of the first frame; 4 = its R word
    assert frame0 == LAYERS[0].numel
    bad = corrupt(msgs[1], len(msgs[1]) - 1, int(msgs[1][-1]) ^ 1)      # last frame's CRC
    with pytest.raises(E.CrcMismatchError, match=r"peer rank 1, layer 3 'fc.bias'") as info:
        C.decode_group(comp, LAYERS, [msgs[0], bad])
    assert (info.value.rank, info.value.layer, info.value.code) == (1, "fc.bias", 13)
    with pytest.raises(E.BadMagicError, match=r"peer rank 0, layer 0 'conv.weight'"):
        C.decode_group(comp, LAYERS, [corrupt(msgs[0], 0, 0), msgs[1]])
    with pytest.raises(E.TruncatedError, match="peer rank 1"):
        C.decode_group(comp, LAYERS, [msgs[0], msgs[1][:-3]])
    with pytest.raises(C.PacketError, match="peer rank 0: message has 1 words left"):
        C.decode_group(comp, LAYERS, [torch.cat([msgs[0], msgs[0][:1]]), msgs[1]])
    # a valid frame of the right size but another layer's id: the messages are out of step
    first = zrle.decode_frame(msgs[0].numpy().view(np.uint32)).n_words
    foreign = zrle.encode_frame(np.ones(LAYERS[0].shape, dtype=np.int32), layer_id=9)
    shifted = torch.cat([torch.from_numpy(foreign.view(np.int32)), msgs[0][first:]])
    with pytest.raises(C.PacketError, match="layer id 9, expected 0"):
        C.decode_group(comp, LAYERS, [shifted, msgs[1]])


def test_corrupt_sparse_and_dense_packets_are_named():
    comp = C.build_compressor("topk", LAYERS, 1, density=0.25)
    _, msgs, _, _ = run_workers(comp, steps=1, seed=0)
    m = msgs[0]
    with pytest.raises(C.PacketError, match=r"peer rank 0, layer 0 'conv.weight'.*claims 1000"):
        C.decode_group(comp, LAYERS, [corrupt(m, 0, 1000)])
    with pytest.raises(C.PacketError, match="out of range"):
        C.decode_group(comp, LAYERS, [corrupt(m, 1, 72)])
    with pytest.raises(C.PacketError, match="not strictly increasing"):
        C.decode_group(comp, LAYERS, [corrupt(m, 2, int(m[1]))])
    with pytest.raises(C.PacketError, match="truncated sparse packet"):
        C.decode_group(comp, LAYERS, [m[:-1]])
    dense = C.build_compressor("dense", LAYERS, 1)
    _, dm, _, _ = run_workers(dense, steps=1)
    with pytest.raises(C.PacketError, match="truncated dense packet for layer 'fc.bias'"):
        C.decode_group(dense, LAYERS, [dm[0][:-1]])


# ------------------------------------------------------------------------------ optimiser

def test_global_momentum_sgd_matches_float32_numpy():
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal(1000).astype(np.float32)
    p = torch.nn.Parameter(torch.from_numpy(w0.copy()))
    opt = GlobalMomentumSGD([p], lr=0.05, momentum=0.9)
    w, V = w0.copy(), np.zeros_like(w0)
    lr, m = np.float32(0.05), np.float32(0.9)
    for _ in range(5):
        U = rng.standard_normal(1000).astype(np.float32)
        p.grad = torch.from_numpy(U.copy())
        opt.step()
        V = (m * V).astype(np.float32)
        V = (V + U).astype(np.float32)
        w = (w - (lr * V).astype(np.float32)).astype(np.float32)
        np.testing.assert_array_equal(p.detach().numpy().view(np.uint32), w.view(np.uint32))
    with pytest.raises(ValueError, match="momentum"):
        GlobalMomentumSGD([p], lr=0.1, momentum=1.0)
    with pytest.raises(ValueError, match="lr"):
        GlobalMomentumSGD([p], lr=float("inf"))


# ------------------------------------------------------------------------------ simulation

class TinyNet(torch.nn.Module):
    """Conv + BatchNorm + FC: exercises buffers (BN running stats) as well as parameters."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)
        self.fc = torch.nn.Linear(4 * 4 * 4, 10)

    def forward(self, x):
        return self.fc(torch.relu(self.bn(self.conv(x))).flatten(1))


def simulate(order_per_step, compressor="coarse", n_workers=3, steps=3, **kw):
    torch.manual_seed(0)
    model = TinyNet()
    layers = C.layers_of(model)
    comp = C.build_compressor(compressor, layers, n_workers, **kw)
    cluster = SimulatedCluster(model, comp, layers, torch.nn.functional.cross_entropy)
    opt = GlobalMomentumSGD(model.parameters(), lr=0.1, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    for s in range(steps):
        batches = [(torch.randn(8, 1, 6, 6, generator=g), torch.randint(0, 10, (8,), generator=g))
                   for _ in range(n_workers)]
        cluster.step(batches, opt, order=order_per_step(s))
    return model.state_dict(), cluster


def test_worker_order_does_not_change_the_bits():
    """int64 sums are order-independent: permuting the order workers compute and are reduced
    in gives the same parameters and buffers, bit for bit."""
    ref, _ = simulate(lambda s: None)
    perm, _ = simulate(lambda s: [[2, 0, 1], [1, 2, 0], [2, 1, 0]][s])
    for key in ref:
        assert torch.equal(ref[key], perm[key]), key


def test_batchnorm_buffers_follow_rank_zero():
    """DDP's broadcast_buffers: the running stats are worker 0's, whatever the order."""
    torch.manual_seed(0)
    model = TinyNet()
    layers = C.layers_of(model)
    comp = C.build_compressor("dense", layers, 2)
    cluster = SimulatedCluster(model, comp, layers, torch.nn.functional.cross_entropy)
    opt = GlobalMomentumSGD(model.parameters(), lr=0.1)
    x0, x1 = torch.randn(8, 1, 6, 6), torch.randn(8, 1, 6, 6) * 5
    y = torch.zeros(8, dtype=torch.long)
    twin = TinyNet()
    twin.load_state_dict(model.state_dict())
    twin.train()
    twin(x0)
    cluster.step([(x0, y), (x1, y)], opt, order=[1, 0])
    assert torch.equal(model.bn.running_mean, twin.bn.running_mean)
    assert torch.equal(model.bn.running_var, twin.bn.running_var)


def test_simulation_rejects_bad_batches():
    _, cluster = simulate(lambda s: None, steps=0)
    opt = GlobalMomentumSGD(cluster.model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="3 workers"):
        cluster.step([], opt)
    with pytest.raises(ValueError, match="permutation"):
        batch = (torch.randn(2, 1, 6, 6), torch.zeros(2, dtype=torch.long))
        cluster.step([batch] * 3, opt, order=[0, 0, 1])


# ------------------------------------------------------------------------------ state files

@pytest.mark.parametrize("name", C.COMPRESSORS)
def test_compressor_state_round_trips(tmp_path, name):
    comp = C.build_compressor(name, LAYERS, 2, density=0.2, k=2)
    _, _, _, states = run_workers(comp, steps=4)
    path = save_checkpoint(tmp_path / "c.pt", {"compressor": compressor_state(
        comp, dict(enumerate(states)))})
    loaded = load_checkpoint(path)
    restored = restore_compressor_state(comp, loaded["compressor"], [0, 1], "cpu")
    for w in (0, 1):
        # the restored state compresses the next step to the same bits
        a, _ = C.encode_group(comp, LAYERS, grads_for(77 + w), states[w])
        b, _ = C.encode_group(comp, LAYERS, grads_for(77 + w), restored[w])
        assert torch.equal(a, b)
    other = C.build_compressor(name, LAYERS, 2, density=0.3, k=3)
    if other.config() != comp.config():
        with pytest.raises(CheckpointError, match="differs"):
            restore_compressor_state(other, loaded["compressor"], [0, 1], "cpu")
    with pytest.raises(CheckpointError, match=r"worker\(s\) \[2\]"):
        restore_compressor_state(comp, loaded["compressor"], [0, 2], "cpu")


def test_checkpoint_files_are_validated(tmp_path):
    assert rank_path(tmp_path / "ck.pt", 3).name == "ck.rank3.pt"
    assert rank_path(tmp_path / "ck.pt", None).name == "ck.pt"
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "missing.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="unreadable"):
        load_checkpoint(tmp_path / "junk.pt")
    torch.save({"format": "something else"}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="not a gradblock"):
        load_checkpoint(tmp_path / "other.pt")
    save_checkpoint(tmp_path / "ok.pt", {"run_config": {"lr": 0.1, "k": 1}})
    with pytest.raises(CheckpointError, match=r"k=1 \(now 2\)"):
        load_checkpoint(tmp_path / "ok.pt", {"lr": 0.1, "k": 2})


# ------------------------------------------------------------------------------ non-finite peers

@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_dense_peer_with_nan_or_inf_is_refused(bad):
    comp = C.build_compressor("dense", LAYERS, 2)
    _, msgs, _, _ = run_workers(comp, steps=1)
    poisoned = msgs[1].clone()
    at = LAYERS[0].numel + 2                              # conv.bias, element 2
    poisoned[at] = torch.tensor([bad], dtype=torch.float32).view(torch.int32)[0]
    with pytest.raises(C.NonFinitePacketError,
                       match=r"peer rank 1, layer 1 'conv.bias': dense packet .* 1 NaN/Inf value\(s\), "
                             r"the first at value 2"):
        C.decode_group(comp, LAYERS, [msgs[0], poisoned])


@pytest.mark.parametrize("name", ["topk", "dlgs"])
def test_sparse_peer_with_nan_or_inf_is_refused(name):
    comp = C.build_compressor(name, LAYERS, 2, density=0.25)
    _, msgs, _, _ = run_workers(comp, steps=1)
    poisoned = msgs[0].clone()
    count = int(poisoned[0])
    poisoned[1 + count] = torch.tensor([float("inf")]).view(torch.int32)[0]   # first value
    with pytest.raises(C.NonFinitePacketError, match=r"peer rank 0, layer 0 'conv.weight': sparse"):
        C.decode_group(comp, LAYERS, [poisoned, msgs[1]])
    assert issubclass(C.NonFinitePacketError, C.PacketError)


def test_dense_below_layers_refuse_nan_peers_in_coarse_too():
    comp = C.build_compressor("coarse", LAYERS, 1, dense_below=20)      # biases sent dense
    _, msgs, _, _ = run_workers(comp, steps=1)
    frame0 = zrle.decode_frame(msgs[0].numpy().view(np.uint32)).n_words
    poisoned = msgs[0].clone()
    poisoned[frame0] = torch.tensor([float("nan")]).view(torch.int32)[0]   # conv.bias[0]
    with pytest.raises(C.NonFinitePacketError, match="'conv.bias'"):
        C.decode_group(comp, LAYERS, [poisoned])


# ------------------------------------------------------------------------------ state checks

def test_checkpoint_write_is_atomic(tmp_path, monkeypatch):
    """A save that fails midway leaves the previous checkpoint readable and no temp file."""
    path = save_checkpoint(tmp_path / "ck.pt", {"run_config": {"k": 1}})
    real_save = torch.save

    def half_then_fail(obj, f, *a, **k):
        real_save({"partial": True}, f)
        raise OSError("disk full")
    monkeypatch.setattr(torch, "save", half_then_fail)
    from gradblock.codec.fileio import LEDGER, OutputError     # the writer names what went wrong
    with pytest.raises(OutputError, match="disk full"):
        save_checkpoint(path, {"run_config": {"k": 2}})
    monkeypatch.setattr(torch, "save", real_save)
    assert load_checkpoint(path)["run_config"] == {"k": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["ck.pt", LEDGER])


@pytest.mark.parametrize("name", ["topk", "dlgs", "coarse"])
def test_compressor_state_is_checked_against_the_spec(name):
    from gradblock.shim.exchange.state import check_compressor_state
    comp = C.build_compressor(name, LAYERS, 2, density=0.2, k=2)
    _, _, _, states = run_workers(comp, steps=3)
    saved = compressor_state(comp, dict(enumerate(states)))
    check_compressor_state(comp, LAYERS, saved, [0, 1], compressed_steps=3)
    with pytest.raises(CheckpointError, match=r"'compressor.workers.0.steps.0': .* 3 times, the run "
                                              r"took 4"):
        check_compressor_state(comp, LAYERS, saved, [0, 1], compressed_steps=4)
    spec = comp.state_spec(LAYERS[2])
    assert spec["residual"] == ((torch.int32 if name == "coarse" else torch.float32), (10, 36))
    assert ("threshold" in spec) == (name == "dlgs")
    saved["workers"][1]["layers"][2].pop("residual")
    with pytest.raises(CheckpointError, match=r"'compressor.workers.1.layers.2': missing key\(s\) "
                                              r"\['residual'\]"):
        check_compressor_state(comp, LAYERS, saved, [0, 1])


@pytest.mark.parametrize("name,kw,error", [
    ("coarse", dict(k=0), "KError"), ("coarse", dict(k=1.5), "KError"),
    ("coarse", dict(block_size=0), "BlockSizeError"), ("coarse", dict(block_size=2.5), "BlockSizeError"),
    ("coarse", dict(lmax_log2=99), "LmaxError"), ("coarse", dict(R=float("nan")), "RangeError"),
    ("coarse", dict(R=-1.0), "RangeError"), ("topk", dict(density="match", k=-2), "KError"),
    ("topk", dict(block_size=0), "BlockSizeError"),
])
def test_compressor_parameters_raise_the_contracts_named_errors(name, kw, error):
    """The compressors check k, block size, lmax and range with refmodel.validation, so a bad
    value raises the class every other entry point (CLI, kernels) raises."""
    from gradblock.codec import errors as codec_errors
    from gradblock.refmodel import validation
    from gradblock.shim.compress.compressors import build_compressor, layers_of
    cls = getattr(validation, error, None) or getattr(codec_errors, error)
    model = torch.nn.Linear(4, 3)
    with pytest.raises(cls):
        build_compressor(name, layers_of(model), 2, **kw)
