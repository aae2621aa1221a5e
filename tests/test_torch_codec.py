"""The torch backend (torchstep/, codec/zrle_torch.py, codec/crc32_torch.py) == the numpy reference,
bit for bit, on CPU and (when present) CUDA."""
from __future__ import annotations

import zlib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

torch = pytest.importorskip("torch", reason="the torch codec needs torch")

from gradblock.codec import errors as E  # noqa: E402
from gradblock import torchstep as tc  # noqa: E402
from gradblock.codec import crc32_torch, scan_torch, zrle_torch  # noqa: E402
from gradblock.codec import zrle  # noqa: E402
from gradblock.refmodel.compress import compress_layer as ref_compress  # noqa: E402
from gradblock.refmodel.quantiser import QMAX, NonFiniteError, QuantConfig  # noqa: E402
from gradblock.refmodel.quantiser import average as ref_average  # noqa: E402
from gradblock.refmodel.quantiser import dequantise as ref_dequantise  # noqa: E402
from gradblock.refmodel.quantiser import quantise as ref_quantise  # noqa: E402

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module", params=["cpu", "cuda"])
def device(request):
    if request.param == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device (torch.cuda.is_available() is False): CPU cases cover the codec")
    return torch.device(request.param)


def t(a: np.ndarray, device) -> "torch.Tensor":
    return torch.from_numpy(np.array(a, order="C")).to(device)   # keeps 0-d arrays 0-d


def u32(words: "torch.Tensor") -> np.ndarray:
    return zrle_torch.frame_to_numpy(words)


def nan_free_bits(words: list[int]) -> np.ndarray:
    b = np.array(words, dtype=np.uint32)
    nan = ((b >> 23) & 0xFF == 0xFF) & (b & 0x7FFFFF != 0)
    b[nan] &= 0xFF800000                          # NaN -> ±Inf, keeps the sign
    return b.view(np.float32)


# every finite float32 R > 0, subnormals included
pos_f32 = st.floats(min_value=0.0, exclude_min=True, max_value=float(np.finfo(np.float32).max),
                    width=32, allow_nan=False, allow_infinity=False)
words32 = st.integers(0, 2**32 - 1)


# ------------------------------------------------------------------------------ quantiser

@given(words=st.lists(words32, max_size=64), R=pos_f32)
def test_quantise_matches_reference_on_any_bits(device, words, R):
    x = nan_free_bits(words)
    cfg = QuantConfig.from_range(R)
    q, sat = tc.quantise(t(x, device), cfg)
    ref = ref_quantise(x, cfg)
    np.testing.assert_array_equal(q.cpu().numpy(), ref.q)
    assert sat == ref.saturated


@pytest.mark.parametrize("R", [10.0, 1.0, 3.0, 1e-3, 7.5e20, 1e-30, 3.4e38])
def test_quantise_at_the_saturation_boundary(device, R):
    cfg = QuantConfig.from_range(R)
    b0 = tc.saturation_bits(cfg)
    bits = np.array([b0 - 2, b0 - 1, b0, b0 + 1, cfg.range_bits, cfg.range_bits + 1, 0x7F800000],
                    dtype=np.uint32)
    x = np.concatenate([bits.view(np.float32), -bits.view(np.float32)])
    q, _ = tc.quantise(t(x, device), cfg)
    np.testing.assert_array_equal(q.cpu().numpy(), ref_quantise(x, cfg).q)
    assert int(ref_quantise(bits[:2].view(np.float32), cfg).q.max()) < QMAX


def test_spec_worked_examples(device):
    x = np.array([10.0, -10.0, 5.0, 0.001, 1e-45, np.inf], dtype=np.float32)
    q, sat = tc.quantise(t(x, device), 10.0)
    assert q.cpu().numpy().view(np.uint32).tolist() == [0x7FFFFFFF, 0x80000001, 0x40000000,
                                                       0x000346DC, 0, 0x7FFFFFFF]
    assert sat == 1


def test_nan_is_an_error_naming_count_and_index(device):
    x = torch.zeros(10, device=device)
    x[3] = float("nan")
    x[7] = float("nan")
    with pytest.raises(NonFiniteError, match=r"2 NaN value\(s\) in fc1.weight, first at flat index 3"):
        tc.compress_layer(x, where="fc1.weight")
    with pytest.raises(NonFiniteError) as info:
        tc.quantise(x)
    assert (info.value.count, info.value.first_index) == (2, 3)


@given(v=st.lists(st.integers(-QMAX, QMAX), max_size=32), n=st.integers(1, 64), R=pos_f32)
def test_dequantise_and_average_match_reference(device, v, n, R):
    cfg = QuantConfig.from_range(R)
    a = np.array(v, dtype=np.int32)
    s = a.astype(np.int64) * n
    np.testing.assert_array_equal(tc.dequantise(t(a, device), cfg).cpu().numpy().view(np.uint32),
                                  ref_dequantise(a, cfg).view(np.uint32))
    np.testing.assert_array_equal(tc.average(t(s, device), n, cfg).cpu().numpy().view(np.uint32),
                                  ref_average(s, n, cfg).view(np.uint32))


# ------------------------------------------------------------------------------ compress step

shapes = st.sampled_from([(), (1,), (7,), (5, 3), (4, 3, 2, 2), (0,), (3, 0), (0, 4), (1, 33),
                          (300,), (2, 600), (6, 1, 5, 5)])
ks = st.one_of(st.integers(1, 8), st.sampled_from([0.01, 0.3, 0.5, 0.99]))


@st.composite
def layer_inputs(draw):
    shape = draw(shapes)
    n = int(np.prod(shape)) if shape else 1
    kind = draw(st.sampled_from(["normal", "sparse", "bits", "huge"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if kind == "bits":
        x = nan_free_bits(rng.integers(0, 2**32, n, dtype=np.uint64).tolist()).reshape(shape)
    else:
        scale = {"normal": 1e-2, "sparse": 1.0, "huge": 30.0}[kind]
        x = np.asarray(rng.standard_normal(shape) * scale, dtype=np.float32)
        if kind == "sparse":
            x = np.where(rng.random(shape) < 0.6, np.float32(0), x).astype(np.float32)
    residual = None
    if draw(st.booleans()):
        residual = rng.integers(-QMAX, QMAX + 1, shape).astype(np.int32)
    block = draw(st.sampled_from([None, None, 1, 3, 64]))
    return x.reshape(shape), residual, draw(ks), block, draw(st.sampled_from([1, 2, 8, 24]))


def assert_step_matches(out, ref):
    np.testing.assert_array_equal(u32(out.frame), ref.frame)
    np.testing.assert_array_equal(out.payload.cpu().numpy(), ref.payload)
    np.testing.assert_array_equal(out.residual_out.cpu().numpy(), ref.residual_out)
    np.testing.assert_array_equal(out.selected.cpu().numpy(), ref.selected)
    assert (out.k_eff, out.sat_quant, out.sat_feedback) == (ref.k_eff, ref.sat_quant, ref.sat_feedback)


@given(inp=layer_inputs(), layer_id=st.integers(0, 2**32 - 1))
def test_compress_layer_matches_reference(device, inp, layer_id):
    x, residual, k, block, lmax_log2 = inp
    ref = ref_compress(x, residual, k=k, block_size=block, layer_id=layer_id, lmax_log2=lmax_log2)
    out = tc.compress_layer(t(x, device), None if residual is None else t(residual, device), k=k,
                            block_size=block, layer_id=layer_id, lmax_log2=lmax_log2)
    assert_step_matches(out, ref)


def test_tied_norms_go_to_the_lower_block(device):
    x = np.zeros((6, 4), dtype=np.float32)
    x[[1, 3, 4]] = 0.5                           # three blocks with the same norm
    for k in (1, 2, 3):
        out = tc.compress_layer(t(x, device), k=k)
        assert out.selected.cpu().tolist() == [1, 3, 4][:k]
        assert_step_matches(out, ref_compress(x, k=k))


@given(layers=st.lists(layer_inputs(), min_size=1, max_size=6), lmax_log2=st.sampled_from([1, 8]))
def test_compress_group_equals_per_layer_reference(device, layers, lmax_log2):
    ids = list(range(100, 100 + len(layers)))
    plan = tc.plan_group([x.shape for x, *_ in layers], k=[k for *_, k, _, _ in layers],
                         block_size=[b for *_, b, _ in layers], layer_ids=ids,
                         lmax_log2=lmax_log2, device=device)
    out = tc.compress_group(plan, [t(x, device) for x, *_ in layers],
                            [None if r is None else t(r, device) for _, r, *_ in layers],
                            lmax_log2=lmax_log2)
    refs = [ref_compress(x, r, k=k, block_size=b, layer_id=i, lmax_log2=lmax_log2)
            for (x, r, k, b, _), i in zip(layers, ids)]
    np.testing.assert_array_equal(u32(out.message), np.concatenate([r.frame for r in refs]))
    assert out.frame_words == [r.frame.size for r in refs]
    assert out.nonzeros == [int(np.count_nonzero(r.payload)) for r in refs]
    assert out.sat_quant == [r.sat_quant for r in refs]
    assert out.sat_feedback == [r.sat_feedback for r in refs]
    for got, r in zip(out.residuals, refs):
        np.testing.assert_array_equal(got.cpu().numpy(), r.residual_out)


def test_group_nan_names_the_layer(device):
    plan = tc.plan_group([(3,), (2, 2)], device=device)
    bad = torch.zeros(2, 2, device=device)
    bad[1, 0] = float("nan")
    with pytest.raises(NonFiniteError, match="in conv.w, first at flat index 2"):
        tc.compress_group(plan, [torch.zeros(3, device=device), bad], [None, None],
                          names=["b", "conv.w"])


def _real_gradient_steps(model_name, x, y, device, steps=3):
    from gradblock.shim.setup.models import build_model
    model = build_model(model_name, 10, tuple(x.shape[1:]), seed=0).to(device)
    params = [p for p in model.parameters()]
    grads_per_step = []
    for s in range(steps):
        model.zero_grad()
        xb, yb = x[s * 32:(s + 1) * 32].to(device), y[s * 32:(s + 1) * 32].to(device)
        torch.nn.functional.cross_entropy(model(xb), yb).backward()
        grads_per_step.append([p.grad.detach().clone() for p in params])
        with torch.no_grad():
            for p in params:
                p -= 0.1 * p.grad
    return grads_per_step


def _check_real_gradients(grads_per_step, k):
    """Several steps with the residual carried: the per-layer path, the group path and the
    reference must agree every step."""
    shapes = [tuple(g.shape) for g in grads_per_step[0]]
    dev = grads_per_step[0][0].device
    plan = tc.plan_group(shapes, k=k, layer_ids=list(range(len(shapes))), device=dev)
    ref_res = [None] * len(shapes)
    torch_res = [None] * len(shapes)
    for grads in grads_per_step:
        group = tc.compress_group(plan, grads, torch_res)
        refs = []
        for j, g in enumerate(grads):
            ref = ref_compress(g.cpu().numpy(), ref_res[j], k=k, layer_id=j)
            one = tc.compress_layer(g, None if ref_res[j] is None else t(ref_res[j], dev), k=k,
                                    layer_id=j)
            assert_step_matches(one, ref)
            refs.append(ref)
            ref_res[j] = ref.residual_out
        np.testing.assert_array_equal(u32(group.message), np.concatenate([r.frame for r in refs]))
        torch_res = group.residuals


@pytest.mark.parametrize("k", [1, 4])
def test_real_gradients_digits(device, k):
    from gradblock.shim.setup.data import load_dataset
    ds = load_dataset("digits")
    x, y = torch.from_numpy(ds.x_train[:96]), torch.from_numpy(ds.y_train[:96])
    _check_real_gradients(_real_gradient_steps("digits-cnn", x, y, device), k)


@pytest.mark.slow
def test_real_gradients_fashion_mnist(device):
    from gradblock.shim.setup.data import DatasetError, load_dataset
    try:
        ds = load_dataset("fashion-mnist")
    except DatasetError as e:
        pytest.skip(f"Fashion-MNIST not installed: {e}")
    x, y = torch.from_numpy(ds.x_train[:96]), torch.from_numpy(ds.y_train[:96])
    _check_real_gradients(_real_gradient_steps("lenet5", x, y, device), 1)


# ------------------------------------------------------------------------------ frames and CRC

@st.composite
def run_payloads(draw):
    """Payloads made of zero runs and nonzero runs, some longer than LMAX."""
    parts = []
    for _ in range(draw(st.integers(0, 8))):
        n = draw(st.integers(1, 600))
        if draw(st.booleans()):
            parts.append(np.zeros(n, dtype=np.int32))
        else:
            v = draw(st.sampled_from([1, -1, QMAX, -QMAX, 12345]))
            parts.append(np.full(n, v, dtype=np.int32))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)


@given(payload=run_payloads(), lmax_log2=st.sampled_from([1, 2, 8, 24]),
       layer_id=st.integers(0, 2**32 - 1), R=pos_f32)
def test_encode_frame_matches_reference(device, payload, lmax_log2, layer_id, R):
    got = zrle_torch.encode_frame(t(payload, device), layer_id, R, lmax_log2)
    np.testing.assert_array_equal(u32(got), zrle.encode_frame(payload, layer_id, R, lmax_log2))
    dec = zrle_torch.decode_frame(got, expected_n=payload.size)
    np.testing.assert_array_equal(dec.values.cpu().numpy(), payload)
    assert dec.values.device.type == device.type


def test_spec_frame_example(device, spec_frame):
    payload, frame = spec_frame
    for crc in ("zlib", "torch"):
        np.testing.assert_array_equal(u32(zrle_torch.encode_frame(t(payload, device), 7, 10.0, 8, crc=crc)),
                                      frame)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 5, 7, 8, 9, 31, 64, 1000, 4097])
def test_torch_crc_equals_zlib(device, n):
    rng = np.random.default_rng(n)
    w = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    got = crc32_torch.crc32_words_tensor(t(w.view(np.int32), device))
    assert got == zlib.crc32(w.astype("<u4").tobytes())
    assert crc32_torch.crc32_words(t(w.view(np.int32), device), method="zlib") == got


@given(rows=st.integers(1, 3), n=st.integers(0, 300), block=st.integers(2, 40),
       seed=st.integers(0, 2**32 - 1), dtype=st.sampled_from([torch.int64, torch.int32]),
       span=st.sampled_from(["small", "full"]))
def test_running_max_min_equal_cummax_cummin(device, rows, n, block, seed, dtype, span):
    # the blocked scans the codec uses instead of cummax / cummin (slow on CUDA): every block
    # count and remainder, rows, the type's extremes
    info = torch.iinfo(dtype)
    lo, hi = (-5, 5) if span == "small" else (info.min, info.max)
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(lo, hi, (rows, n), generator=g, dtype=torch.int64).to(dtype).to(device)
    if n:
        x[0, 0] = info.max
        x[-1, -1] = info.min
    assert torch.equal(scan_torch.running_max(x, block), torch.cummax(x, -1).values)
    assert torch.equal(scan_torch.running_min(x, block), torch.cummin(x, -1).values)
    assert torch.equal(scan_torch.running_max(x[0], block), torch.cummax(x[0], 0).values)


def _decode_outcome(fn):
    try:
        f = fn()
    except E.FrameError as e:
        return type(e), e.word
    return "ok", np.asarray(f.values.cpu() if hasattr(f.values, "cpu") else f.values).tolist()


@given(payload=run_payloads(), pos=st.integers(0, 10**6), word=words32,
       how=st.sampled_from(["replace", "truncate", "extend"]))
def test_decode_errors_match_reference(device, payload, pos, word, how):
    frame = zrle.encode_frame(payload, 3, 10.0, 2)
    bad = frame.copy()
    if how == "replace":
        bad[pos % bad.size] = word
    elif how == "truncate":
        bad = bad[:pos % bad.size]
    else:
        bad = np.append(bad, np.uint32(word))
    expect = _decode_outcome(lambda: zrle.decode_frame(bad, payload.size))
    got = _decode_outcome(lambda: zrle_torch.decode_frame(t(bad.view(np.int32), device), payload.size))
    assert got == expect


def test_decode_message_checks_sizes(device):
    a = zrle.encode_frame(np.array([0, 3], dtype=np.int32), 0)
    b = zrle.encode_frame(np.array([1], dtype=np.int32), 1)
    msg = t(np.concatenate([a, b]).view(np.int32), device)
    frames = zrle_torch.decode_message(msg, [2, 1])
    assert [f.values.cpu().tolist() for f in frames] == [[0, 3], [1]]
    with pytest.raises(E.SizeMismatchError):
        zrle_torch.decode_message(msg, [2, 2])
    with pytest.raises(E.SizeMismatchError):
        zrle_torch.decode_message(msg, [2])


# ------------------------------------------------------------------------------ device decoder

from gradblock.codec import zrle_torch_decode  # noqa: E402


def _full_outcome(fn):
    """class, message and word of the error, or the decoded fields: the device decoder must
    match the reference's exception text, not only its class."""
    try:
        f = fn()
    except E.FrameError as e:
        return type(e), str(e), e.word
    values = f.values.cpu().numpy() if hasattr(f.values, "cpu") else f.values
    return "ok", values.tolist(), f.layer_id, f.range_bits, f.lmax_log2, f.n_tokens, f.n_words


@given(payload=run_payloads(), lmax_log2=st.sampled_from([1, 2, 8]), pos=st.integers(0, 10**6),
       word=st.sampled_from([0, 1, 2, 3, 255, 256, 257]) | words32,
       how=st.sampled_from(["none", "replace", "replace+crc", "truncate", "extend"]),
       window=st.sampled_from([5, 8, 13, 4096]), expect=st.booleans())
def test_device_decoder_equals_reference(device, payload, lmax_log2, pos, word, how, window,
                                         expect):
    """Valid and mutated frames, tiny windows too (so the window doubling runs): the same
    values, or the same error class, message and word index as codec.zrle."""
    bad = zrle.encode_frame(payload, 3, 10.0, lmax_log2)
    if how.startswith("replace"):
        bad[pos % bad.size] = word
    elif how == "truncate":
        bad = bad[:pos % bad.size]
    elif how == "extend":
        bad = np.append(bad, np.uint32(word))
    if how.endswith("+crc"):
        bad[-1] = zlib.crc32(bad[:-1].astype("<u4").tobytes())
    n = payload.size if expect else None
    want = _full_outcome(lambda: zrle.decode_frame(bad, n))
    first_window = zrle_torch_decode._FIRST_WINDOW
    zrle_torch_decode._FIRST_WINDOW = window
    try:
        got = _full_outcome(lambda: zrle_torch.decode_frame(t(bad.view(np.int32), device), n,
                                                            method="device"))
    finally:
        zrle_torch_decode._FIRST_WINDOW = first_window
    assert got == want


def test_device_decoder_message_and_start(device, monkeypatch):
    monkeypatch.setattr(zrle_torch_decode, "_FIRST_WINDOW", 8)
    rng = np.random.default_rng(1)
    layers = [rng.integers(-3, 4, n).astype(np.int32) for n in (0, 1, 700, 33, 5000)]
    msg = np.concatenate([zrle.encode_frame(p, j, 1.0, 3) for j, p in enumerate(layers)])
    frames = zrle_torch.decode_message(t(msg.view(np.int32), device), [p.size for p in layers],
                                       method="device")
    for f, p, j in zip(frames, layers, range(len(layers))):
        assert f.values.device.type == device.type and f.layer_id == j
        np.testing.assert_array_equal(f.values.cpu().numpy(), p)
    with pytest.raises(E.SizeMismatchError):
        zrle_torch.decode_message(t(msg.view(np.int32), device), [p.size for p in layers][:-1],
                                  method="device")


def test_device_decoder_never_sizes_memory_by_the_header(device):
    """A 9-word frame claiming n = 2**32 - 1 (one zero-run token, a wrong CRC): refused, and
    nothing of n elements is allocated on the way (the walk's window is bounded by the words
    present; the values only once the frame is valid)."""
    words = np.array([zrle.MAGIC, zrle.VERSION | (8 << 8), 0, 2**32 - 1, 0x41200000,
                      2**32 - 1, 0, 1, 0], dtype=np.uint32)
    words[-1] = zlib.crc32(words[:-1].astype("<u4").tobytes()) ^ 1
    want = _full_outcome(lambda: zrle.decode_frame(words))
    assert want[0] is not E.FrameError and want[0] != "ok"
    got = _full_outcome(lambda: zrle_torch.decode_frame(t(words.view(np.int32), device),
                                                        method="device"))
    assert got == want


def test_device_decoder_argument_errors(device):
    good = t(zrle.encode_frame(np.zeros(3, np.int32)).view(np.int32), device)
    for words, kw in [(good.to(torch.int64), {}), (good.reshape(1, -1), {}),
                      (good, {"expected_n": 5.5}), (good, {"expected_n": -1}),
                      (good, {"start": -1})]:
        with pytest.raises(E.DecodeArgumentError):
            zrle_torch.decode_frame(words, method="device", **kw)
    with pytest.raises(ValueError, match="decode method"):
        zrle_torch.decode_frame(good, method="gpu")


# ------------------------------------------------------------------------------ bad input

def test_bad_inputs_are_named(device):
    with pytest.raises(TypeError, match="float32"):
        tc.compress_layer(torch.zeros(3, dtype=torch.float64, device=device))
    with pytest.raises(TypeError, match="residual must be an int32"):
        tc.compress_layer(torch.zeros(3, device=device), torch.zeros(3, dtype=torch.int64,
                                                                     device=device))
    with pytest.raises(ValueError, match="residual shape"):
        tc.compress_layer(torch.zeros(3, device=device), torch.zeros(4, dtype=torch.int32,
                                                                     device=device))
    with pytest.raises(TypeError, match="int32"):
        zrle_torch.encode_frame(torch.zeros(3, dtype=torch.int64, device=device))
    with pytest.raises(ValueError, match="lmax_log2"):
        zrle_torch.encode_frame(torch.zeros(3, dtype=torch.int32, device=device), lmax_log2=25)
    with pytest.raises(ValueError, match="crc method"):
        crc32_torch.crc32_words(torch.zeros(3, dtype=torch.int32, device=device), method="fast")
    with pytest.raises(ValueError, match="k must be"):
        tc.compress_layer(torch.zeros(3, device=device), k=0)
    plan = tc.plan_group([(3,)], device=device)
    with pytest.raises(ValueError, match="gradient shape"):
        tc.compress_group(plan, [torch.zeros(4, device=device)], [None])
    with pytest.raises(ValueError, match="plan has 1 layers"):
        tc.compress_group(plan, [], [])
