"""The exchange's fast paths (shim/compress/fastpath.py, shim/exchange/hook.py): the ZRLE frame-size bound that
lets a bucket be one fixed-width all_gather, the host (numba) encode/decode against the torch
path, the slot's length word refused by name, and the CUDA variant of the DDP self-check."""
from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch", reason="the hook needs torch")

from own_process import one_rank_gloo_group, run_in_own_process  # noqa: E402

from gradblock.codec import errors as E  # noqa: E402
from gradblock.codec import zrle_numba  # noqa: E402
from gradblock.shim.compress.compressors import (PacketError, build_compressor, decode_group,  # noqa: E402
                                        encode_group, layers_of, LayerInfo)
from gradblock.codec.zrle import body_words_max, frame_words_bound  # noqa: E402
from gradblock.shim.compress.warmup import Warmup  # noqa: E402

pytestmark = [pytest.mark.torch]


def _words(payload: np.ndarray, lmax_log2: int) -> int:
    return int(zrle_numba.encode_frame(payload.astype(np.int32), 0, 10.0, lmax_log2).size)


# ------------------------------------------------------------------ the bound, exhaustively

@pytest.mark.parametrize("lmax_log2", [1, 2, 3])
def test_whole_layer_bound_is_the_exact_maximum(lmax_log2):
    """Every 0/1 pattern of n <= 11 elements: the longest real frame is the bound, exactly."""
    for n in range(0, 12):
        longest = max(_words(np.array(bits, dtype=np.int32), lmax_log2)
                      for bits in itertools.product((0, 1), repeat=n))
        assert longest == 7 + body_words_max(n, 1 << lmax_log2), n


@pytest.mark.parametrize("lmax_log2", [1, 2, 8])
@pytest.mark.parametrize("B,nb", [(1, 6), (2, 5), (3, 4), (4, 3), (5, 2)])
def test_block_bound_holds_and_is_attained_with_gaps(lmax_log2, B, nb):
    """Payloads nonzero on at most k_eff of nb blocks (every pattern): never above the bound,
    and the bound is reached when the blocks can sit apart (nb >= 2 k_eff)."""
    n = B * nb
    longest = {k: 0 for k in range(1, nb + 1)}
    for bits in itertools.product((0, 1), repeat=n):
        p = np.array(bits, dtype=np.int32)
        used = int(np.count_nonzero(p.reshape(nb, B).any(axis=1)))
        words = _words(p, lmax_log2)
        for k in range(max(used, 1), nb + 1):
            longest[k] = max(longest[k], words)
    for k, got in longest.items():
        bound = frame_words_bound(n, B, k, lmax_log2)
        assert got <= bound, (k, got, bound)
        if nb >= 2 * k or k == nb:
            assert got == bound, (k, got, bound)


@given(st.integers(1, 6), st.integers(1, 40), st.integers(1, 12), st.integers(1, 9),
       st.sampled_from(["random", "alternate", "pairs", "dense"]), st.integers(0, 2**31))
@settings(max_examples=60)
def test_real_coarse_frames_never_exceed_the_packet_bound(rows, cols, k, lmax_log2, kind, seed):
    """CoarseCompressor's frames, adversarial payloads included (alternating zeros inside the
    selected blocks, with and without a carried residual), stay within packet_bound."""
    rng = np.random.default_rng(seed)
    g = rng.normal(0, 0.5, (rows, cols)).astype(np.float32)
    if kind == "alternate":
        g.reshape(-1)[1::2] = 0
    elif kind == "pairs":
        g.reshape(-1)[2::3] = 0
    layer = LayerInfo(0, "w", (rows, cols))
    for block_size in (None, 1, 3):
        comp = build_compressor("coarse", [layer], 1, k=k, block_size=block_size,
                                lmax_log2=lmax_log2)
        ws = comp.new_worker_state()
        for step in range(2):
            bound = comp.packet_bound(layer, ws)
            assert comp.message_bound([layer], ws) == bound
            frame, _ = comp.encode(layer, torch.from_numpy(g * (1 + step)), ws)
            assert frame.numel() <= bound, (frame.numel(), bound)


def test_sparse_and_dense_packets_have_their_bound_exactly():
    layers = [LayerInfo(0, "a", (7, 9)), LayerInfo(1, "b", (5,))]
    g = [torch.randn(7, 9), torch.randn(5)]
    for name in ("dense", "topk", "dlgs"):
        comp = build_compressor(name, layers, 1, k=2, density=0.1, interval=3)
        ws = comp.new_worker_state()
        for step in range(4):
            bound = comp.message_bound(layers, ws)
            msg, _ = encode_group(comp, layers, [t * (step + 1) for t in g], ws)
            if name == "dlgs" and step % 3:
                assert bound is None          # between threshold steps: no useful bound
            else:
                assert msg.numel() == bound, (name, step)


# ------------------------------------------------------------------ host path == torch path

def _pair(name="coarse", layers=None, **kw):
    fast = build_compressor(name, layers, 3, **kw)
    slow = build_compressor(name, layers, 3, **kw)
    slow.host_fast = False
    return fast, slow


def _same_state(a, b):
    assert a.steps == b.steps
    assert a.layers.keys() == b.layers.keys()
    for i in a.layers:
        assert a.layers[i].keys() == b.layers[i].keys()
        for k in a.layers[i]:
            assert torch.equal(a.layers[i][k], b.layers[i][k]), (i, k)


def _run_both(fast, slow, layers, grad_steps):
    wf = [fast.new_worker_state() for _ in range(3)]
    wt = [slow.new_worker_state() for _ in range(3)]
    for grads in grad_steps:
        mf, mt = [], []
        for w in range(3):
            g = [t * (w + 1) for t in grads]
            a, sa = encode_group(fast, layers, g, wf[w])
            b, sb = encode_group(slow, layers, g, wt[w])
            assert torch.equal(a, b) and sa == sb
            _same_state(wf[w], wt[w])
            mf.append(a)
            mt.append(b)
        for x, y in zip(decode_group(fast, layers, mf), decode_group(slow, layers, mt)):
            assert torch.equal(x, y)


@given(st.lists(st.tuples(st.integers(1, 6), st.integers(1, 30)), min_size=1, max_size=4),
       st.sampled_from([1, 2, 0.5]), st.sampled_from([None, 2, 7]), st.sampled_from([2, 8]),
       st.sampled_from([0.0, 0.9]), st.sampled_from([0, 20]), st.booleans(),
       st.integers(0, 2**31))
@settings(max_examples=25)
def test_host_path_is_bit_identical_to_torch(shapes, k, block_size, lmax_log2, m, dense_below,
                                              warm, seed):
    """Frames, statistics, residuals and velocities, and the decoded averages of 3 workers over
    3 steps: the numba host path and the torch path agree bit for bit."""
    layers = [LayerInfo(i, f"l{i}", s) for i, s in enumerate(shapes)]
    fast, slow = _pair(layers=layers, k=k, block_size=block_size, lmax_log2=lmax_log2,
                       local_momentum=m, dense_below=dense_below,
                       warmup=Warmup(2, 0.5) if warm else None)
    gen = torch.Generator().manual_seed(seed)
    steps = []
    for _ in range(3):
        g = [torch.randn(s, generator=gen) * 3.0 for s in shapes]
        g[0].reshape(-1)[::2] = 0.0                  # alternating zeros in the first layer
        steps.append(g)
    _run_both(fast, slow, layers, steps)


def test_host_path_on_real_lenet_gradients():
    import torch.nn.functional as F
    from gradblock.shim.setup.models import build_model
    model = build_model("lenet5", seed=0)
    layers = layers_of(model)
    gen = torch.Generator().manual_seed(1)
    steps = []
    for _ in range(3):
        model.zero_grad()
        F.cross_entropy(model(torch.randn(16, 1, 28, 28, generator=gen)),
                        torch.randint(0, 10, (16,), generator=gen)).backward()
        steps.append([p.grad.clone() for p in model.parameters()])
    for kw in (dict(k=1), dict(k=2, local_momentum=0.9), dict(k=1, dense_below=200)):
        fast, slow = _pair(layers=layers, **kw)
        _run_both(fast, slow, layers, steps)


def test_host_path_raises_what_torch_raises():
    """Corrupted and truncated messages: the same class and message from both decoders; a NaN
    gradient: the same NonFiniteError naming the layer, and no state change."""
    from gradblock.refmodel.quantiser import NonFiniteError
    layers = [LayerInfo(0, "a", (4, 6)), LayerInfo(1, "b", (9,)), LayerInfo(2, "c", (3, 5))]
    fast, slow = _pair(layers=layers, k=1, dense_below=10)
    gen = torch.Generator().manual_seed(3)
    msgs = [encode_group(fast, layers, [torch.randn(lay.shape, generator=gen) for lay in layers],
                         fast.new_worker_state())[0] for _ in range(3)]
    rng = np.random.default_rng(5)
    cases = 0
    for trial in range(120):
        bad = [m.clone() for m in msgs]
        victim = int(rng.integers(3))
        w = bad[victim]
        if trial % 4 == 0:
            bad[victim] = w[:int(rng.integers(w.numel()))]
        elif trial % 4 == 1:
            bad[victim] = torch.cat([w, torch.zeros(1 + trial % 3, dtype=torch.int32)])
        else:
            w[int(rng.integers(w.numel()))] ^= int(1 << int(rng.integers(31)))
        errs = []
        for comp in (fast, slow):
            try:
                decode_group(comp, layers, bad)
                errs.append(None)
            except (E.FrameError, PacketError) as e:
                errs.append((type(e), str(e)))
        assert errs[0] == errs[1], errs
        cases += errs[0] is not None
    assert cases > 100
    g = [torch.randn(lay.shape) for lay in layers]
    g[2].reshape(-1)[4] = float("nan")
    for comp in (fast, slow):
        ws = comp.new_worker_state()
        with pytest.raises(NonFiniteError, match=r"1 NaN value\(s\) in c, first at flat index 4"):
            encode_group(comp, layers, g, ws)
        assert not ws.layers and not ws.steps


# ------------------------------------------------------------------ the slot's length word

def case_slot_length_word_is_refused_naming_the_peer():
    """A message longer than its slot (a fault-injection filter appends words) goes out cut,
    with its true length: the decode refuses it as a PacketError naming the peer rank."""
    import torch.nn.functional as F
    from gradblock.shim.exchange.ddp_check import make_model
    from gradblock.shim.exchange.hook import register
    with one_rank_gloo_group():
        model = make_model("cpu")
        ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.001)

        def grow(message, layers, sender):
            return torch.cat([message, torch.ones(5000, dtype=torch.int32)])

        state = register(ddp, build_compressor("coarse", layers_of(model), 1, k=1),
                         outgoing_filter=grow)
        g = torch.Generator().manual_seed(0)
        x, y = torch.randn(8, 1, 8, 8, generator=g), torch.randint(0, 10, (8,), generator=g)
        with pytest.raises(PacketError, match=r"peer rank 0: message length word \d+ does not "
                                              r"fit its slot of \d+ words"):
            state.backward(F.cross_entropy(ddp(x), y))
        # a well-formed step: one collective per bucket, padded bytes = the slots
        state.outgoing_filter = None
        state.reset_step()
        ddp.zero_grad()
        state.backward(F.cross_entropy(ddp(x), y))
        assert 0 < state.stats.bytes_sent < state.padded_bytes


def test_slot_length_word_is_refused_naming_the_peer():
    run_in_own_process("test_hook_fastpath", "case_slot_length_word_is_refused_naming_the_peer")


# ------------------------------------------------------------------ CUDA (skipped here)

def test_ddp_self_check_on_cuda(tmp_path):
    """The DDP self-check on NCCL (2 ranks when 2 GPUs, else 1): the hook equals the simulation
    computed on the same device, bit for bit, for every compressor."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the CPU self-check (tests/test_ddp_hook.py) covers the hook")
    from test_ddp_hook import torchrun
    nproc = min(2, torch.cuda.device_count())
    proc = torchrun(["gradblock.shim.exchange.ddp_check", "--out", str(tmp_path), "--device", "cuda",
                     "--corrupt-rank", str(nproc - 1)], nproc=nproc, timeout=600)
    for r in range(nproc):
        rep = json.loads((tmp_path / f"rank{r}.json").read_text())
        assert rep["ok"], rep
    assert proc.returncode == 0, proc.stderr
