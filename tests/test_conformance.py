"""One conformance suite for every backend (gradblock.backends): numpy (the reference), numba and
torch (CPU with the host and the on-device frame decoder; CUDA when present) must give the reference's bits AND its errors -- the same class,
and for inputs with several faults the same first-reported one (the same validation order).

Each case runs an operation on the reference and on the backend under test from the same host
data and compares the outcomes: ("ok", outputs as numpy) or ("error", exception class)."""
from __future__ import annotations

import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gradblock.backends import available_backends, get_backend
from gradblock.codec import errors as E
from gradblock.codec import zrle

UNAVAILABLE = available_backends()


def _backend_params():
    params = []
    for name in ("numpy", "numba", "torch"):
        reason = UNAVAILABLE[name]
        params.append(pytest.param(name, id=name, marks=pytest.mark.skipif(
            reason is not None, reason=reason or "")))
    params.append(pytest.param("torch-device", id="torch-device", marks=pytest.mark.skipif(
        UNAVAILABLE["torch"] is not None, reason=UNAVAILABLE["torch"] or "")))
    params.append(pytest.param("torch-bucket", id="torch-bucket", marks=pytest.mark.skipif(
        UNAVAILABLE["torch"] is not None, reason=UNAVAILABLE["torch"] or "")))
    cuda_reason = UNAVAILABLE["torch"]
    if cuda_reason is None:
        import torch
        if not torch.cuda.is_available():
            cuda_reason = "no CUDA device (torch.cuda.is_available() is False); CPU torch runs"
    params.append(pytest.param("torch-cuda", id="torch-cuda", marks=pytest.mark.skipif(
        cuda_reason is not None, reason=cuda_reason or "")))
    return params


@pytest.fixture(params=_backend_params(), scope="module")
def backend(request):
    if request.param == "torch-cuda":
        return get_backend("torch", device="cuda")
    if request.param == "torch-device":      # the on-device frame decoder, run on the CPU
        return get_backend("torch", decode="device")
    if request.param == "torch-bucket":      # the DDP hook's batched walk (issue 29), on the CPU
        return get_backend("torch", decode="bucket")
    return get_backend(request.param)


REF = get_backend("numpy")
SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


def _host(b, x):
    """A backend result (array, tensor, dataclass, tuple, int) as plain numpy / Python values."""
    if isinstance(x, (list, tuple)):
        return type(x)(_host(b, v) for v in x)
    if isinstance(x, (int, float, str, type(None), np.integer, np.ndarray)):
        return x
    if hasattr(x, "__dataclass_fields__"):
        return {k: _host(b, getattr(x, k)) for k in x.__dataclass_fields__}
    return np.asarray(b.to_numpy(x))


def outcome(b, op):
    try:
        return ("ok", _host(b, op(b)))
    except Exception as e:                 # noqa: BLE001 - the class is the result
        return ("error", type(e))


def _equal(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        # frames are uint32 on the host and int32 bit patterns in torch: compare the bits
        if a.dtype.itemsize == b.dtype.itemsize == 4 and a.dtype.kind in "iu" and b.dtype.kind in "iu":
            b = b.view(a.dtype)
        return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b)
    return a == b


def assert_conforms(b, op):
    """`op(backend)` gives the reference's outcome on backend `b`."""
    want, got = outcome(REF, op), outcome(b, op)
    if want[0] == "error" or got[0] == "error":
        assert got == want, f"{b!r}: reference {want[0]} {want[1] if want[0] == 'error' else ''}, " \
                            f"backend {got[0]} {got[1] if got[0] == 'error' else ''}"
    else:
        assert _equal(want[1], got[1]), f"{b!r}: outputs differ from the reference"
    return want


# ------------------------------------------------------------------------------ strategies

def _nan_bits():
    return st.integers(0x7F800001, 0x7FFFFFFF) | st.integers(0xFF800001, 0xFFFFFFFF)


float_bits = st.one_of(st.integers(0, 2**32 - 1),                          # anything, NaN rare
                       st.integers(0, 0x3F000000) | st.integers(0x80000000, 0xBF000000),
                       st.just(0))
ranges = st.one_of(st.sampled_from([10.0, 1.0, 1e-3, 3.5e38, 1e-40]),
                   st.floats(2.0**-100, 2.0**100, width=32))
bad_ranges = st.sampled_from([float("nan"), float("inf"), -1.0, 0.0, 1e39, "10", None, True])


@st.composite
def gradients(draw, max_elems=96, nan=False):
    shape = draw(st.sampled_from([(0,), (1,), (7,), (3, 4), (5, 1, 3), (2, 3, 2, 2), (12, 8),
                                  (4, 0)]))
    n = int(np.prod(shape))
    bits = draw(st.lists(float_bits, min_size=n, max_size=n))
    arr = np.array(bits, dtype=np.uint32)
    if nan and n:
        at = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=3))
        arr[at] = draw(_nan_bits())
    return arr.view(np.float32).reshape(shape)


def _residual_for(draw, shape):
    n = int(np.prod(shape))
    vals = draw(st.lists(st.integers(-(2**31) + 1, 2**31 - 1) | st.integers(-3, 3),
                         min_size=n, max_size=n))
    return np.array(vals, dtype=np.int32).reshape(shape)


# ------------------------------------------------------------------------------ §1 quantiser

@SETTINGS
@given(g=gradients(nan=False), R=ranges)
def test_quantise(backend, g, R):
    assert_conforms(backend, lambda b: b.quantise(b.asarray(g), R))


@SETTINGS
@given(g=gradients(nan=True), R=ranges | bad_ranges, dtype=st.sampled_from([np.float32, np.float64]))
def test_quantise_errors(backend, g, R, dtype):
    """NaN -> NonFiniteError, bad R -> RangeError (checked first), float64 -> TypeError."""
    with np.errstate(invalid="ignore"):            # NaN payloads widen to float64 quietly
        x = g.astype(dtype) if dtype != np.float32 else g
    assert_conforms(backend, lambda b: b.quantise(b.asarray(x), R))


@SETTINGS
@given(v=st.lists(st.integers(-(2**31) + 1, 2**31 - 1), max_size=40), R=ranges | bad_ranges,
       n=st.integers(-1, 64) | st.sampled_from([0.5, 2.5, 1e9]),
       dtype=st.sampled_from([np.int32, np.int64]))
def test_dequantise_and_average(backend, v, R, n, dtype):
    """§1.3 and §5: the float32 results bit for bit; bad R (first) and N named alike."""
    codes = np.array(v, dtype=dtype)
    assert_conforms(backend, lambda b: b.dequantise(b.asarray(codes), R))
    sums = codes.astype(np.int64) * 3
    assert_conforms(backend, lambda b: b.average(b.asarray(sums.astype(dtype)), n, R))


BAD_R = [float("nan"), float("inf"), -1.0, 0.0, -0.0, 1e39, 1e-46, "10", None, True, [10.0]]


@pytest.mark.parametrize("R", BAD_R, ids=repr)
@pytest.mark.parametrize("op", ["quantise", "dequantise", "average", "compress_layer",
                                "encode_frame"])
def test_bad_range_is_a_range_error_everywhere(backend, op, R):
    """Every entry point that takes R refuses a bad one with RangeError (issue 8)."""
    g = np.ones(4, np.float32)
    ops = {"quantise": lambda b: b.quantise(b.asarray(g), R),
           "dequantise": lambda b: b.dequantise(b.asarray(np.ones(4, np.int32)), R),
           "average": lambda b: b.average(b.asarray(np.ones(4, np.int64)), 2, R),
           "compress_layer": lambda b: b.compress_layer(b.asarray(g), None, R=R),
           "encode_frame": lambda b: b.encode_frame(b.asarray(np.ones(4, np.int32)), 0, R)}
    assert assert_conforms(backend, ops[op]) == ("error", E.RangeError)


# ------------------------------------------------------------------------------ §4 compress step

steps_k = st.one_of(st.integers(1, 6), st.sampled_from([0.01, 0.25, 0.5, 0.999, 1.0, 3.0]))
bad_k = st.sampled_from([0, -1, 0.0, 1.5, float("nan"), True, "2", 2**70])
block_sizes = st.one_of(st.none(), st.integers(1, 40))
bad_block_sizes = st.sampled_from([0, -3, 2**63, 2**64, 1e23, 2.5, True, "4"])
bad_lmax = st.sampled_from([0, 25, -1, 2.5, None])
bad_layer_ids = st.sampled_from([-1, 2**32, 1.5, None])


def _step(b, g, r, **kw):
    return b.compress_layer(b.asarray(g), None if r is None else b.asarray(r), **kw)


norms = st.sampled_from(["l1", "l2"])
bad_norms = st.sampled_from(["L2", "l3", "", None, 2])


@SETTINGS
@given(data=st.data(), g=gradients(), R=ranges, k=steps_k, block_size=block_sizes,
       layer_id=st.integers(0, 2**32 - 1), lmax_log2=st.integers(1, 24), norm=norms)
def test_compress_layer(backend, data, g, R, k, block_size, layer_id, lmax_log2, norm):
    r = data.draw(st.none() | st.just(_residual_for(data.draw, g.shape)))
    assert_conforms(backend, lambda b: _step(b, g, r, R=R, k=k, block_size=block_size,
                                             layer_id=layer_id, lmax_log2=lmax_log2,
                                             norm=norm))


@SETTINGS
@given(data=st.data(), g=gradients(nan=True) | gradients(),
       R=ranges | bad_ranges, k=steps_k | bad_k, block_size=block_sizes | bad_block_sizes,
       layer_id=st.integers(0, 5) | bad_layer_ids, lmax_log2=st.integers(1, 24) | bad_lmax,
       residual=st.sampled_from(["none", "ok", "shape", "int64", "list"]),
       grad_dtype=st.sampled_from([np.float32, np.float32, np.float64]), norm=norms | bad_norms)
def test_compress_layer_errors_in_reference_order(backend, data, g, R, k, block_size, layer_id,
                                                  lmax_log2, residual, grad_dtype, norm):
    """Several faults at once: every backend reports the reference's first one."""
    if residual == "none":
        r = None
    elif residual == "ok":
        r = _residual_for(data.draw, g.shape)
    elif residual == "shape":
        r = np.zeros(g.size + 1, dtype=np.int32)
    elif residual == "int64":
        r = np.zeros(g.shape, dtype=np.int64)
    else:
        r = "residual"
    with np.errstate(invalid="ignore"):
        x = g.astype(grad_dtype)

    def op(b):
        rr = r if isinstance(r, str) or r is None else b.asarray(r)
        return b.compress_layer(b.asarray(x), rr, R=R, k=k, block_size=block_size,
                                layer_id=layer_id, lmax_log2=lmax_log2, norm=norm)
    assert_conforms(backend, op)


@pytest.mark.parametrize("case", [
    dict(nan=True, block_size=0),                 # NaN wins over a bad block size
    dict(nan=True, k=0),                          # ... over a bad k
    dict(nan=True, lmax_log2=25, layer_id=-1),    # ... over frame parameters
    dict(nan=True, R=float("nan")),               # a bad R wins over NaN
    dict(nan=False, block_size=0, k=0),           # block size before k
    dict(nan=False, k=0, lmax_log2=25),           # k before lmax
    dict(nan=False, lmax_log2=25, layer_id=-1),   # lmax before layer id
    dict(nan=True, residual_shape=True),          # NaN before the residual's shape
    dict(nan=False, residual_shape=True, block_size=0),
    dict(nan=True, residual_dtype=True),          # the residual's dtype before NaN
    dict(nan=False, block_size=2**63),            # numba must not misread a huge block size
    dict(nan=False, block_size=1e23),
    dict(nan=True, norm="l3"),                    # NaN wins over a bad norm kind
    dict(nan=False, layer_id=-1, norm="L2"),      # the norm kind is checked last
    dict(nan=False, norm=None),
])
def test_first_error_named_cases(backend, case):
    case = dict(case)
    g = np.linspace(-2, 2, 24, dtype=np.float32).reshape(4, 6)
    if case.pop("nan"):
        g[2, 3] = np.float32("nan")
    r = np.zeros(g.shape, dtype=np.int32)
    if case.pop("residual_shape", False):
        r = np.zeros(25, dtype=np.int32)
    if case.pop("residual_dtype", False):
        r = np.zeros(g.shape, dtype=np.int64)
    want = assert_conforms(backend, lambda b: _step(b, g, r, **case))
    assert want[0] == "error"


# ------------------------------------------------------------------------------ §3 frames

@st.composite
def payloads(draw):
    n = draw(st.integers(0, 300))
    density = draw(st.sampled_from([0.0, 0.05, 0.5, 1.0]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    vals = rng.integers(-(2**31) + 1, 2**31, size=n, dtype=np.int64).astype(np.int32)
    vals[rng.random(n) >= density] = 0
    return vals


@SETTINGS
@given(p=payloads(), layer_id=st.integers(0, 2**32 - 1) | bad_layer_ids,
       R=ranges | bad_ranges, lmax_log2=st.integers(1, 24) | bad_lmax)
def test_encode_frame(backend, p, layer_id, R, lmax_log2):
    assert_conforms(backend, lambda b: b.frame_to_numpy(b.encode_frame(b.asarray(p), layer_id, R,
                                                                        lmax_log2)))


def test_encode_frame_refuses_wrong_dtype(backend):
    for bad in (np.zeros(3, np.int64), np.zeros(3, np.float32), np.zeros(3, np.int16)):
        assert assert_conforms(backend, lambda b: b.encode_frame(b.asarray(bad)))[0] == "error"


def _decoded(b, d):
    return (b.to_numpy(d.values), d.layer_id, d.range_bits, d.lmax_log2, d.n_tokens, d.n_words)


def _decode(words, expected_n=None, start=0):
    return lambda b: _decoded(b, b.decode_frame(b.asarray(words), expected_n, start))


def _with_crc(words: np.ndarray) -> np.ndarray:
    w = words.copy()
    w[-1] = zlib.crc32(w[:-1].astype("<u4").tobytes()) & 0xFFFFFFFF
    return w


mutations = st.sampled_from(["none", "set", "flip", "truncate", "extend", "set+crc", "flip+crc"])


@SETTINGS
@given(p=payloads(), lmax_log2=st.integers(1, 9), data=st.data(), how=mutations,
       expect=st.sampled_from(["none", "right", "wrong"]))
def test_decode_frame_valid_and_mutated(backend, p, lmax_log2, data, how, expect):
    words = zrle.encode_frame(p, 3, 10.0, lmax_log2)
    i = data.draw(st.integers(0, words.size - 1))
    if how.startswith("set"):
        words[i] = data.draw(st.integers(0, 2**32 - 1) | st.integers(0, 600))
    elif how.startswith("flip"):
        words[i] ^= np.uint32(1 << data.draw(st.integers(0, 31)))
    elif how == "truncate":
        words = words[:i]
    elif how == "extend":
        words = np.concatenate([words, np.array([0, 1, 2], np.uint32)])
    if how.endswith("+crc") and words.size:
        words = _with_crc(words)
    expected_n = {"none": None, "right": p.size, "wrong": p.size + 1}[expect]
    assert_conforms(backend, _decode(words, expected_n))


# one hand-made frame per error code of docs/spec.md §3.5
def _frame(tokens, n, lmax_log2=8, h0=zrle.MAGIC, h1=None, rbits=0x41200000, t0=None, crc=None):
    """A frame from (z, [literals]) tokens; t0 / crc computed unless given."""
    words = [h0, (zrle.VERSION | (lmax_log2 << 8)) if h1 is None else h1, 0, n, rbits]
    for z, lits in tokens:
        words += [z, len(lits), *lits]
    words.append(len(tokens) if t0 is None else t0)
    w = np.array(words, dtype=np.uint32)
    c = zlib.crc32(w.astype("<u4").tobytes()) & 0xFFFFFFFF if crc is None else crc
    return np.append(w, np.uint32(c))


ERROR_FRAMES = {
    E.BadMagicError: (_frame([(3, [])], 3, h0=0x5A524C46), None),
    E.BadVersionError: (_frame([(3, [])], 3, h1=2 | (8 << 8)), None),
    E.BadLmaxError: (_frame([(3, [])], 3, h1=1 | (25 << 8)), None),
    E.BadRangeError: (_frame([(3, [])], 3, rbits=0x7F800000), None),
    E.LiteralRunTooLongError: (_frame([(0, [1, 2, 3])], 3, lmax_log2=1), None),
    E.ZeroLiteralError: (_frame([(1, [5, 0])], 3), None),
    E.EmptyTokenError: (_frame([(0, []), (3, [])], 3), None),
    E.EarlyZeroLengthError: (_frame([(2, []), (1, [])], 3), None),
    E.SplitLiteralRunError: (_frame([(1, [5]), (0, [6])], 3), None),
    E.OverrunError: (_frame([(2, [7, 8])], 3), None),
    E.TruncatedError: (_frame([(1, [5, 6])], 3)[:7], None),
    E.TokenCountMismatchError: (_frame([(1, [5, 6])], 3, t0=2), None),
    E.CrcMismatchError: (_frame([(1, [5, 6])], 3, crc=1), None),
    E.SizeMismatchError: (_frame([(3, [])], 3), 4),
}


@pytest.mark.parametrize("error", list(ERROR_FRAMES), ids=lambda e: e.name)
def test_every_frame_error_class(backend, error):
    words, expected_n = ERROR_FRAMES[error]
    want = assert_conforms(backend, _decode(words, expected_n))
    assert want == ("error", error)


def test_every_frame_error_class_is_covered():
    assert set(ERROR_FRAMES) == set(E.ALL_ERRORS)


@pytest.mark.parametrize("expected_n", [-1, 5.0, 2**32, "3", True])
def test_decode_argument_errors(backend, expected_n):
    words = _frame([(3, [])], 3)
    assert assert_conforms(backend, _decode(words, expected_n))[0] == "error"


@SETTINGS
@given(ps=st.lists(payloads(), min_size=0, max_size=4), data=st.data(),
       sizes=st.sampled_from(["right", "fewer", "more", "none", "one wrong"]))
def test_decode_message(backend, ps, data, sizes):
    words = np.concatenate([zrle.encode_frame(p, j, 10.0) for j, p in enumerate(ps)] +
                           [np.zeros(0, np.uint32)])
    exp = [p.size for p in ps]
    expected = {"right": exp, "fewer": exp[:-1], "more": exp + [1], "none": None,
                "one wrong": [e + (j == 0) for j, e in enumerate(exp)]}[sizes]
    if data.draw(st.booleans()) and words.size:
        words = words[:data.draw(st.integers(0, words.size - 1))]
    assert_conforms(backend, lambda b: [_decoded(b, d) for d in
                                        b.decode_message(b.asarray(words), expected)])


# ------------------------------------------------------------------------------ real gradients

@pytest.fixture(scope="module")
def real_gradients():
    """Three SGD steps of a small CNN on the digits data set: every parameter's gradient."""
    torch = pytest.importorskip("torch", reason="the real-gradient case trains a torch model")
    from gradblock.shim.setup.data import load_dataset
    from gradblock.shim.setup.models import build_model
    try:
        ds = load_dataset("digits")
    except Exception as e:                 # noqa: BLE001
        pytest.skip(f"digits data set unavailable: {e}")
    model = build_model("digits-cnn", 10, tuple(ds.x_train.shape[1:]), seed=0)
    steps = []
    for s in range(3):
        model.zero_grad()
        xb = torch.from_numpy(ds.x_train[s * 32:(s + 1) * 32])
        yb = torch.from_numpy(ds.y_train[s * 32:(s + 1) * 32])
        torch.nn.functional.cross_entropy(model(xb), yb).backward()
        steps.append([p.grad.detach().numpy().copy() for p in model.parameters()])
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.1 * p.grad
    return steps


@pytest.mark.parametrize("k,norm", [(1, "l1"), (0.25, "l1"), (1, "l2")])
def test_real_gradients(backend, real_gradients, k, norm):
    """Steps with the residual carried, a message of every layer's frame decoded back: bits
    equal to the reference at every step and layer."""
    ref_res = [None] * len(real_gradients[0])
    res = list(ref_res)
    for grads in real_gradients:
        frames = []
        for j, g in enumerate(grads):
            want = REF.compress_layer(g, ref_res[j], R=1.0, k=k, layer_id=j, norm=norm)
            got = backend.compress_layer(backend.asarray(g), res[j], R=1.0, k=k, layer_id=j,
                                         norm=norm)
            assert _equal(_host(REF, want), _host(backend, got)), f"layer {j}"
            ref_res[j], res[j] = want.residual_out, got.residual_out
            frames.append(backend.frame_to_numpy(got.frame))
        message = np.concatenate(frames)
        decoded = backend.decode_message(backend.asarray(message), [g.size for g in grads])
        for d, g, f in zip(decoded, grads, frames):
            assert d.n_words == f.size
        sums = [backend.to_numpy(d.values) for d in decoded]
        ref_sums = [d.values for d in REF.decode_message(message, [g.size for g in grads])]
        assert all(np.array_equal(a, b) for a, b in zip(sums, ref_sums))
