"""The device codec of issue 29 on the CPU (the same torch ops a GPU runs): bit for bit with the
numpy reference, the reference's errors, and at most one host sync per bucket with an operator
count that does not grow with the number of layers (torch.profiler)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the device codec needs torch")

from hypothesis import given, settings, strategies as st  # noqa: E402

from gradblock.codec import errors as E  # noqa: E402
from gradblock.codec import zrle  # noqa: E402
from gradblock.codec.crc32_torch import crc32_spans  # noqa: E402
from gradblock.golden.exchange import exchange_specs  # noqa: E402
from gradblock.refmodel.exchange import sum_messages  # noqa: E402
from gradblock.refmodel.quantiser import NonFiniteError  # noqa: E402
from gradblock.shim.compress.compressors import (LayerInfo, build_compressor,  # noqa: E402
                                                 decode_group, encode_group)
from gradblock.shim.exchange.device_codec import (ViewMap, bucket_error,  # noqa: E402
                                                  decode_bucket, encode_bucket)
from gradblock.torchstep import plan_group  # noqa: E402
from gradblock.torchstep.bucket import bucket_layout, decode_slots, encode_slot  # noqa: E402

pytestmark = [pytest.mark.torch]

def _cfg(R=10.0):
    from gradblock.torchstep.quantiser import quant_config
    return quant_config(R)


def _i32(words: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(words, dtype=np.uint32).view(np.int32).copy())


def _slots(messages, width=None) -> torch.Tensor:
    width = width or max(m.size for m in messages) + 1
    out = torch.zeros(len(messages), width, dtype=torch.int32)
    for r, m in enumerate(messages):
        out[r, 0] = m.size
        out[r, 1:1 + m.size] = _i32(m)
    return out


# ------------------------------------------------------------------------------ CRC

@settings(max_examples=40, deadline=None)
@given(st.integers(1, 300), st.integers(0, 8), st.integers(0, 2**32 - 1))
def test_crc_of_many_spans_in_one_pass_is_zlibs(W, cuts, seed):
    rng = np.random.default_rng(seed)
    b = np.unique(np.concatenate([[0, W], rng.integers(1, W, size=cuts) if W > 1 else []])
                  ).astype(np.int64)
    u = rng.integers(0, 2**32, size=(2, W), dtype=np.uint64).astype(np.int64)
    starts, ends = np.tile(b[:-1], (2, 1)), np.tile(b[1:], (2, 1))
    got = crc32_spans(torch.from_numpy(u), torch.from_numpy(starts), torch.from_numpy(ends))
    for r in range(2):
        for j in range(starts.shape[1]):
            want = zrle.crc32_words(u[r, starts[r, j]:ends[r, j]].astype(np.uint32))
            assert int(got[r, j]) == want


# ------------------------------------------------------------------------------ encode

@st.composite
def buckets(draw):
    nl = draw(st.integers(1, 5))
    shapes = [tuple(draw(st.lists(st.integers(1, 9), min_size=1, max_size=2))) for _ in range(nl)]
    framed = [draw(st.booleans()) for _ in range(nl)]
    lmax_log2 = draw(st.sampled_from([1, 2, 3, 8]))
    seed = draw(st.integers(0, 2**32 - 1))
    return shapes, framed, lmax_log2, seed


@settings(max_examples=60, deadline=None)
@given(buckets(), st.integers(0, 3))
def test_encode_slot_is_the_reference_frames_and_packets(b, extra):
    shapes, framed, lmax_log2, seed = b
    rng = np.random.default_rng(seed)
    cfg = _cfg()
    parts, payloads, dense = [], [], []
    for j, (s, f) in enumerate(zip(shapes, framed)):
        if f:
            p = (rng.integers(-3, 4, size=s) * (rng.random(s) < rng.random())).astype(np.int32)
            payloads.append(torch.from_numpy(p).reshape(-1))
            parts.append(zrle.encode_frame(p, j, 10.0, lmax_log2).view(np.int32))
        else:
            d = rng.standard_normal(s).astype(np.float32).view(np.int32).reshape(-1)
            dense.append(torch.from_numpy(d))
            parts.append(d)
    msg = np.concatenate(parts)
    width = msg.size + 1 + extra
    layout = bucket_layout(framed, [int(np.prod(s)) for s in shapes], range(len(shapes)), cfg, 1)
    fr = [s for s, f in zip(shapes, framed) if f]
    plan = plan_group(fr, k=1, layer_ids=[j for j, f in enumerate(framed) if f], R=cfg,
                      lmax_log2=lmax_log2) if fr else None
    payload = torch.cat(payloads) if payloads else torch.zeros(0, dtype=torch.int32)
    slot, _ = encode_slot(layout, plan, payload, torch.cat(dense) if dense else None, width,
                          1 << lmax_log2)
    want = np.zeros(width, np.int32)
    want[0], want[1:1 + msg.size] = msg.size, msg
    assert np.array_equal(slot.numpy(), want)


# ------------------------------------------------------------------------------ decode

def _mutate(rng, msg: np.ndarray) -> np.ndarray:
    m = msg.copy()
    how = rng.integers(0, 5)
    if how == 0 and m.size:
        m[rng.integers(0, m.size)] ^= np.uint32(1 << int(rng.integers(0, 32)))
    elif how == 1 and m.size:
        m = m[:rng.integers(0, m.size)]
    elif how == 2 and m.size:
        m[rng.integers(0, m.size)] = np.uint32(rng.integers(0, 4))
    elif how == 3:
        m = np.append(m, np.uint32(rng.integers(0, 5)))
    elif m.size:
        i = rng.integers(0, m.size)
        m[i] = np.uint32((int(m[i]) + int(rng.integers(-2, 3))) & 0xFFFFFFFF)
    return m


def _compressor_bucket(rng, dense_below):
    nl = int(rng.integers(1, 5))
    shapes = [tuple(int(x) for x in rng.integers(1, 10, size=rng.integers(1, 3))) for _ in range(nl)]
    layers = [LayerInfo(i, f"l{i}", s) for i, s in enumerate(shapes)]
    n = int(rng.integers(1, 4))
    comp = build_compressor("coarse", layers, n, k=float(rng.choice([1, 0.5, 1.0])),
                            dense_below=dense_below, lmax_log2=int(rng.choice([1, 2, 8])))
    comp.host_fast = False                     # the reference decoder on the host
    msgs = []
    for _ in range(n):
        grads = [torch.from_numpy((rng.standard_normal(s) * rng.choice([0.01, 1, 20])
                                   * (rng.random(s) < 0.5)).astype(np.float32)) for s in shapes]
        msgs.append(encode_group(comp, layers, grads, comp.new_worker_state())[0].numpy()
                    .view(np.uint32))
    return comp, layers, msgs


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([0, 5]), st.booleans())
def test_decode_is_the_references_sums_and_errors(seed, dense_below, mutate):
    rng = np.random.default_rng(seed)
    comp, layers, msgs = _compressor_bucket(rng, dense_below)
    if mutate:
        r = int(rng.integers(0, len(msgs)))
        msgs[r] = _mutate(rng, msgs[r])
    try:
        want, err = decode_group(comp, layers, [_i32(m) for m in msgs]), None
    except Exception as e:  # noqa: BLE001 - compared below
        want, err = None, e
    width = max(m.size for m in msgs) + 1 + int(rng.integers(0, 3))
    slots = _slots(msgs, width)
    layout = bucket_layout([not comp.sends_dense(x) for x in layers], [x.numel for x in layers],
                           [x.index for x in layers], comp.cfg, comp.n_workers)
    flat, bad = decode_slots(layout, slots)
    if err is not None:
        assert bool(bad), f"the device walk accepted what the reference refuses: {err!r}"
    elif not bool(bad):
        assert torch.equal(flat.view(torch.int32),
                           torch.cat([a.reshape(-1) for a in want]).view(torch.int32))
    if bool(bad):               # the hook's error path: the reference's class and message
        views = [torch.zeros(x.shape) for x in layers]
        sent = SimpleNamespace(layers=layers, views=views)
        if err is not None:
            with pytest.raises(Exception) as got:
                bucket_error(comp, sent, slots, 0, comp.new_worker_state())
            assert type(got.value) is type(err) and str(got.value) == str(err)
        else:                   # a false alarm: the reference's averages are written
            bucket_error(comp, sent, slots, 0, comp.new_worker_state())
            assert torch.equal(torch.cat([v.reshape(-1) for v in views]).view(torch.int32),
                               torch.cat([a.reshape(-1) for a in want]).view(torch.int32))


@pytest.mark.parametrize("quick", [True, False])
def test_golden_exchange_cases(quick):
    """The golden exchange cases (docs/golden.md): N workers' frames of one layer, the
    reference's int64 sums or its error -- the device walk sums the same or refuses."""
    for spec in exchange_specs(0, quick):
        try:
            want, err = sum_messages(spec.frames, [spec.n])[0], None
        except (E.FrameError, ValueError) as e:
            want, err = None, e
        try:
            h = zrle.read_header(spec.frames[0])
            layer_id, rbits = h.layer_id, h.range_bits
        except E.FrameError:
            layer_id, rbits = 0, _cfg().range_bits
        cfg = type("Cfg", (), {"range_bits": rbits,
                               "range": float(np.uint32(rbits).view(np.float32))})()
        layout = bucket_layout([True], [spec.n], [layer_id], cfg, len(spec.frames))
        acc, bad = decode_slots(layout, _slots(spec.frames), sums=True)
        if err is not None:
            assert bool(bad), (spec.name, err)
        else:
            assert not bool(bad), spec.name
            assert np.array_equal(acc.numpy(), want), spec.name


# ------------------------------------------------------------------------------ the bucket path

def _views(shapes, channels_last=False):
    flat = torch.zeros(sum(int(np.prod(s)) for s in shapes))
    out, at = [], 0
    for s in shapes:
        n = int(np.prod(s))
        v = flat[at:at + n]
        if channels_last and len(s) == 4:       # NHWC memory, NCHW shape
            n_, c, h, w = s
            v = v.view(n_, h, w, c).permute(0, 3, 1, 2)
        else:
            v = v.view(s)
        out.append(v)
        at += n
    return flat, out


@pytest.mark.parametrize("channels_last", [False, True])
def test_view_map_keeps_strides_with_one_op_per_storage(channels_last):
    shapes = [(4, 3, 2, 2), (4,), (5, 4, 3, 3), (5,)]
    flat, views = _views(shapes, channels_last)
    vm = ViewMap(views)
    logical = torch.arange(vm.total, dtype=torch.float32)
    vm.scatter(logical)
    assert torch.equal(torch.cat([v.reshape(-1) for v in views]), logical)
    assert torch.equal(vm.gather(), logical)
    assert (vm.parts[0][1] is not None) == channels_last       # an index only when permuted


@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "graphs"])
@pytest.mark.parametrize("momentum,dense_below", [(0.0, 0), (0.0, 20), (0.9, 0)])
def test_device_bucket_equals_the_host_path_with_state_carried(momentum, dense_below, graphs):
    # graphs: the CUDA-graph plumbing (static inputs and outputs, state in the graph's
    # tensors), run eagerly on the CPU: the same bits over steps with the state carried
    shapes = [(8, 3, 3, 3), (8,), (16, 8, 3, 3), (16,), (10, 16), (10,)]
    layers = [LayerInfo(i, f"l{i}", s) for i, s in enumerate(shapes)]
    n = 3
    comp = build_compressor("coarse", layers, n, k=0.5, dense_below=dense_below,
                            local_momentum=momentum)
    comp.host_fast = False              # the reference decoder (no numba start-up here)
    comp.graphs = graphs
    host_ws = [comp.new_worker_state() for _ in range(n)]
    dev_ws = [comp.new_worker_state() for _ in range(n)]
    bufs = [_views(shapes, channels_last=True) for _ in range(n)]
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        grads = [[torch.randn(s, generator=g) * 0.5 for s in shapes] for _ in range(n)]
        want = decode_group(comp, layers, [encode_group(comp, layers, grads[r], host_ws[r])[0]
                                           for r in range(n)])
        width = comp.message_bound(layers, dev_ws[0]) + 1
        sends = []
        for r, (_, views) in enumerate(bufs):
            for v, gr in zip(views, grads[r]):
                v.copy_(gr)
            sends.append(encode_bucket(comp, layers, views, dev_ws[r], width))
        gathered = torch.stack([s.slot for s in sends])
        for r, (_, views) in enumerate(bufs):
            assert not bool(decode_bucket(sends[r], gathered))
            for v, a in zip(views, want):
                assert torch.equal(v.contiguous().view(torch.int32), a.view(torch.int32))
        for r in range(n):
            for lay in layers:
                for key, t in host_ws[r].layers.get(lay.index, {}).items():
                    assert torch.equal(t, dev_ws[r].layers[lay.index][key])


@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "graphs"])
def test_nan_is_the_references_error_and_leaves_the_state(graphs):
    shapes = [(6, 4), (6,)]
    layers = [LayerInfo(i, f"l{i}", s) for i, s in enumerate(shapes)]
    comp = build_compressor("coarse", layers, 2, k=1)
    comp.host_fast = False              # the torch reference path (no numba start-up here)
    comp.graphs = graphs                # then the state before the step is the graph's input
    ws = comp.new_worker_state()
    grads = [torch.ones(s) for s in shapes]
    sent0 = encode_bucket(comp, layers, grads, ws, comp.message_bound(layers, ws) + 1)
    sent0 = encode_bucket(comp, layers, grads, ws, sent0.width)   # state from a replay
    before = {i: {k: v.clone() for k, v in d.items()} for i, d in ws.layers.items()}
    steps = dict(ws.steps)
    bad = [g.clone() for g in grads]
    bad[0][2, 1] = float("nan")
    bad[0][5, 3] = float("nan")
    with pytest.raises(NonFiniteError) as want:
        encode_group(comp, layers, bad, comp.new_worker_state())
    sent = encode_bucket(comp, layers, bad, ws, sent0.width)
    gathered = torch.stack([sent.slot, sent0.slot])
    assert bool(decode_bucket(sent, gathered))
    with pytest.raises(NonFiniteError) as got:
        bucket_error(comp, sent, gathered, 0, ws)
    assert str(got.value) == str(want.value)
    assert ws.steps == steps
    for i, d in before.items():
        for k, v in d.items():
            assert torch.equal(ws.layers[i][k], v)
    if graphs:                          # and the next step starts from it
        ref = comp.new_worker_state()
        encode_group(comp, layers, grads, ref)
        encode_group(comp, layers, grads, ref)
        want = encode_group(comp, layers, grads, ref)[0]
        got = encode_bucket(comp, layers, grads, ws, sent0.width).slot
        assert torch.equal(got[1:1 + int(got[0])], want)


# ------------------------------------------------------------------------------ counts

def _equal_size_buckets(n_layers: int, total: int):
    """`n_layers` conv-like tensors of `total` elements together."""
    per = total // n_layers
    return [(per,)] * (n_layers - 1) + [(total - per * (n_layers - 1),)]


def test_resnet50_bucket_set_syncs_and_ops_per_bucket():
    """ResNet-50's 161 tensors (widths / 16) in DDP's buckets: the device path reads the host
    at most once per bucket (its validity flag) and calls at most OPS_MAX operators per
    bucket; the path before it (torch encode + host decode) synced per layer."""
    from gradblock.bench.device_codec import bucket_counts, ddp_buckets, resnet50_shapes
    OPS_MAX, SYNCS_MAX = 900, 1
    shapes = resnet50_shapes(16)
    assert len(shapes) == 161
    buckets = ddp_buckets(shapes, cap_mb=25.0 / 256, first_mb=1.0 / 256)
    assert len(buckets) >= 4
    for idx in buckets:
        c = bucket_counts([shapes[i] for i in idx], "device")
        assert c["syncs"] <= SYNCS_MAX, (len(idx), c)
        assert c["ops"] <= OPS_MAX, (len(idx), c["ops"], c["by_op"])


def test_operator_count_does_not_grow_with_the_layer_count():
    """A 20-layer and a 160-layer bucket of the same elements (their slots' widths within the
    same power of two: the walk's rounds and the CRC's digits follow log2 of the width): the
    same operators, one host read each."""
    from gradblock.bench.device_codec import bucket_counts
    from gradblock.shim.compress.compressors import build_compressor as bc
    total = 160 * 96
    counts = {}
    for nl in (20, 160):
        shapes = _equal_size_buckets(nl, total)
        layers = [LayerInfo(i, "x", s) for i, s in enumerate(shapes)]
        comp = bc("coarse", layers, 2, k=0.25)
        counts[nl] = (bucket_counts(shapes, "device", k=0.25),
                      (comp.message_bound(layers, comp.new_worker_state()) + 1).bit_length())
    (c20, w20), (c160, w160) = counts[20], counts[160]
    assert w20 == w160, "pick sizes whose slot widths share a power of two"
    assert c20["syncs"] == c160["syncs"] == 1
    assert c160["ops"] == c20["ops"], (c20["by_op"], c160["by_op"])


# ------------------------------------------------------------------------------ determinism

class _NoDeterministicKernel(torch.autograd.Function):
    """Stands in for a CUDA op without a deterministic backward (torch's own message)."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        raise RuntimeError("adaptive_avg_pool2d_backward_cuda does not have a deterministic "
                           "implementation, but you set 'torch.use_deterministic_algorithms"
                           "(True)'. You can turn off determinism just for this operation...")


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 2)

    def forward(self, x):
        return _NoDeterministicKernel.apply(self.fc(x))


def test_a_model_without_a_deterministic_backward_is_refused_by_name():
    from gradblock.shim.setup.problem import (NondeterministicModelError,
                                              check_deterministic_backward)
    model, x = _Net(), torch.ones(2, 3)
    was = torch.are_deterministic_algorithms_enabled()
    try:
        torch.use_deterministic_algorithms(False)
        check_deterministic_backward(model, x, "net")           # determinism off: not probed
        torch.use_deterministic_algorithms(True)
        with pytest.raises(NondeterministicModelError,
                           match="model 'net': adaptive_avg_pool2d_backward_cuda has no "
                                 "deterministic CUDA kernel"):
            check_deterministic_backward(model, x, "net")
        assert model.fc.weight.grad is None                     # the probe ran on a copy
        check_deterministic_backward(torch.nn.Linear(3, 2), x, "linear")   # a fine model
    finally:
        torch.use_deterministic_algorithms(was)


# ------------------------------------------------------------------------------ bf16 / fp16

@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("codec", ["host", "device"])
def test_half_gradients_widen_exactly_and_round_the_average_to_nearest_even(dtype, codec):
    """docs/spec.md §1.2: a bfloat16 / float16 gradient is its float32 value through the
    contract; the float32 average is rounded to the parameter's dtype (RNE)."""
    from gradblock.shim.exchange.device_codec import write_views
    shapes = [(6, 4, 3, 3), (6,), (10, 6)]
    layers = [LayerInfo(i, f"l{i}", s) for i, s in enumerate(shapes)]
    comp = build_compressor("coarse", layers, 2, k=0.5, dense_below=8)
    comp.host_fast = False
    g = torch.Generator().manual_seed(3)
    grads = [[(torch.randn(s, generator=g) * 0.3).to(dtype) for s in shapes] for _ in range(2)]
    ref_ws = [comp.new_worker_state() for _ in range(2)]
    want = decode_group(comp, layers, [encode_group(comp, layers, [x.float() for x in grads[r]],
                                                    ref_ws[r])[0] for r in range(2)])
    ws = [comp.new_worker_state() for _ in range(2)]
    views = [[x.clone() for x in grads[r]] for r in range(2)]
    if codec == "device":
        width = comp.message_bound(layers, ws[0]) + 1
        sends = [encode_bucket(comp, layers, views[r], ws[r], width) for r in range(2)]
        gathered = torch.stack([s.slot for s in sends])
        assert not bool(decode_bucket(sends[0], gathered))
    else:
        msgs = [encode_group(comp, layers, views[r], ws[r])[0] for r in range(2)]
        write_views(views[0], decode_group(comp, layers, msgs))
    for v, a in zip(views[0], want):
        assert v.dtype == dtype
        assert torch.equal(v.view(torch.int16), a.to(dtype).view(torch.int16))
    for r in range(2):
        for lay in layers:
            for key, t in ref_ws[r].layers.get(lay.index, {}).items():
                assert torch.equal(t, ws[r].layers[lay.index][key])


def test_skip_policy_makes_every_rank_skip_and_keeps_the_state():
    shapes = [(6, 4), (6,)]
    layers = [LayerInfo(i, f"l{i}", s) for i, s in enumerate(shapes)]
    comp = build_compressor("coarse", layers, 2, k=1)
    comp.nonfinite = "skip"
    ws = [comp.new_worker_state() for _ in range(2)]
    width = comp.message_bound(layers, ws[0]) + 1
    ok = [torch.ones(s) for s in shapes]
    for r in range(2):                       # a first step, so there is state to keep
        encode_bucket(comp, layers, [x.clone() for x in ok], ws[r], width)
    before = [{i: dict(d) for i, d in w.layers.items()} for w in ws]
    grads = [[x.clone() for x in ok], [x.clone() for x in ok]]
    grads[1][0][1, 2] = float("inf")
    sends = [encode_bucket(comp, layers, grads[r], ws[r], width) for r in range(2)]
    gathered = torch.stack([s.slot for s in sends])
    for r in range(2):
        assert bool(decode_bucket(sends[r], gathered))
        bucket_error(comp, sends[r], gathered, r, ws[r])      # no error: the bucket is skipped
        assert all(torch.isnan(v).all() for v in grads[r])
        for i, d in before[r].items():
            for k, v in d.items():
                assert ws[r].layers[i][k] is v


# ------------------------------------------------------------------------------ on a GPU

cuda = pytest.mark.skipif(not torch.cuda.is_available(),
                          reason="no CUDA device (torch.cuda.is_available() is False): the CPU "
                                 "cases above run the same torch ops")


@cuda
def test_cuda_bucket_is_the_references_bits_without_a_host_sync():
    """On a GPU: channels_last bucket views, dense and framed layers, state carried over two
    steps; the second step's encode, decode and write run under torch's sync debug mode set to
    "error" (any synchronising call raises), then the one flag is read."""
    shapes = [(8, 4, 3, 3), (8,), (16, 8, 3, 3), (16,), (10, 16 * 9), (10,)]
    layers = [LayerInfo(i, f"l{i}", s) for i, s in enumerate(shapes)]
    n = 2
    comp = build_compressor("coarse", layers, n, k=0.5, dense_below=12)
    comp.host_fast = False
    host_ws = [comp.new_worker_state() for _ in range(n)]
    dev_ws = [comp.new_worker_state() for _ in range(n)]
    flats = [torch.zeros(sum(int(np.prod(s)) for s in shapes), device="cuda") for _ in range(n)]
    bufs = [(flat, _views_on(flat, shapes)) for flat in flats]
    g = torch.Generator().manual_seed(5)
    for step in range(2):
        grads = [[torch.randn(s, generator=g) * 0.5 for s in shapes] for _ in range(n)]
        want = decode_group(comp, layers, [encode_group(comp, layers, grads[r], host_ws[r])[0]
                                           for r in range(n)])
        for r, (_, views) in enumerate(bufs):
            for v, gr in zip(views, grads[r]):
                v.copy_(gr)
        width = comp.message_bound(layers, dev_ws[0]) + 1
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error" if step else "default")
        try:
            sends = [encode_bucket(comp, layers, bufs[r][1], dev_ws[r], width) for r in range(n)]
            gathered = torch.stack([s.slot for s in sends])
            bads = [decode_bucket(sends[r], gathered) for r in range(n)]
        finally:
            torch.cuda.set_sync_debug_mode("default")
        assert not any(bool(b) for b in bads)
        for r, (_, views) in enumerate(bufs):
            for v, a in zip(views, want):
                assert torch.equal(v.cpu().contiguous().view(torch.int32), a.view(torch.int32))


def _views_on(flat, shapes):
    out, at = [], 0
    for s in shapes:
        n = int(np.prod(s))
        v = flat[at:at + n]
        if len(s) == 4:
            n_, c, h, w = s
            v = v.view(n_, h, w, c).permute(0, 3, 1, 2)
        else:
            v = v.view(s)
        out.append(v)
        at += n
    return out


def test_empty_layers_and_rows_of_different_lengths():
    """Frames of 0 elements (header then trailer, no token) between dense packets of 0 or
    more words, rows of different lengths: the walk jumps over an empty frame per row."""
    cfg = _cfg()
    rng = np.random.default_rng(0)
    for _ in range(60):
        sizes = [int(rng.choice([0, 3, 7])) for _ in range(4)]
        framed = [bool(rng.random() < 0.8) for _ in sizes]
        msgs, sums = [], [np.zeros(n, np.int64) for n in sizes]
        for _ in range(2):
            parts = []
            for j, (n, f) in enumerate(zip(sizes, framed)):
                if f:
                    p = rng.integers(-2, 3, size=n).astype(np.int32)
                    sums[j] += p
                    parts.append(zrle.encode_frame(p, j, 10.0, 8))
                else:
                    parts.append(rng.standard_normal(n).astype(np.float32).view(np.uint32))
            msgs.append(np.concatenate(parts))
        layout = bucket_layout(framed, sizes, range(4), cfg, 2)
        acc, bad = decode_slots(layout, _slots(msgs), sums=True)
        assert not bool(bad), (sizes, framed)
        want = [s for s, f in zip(sums, framed) if f]
        assert np.array_equal(acc.numpy(), np.concatenate(want) if want else np.zeros(0))


def test_allreduce_exchange_takes_half_gradients_as_their_float32_values():
    from gradblock.shim.exchange.global_step import prepare_group
    layers = [LayerInfo(0, "a", (8, 8)), LayerInfo(1, "b", (8,))]
    comp = build_compressor("coarse", layers, 2, k=1, exchange="allreduce", dense_below=10)
    g = torch.Generator().manual_seed(2)
    half = [torch.randn(8, 8, generator=g).bfloat16(), torch.randn(8, generator=g).half()]
    a = prepare_group(comp, layers, half, comp.new_worker_state())
    b = prepare_group(comp, layers, [x.float() for x in half], comp.new_worker_state())
    assert torch.equal(a.prep.vector, b.prep.vector)
    assert torch.equal(a.dense_message, b.dense_message)
