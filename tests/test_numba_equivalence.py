"""The numba fast path against the numpy reference, bit for bit (docs/spec.md §4)."""
from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gradblock.codec import zrle, zrle_numba
from gradblock.codec.errors import FrameError
from gradblock.fastpath import fast, step_schedule
from gradblock.refmodel import compress
from gradblock.refmodel import validation as V
from gradblock.refmodel.quantiser import QMAX, NonFiniteError, QuantConfig

F32 = np.finfo(np.float32)
SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, 1e-45, -1e-45, F32.tiny, -F32.tiny,
                     np.float32(F32.tiny) - np.float32(1e-45), F32.max, -F32.max, 10.0, -10.0,
                     np.nextafter(np.float32(10), np.float32(20)), 1e30, -1e30, 5.0, 2.0, 6.0],
                    dtype=np.float32)
RANGES = [10.0, 1.0, 1e-3, 3e38, 1e-40, float(QMAX), 0.1]

FIELDS = ("q", "acc", "norms", "selected", "payload", "residual_out", "frame")


def assert_same_step(ref: compress.LayerStep, got: compress.LayerStep):
    assert got.layout == ref.layout
    assert (got.k_eff, got.sat_quant, got.sat_feedback) == (ref.k_eff, ref.sat_quant, ref.sat_feedback)
    for name in FIELDS:
        a, b = getattr(ref, name), getattr(got, name)
        assert b.dtype == a.dtype and b.shape == a.shape, name
        assert np.array_equal(a, b), name


@st.composite
def layer_cases(draw):
    nd = draw(st.integers(0, 4))
    shape = tuple(draw(st.lists(st.integers(0, 7), min_size=nd, max_size=nd)))
    n = math.prod(shape)
    R = draw(st.one_of(st.sampled_from(RANGES),
                       st.floats(width=32, min_value=float(np.float32(1e-38)),
                                 max_value=float(np.float32(1e38)))))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    scale = R * draw(st.sampled_from([1e-9, 1e-4, 0.01, 0.3, 1.0, 3.0]))
    with np.errstate(over="ignore"):                      # R near 3e38 overflows to +-Inf
        g = (rng.standard_normal(n) * scale).astype(np.float32)
    if n and draw(st.booleans()):                         # sprinkle special values
        at = rng.integers(0, n, max(1, n // 8))
        g[at] = rng.choice(SPECIALS, at.size)
    if n and draw(st.booleans()):                         # whole zero blocks make ties
        g[: n // 2] = 0
    residual = draw(st.sampled_from(["none", "zeros", "random", "extreme"]))
    if residual == "none":
        r = None
    elif residual == "zeros":
        r = np.zeros(n, dtype=np.int32)
    elif residual == "random":
        r = rng.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32)
    else:
        r = rng.choice(np.array([QMAX, -QMAX, -2**31, 0, 1, -1], dtype=np.int32), n)
    k = draw(st.one_of(st.integers(1, 12), st.floats(min_value=0.001, max_value=0.999)))
    block_size = draw(st.one_of(st.none(), st.integers(1, max(1, n + 2))))
    return dict(grad=g.reshape(shape), residual=None if r is None else r.reshape(shape), R=R,
                k=k, block_size=block_size, lmax_log2=draw(st.integers(1, 24)),
                layer_id=draw(st.integers(0, 2**32 - 1)))


def step_of(impl, case):
    return impl(case["grad"], case["residual"], R=case["R"], k=case["k"],
                block_size=case["block_size"], layer_id=case["layer_id"],
                lmax_log2=case["lmax_log2"])


def reference_or_skip(case):
    """The reference step, or None when the reference rejects the case (a shape such as
    (3, 0) has block size 0); then the fast path must reject it the same way."""
    try:
        return step_of(compress.compress_layer, case)
    except ValueError as e:
        with pytest.raises(type(e)):
            step_of(fast.compress_layer, case)
        return None


def run_lean(case, ref, parallel=False):
    r = (np.zeros(case["grad"].shape, np.int32) if case["residual"] is None
         else case["residual"].copy())
    lay = ref.layout
    pad = 3
    out = np.full(pad + fast.max_step_words(lay.n, lay.block_size, ref.k_eff) + pad, 0xA5A5A5A5,
                  dtype=np.uint32)
    info = fast.compress_step(np.ascontiguousarray(case["grad"]), r, case["R"], case["k"],
                              case["block_size"], case["layer_id"], case["lmax_log2"], out, pad,
                              parallel=parallel)
    frame = out[pad:pad + info.n_words]
    assert np.all(out[:pad] == 0xA5A5A5A5) and np.all(out[pad + info.n_words:] == 0xA5A5A5A5)
    return info, frame, r


@given(case=layer_cases())
def test_compress_layer_bit_exact(case):
    ref = reference_or_skip(case)
    if ref is not None:
        assert_same_step(ref, step_of(fast.compress_layer, case))


@given(case=layer_cases(), parallel=st.booleans())
def test_compress_step_in_place_bit_exact(case, parallel):
    ref = reference_or_skip(case)
    if ref is None:
        return
    info, frame, r = run_lean(case, ref, parallel)
    assert np.array_equal(frame, ref.frame)
    assert np.array_equal(r, ref.residual_out)
    assert (info.k_eff, info.sat_quant, info.sat_feedback) == (ref.k_eff, ref.sat_quant, ref.sat_feedback)
    assert (info.n_blocks, info.block_size) == (ref.layout.n_blocks, ref.layout.block_size)
    assert info.n_words <= fast.max_step_words(ref.layout.n, ref.layout.block_size, ref.k_eff)


@given(x=st.lists(st.floats(width=32), max_size=40), R=st.sampled_from(RANGES))
def test_quantise_bit_exact(x, R):
    from gradblock.refmodel.quantiser import quantise as ref_quantise
    arr = np.array(x, dtype=np.float32)
    try:
        a = ref_quantise(arr, R)
    except NonFiniteError as e:
        with pytest.raises(NonFiniteError) as got:
            fast.quantise(arr, R)
        assert (got.value.count, got.value.first_index) == (e.count, e.first_index)
        return
    b = fast.quantise(arr, R)
    assert np.array_equal(a.q, b.q) and a.saturated == b.saturated


@pytest.mark.parametrize("n_threads", [1, 2])
def test_compress_layers_is_the_concatenated_reference(n_threads, rng):
    shapes = [(16, 3, 3, 3), (16,), (), (0, 4), (32, 16, 3, 3), (10, 512), (10,), (7, 5)]
    grads = [(rng.standard_normal(s) * 0.5).astype(np.float32) for s in shapes]
    grads[0].reshape(-1)[3] = np.inf
    residuals = [rng.integers(-2**20, 2**20, s, dtype=np.int64).astype(np.int32)
                 if s else np.zeros(s, np.int32) for s in shapes]
    ks = [1, 2, 1, 1, 0.1, 0.3, 3, 0.5]
    refs = [compress.compress_layer(g, r, R=3.0, k=k, layer_id=100 + i, lmax_log2=4)
            for i, (g, r, k) in enumerate(zip(grads, residuals, ks))]
    rs = [r.copy() for r in residuals]
    message, infos = fast.compress_layers(grads, rs, R=3.0, k=ks, layer_ids=[100 + i for i in range(8)],
                                          lmax_log2=4, n_threads=n_threads)
    assert np.array_equal(message, np.concatenate([s.frame for s in refs]))
    for ref, info, r in zip(refs, infos, rs):
        assert np.array_equal(r, ref.residual_out)
        assert (info.n_words, info.k_eff, info.sat_quant, info.sat_feedback) == \
            (ref.frame.size, ref.k_eff, ref.sat_quant, ref.sat_feedback)
    frames = zrle_numba.decode_message(message, [g.size for g in grads])
    assert [f.layer_id for f in frames] == [100 + i for i in range(8)]


@pytest.mark.parametrize("chunk", [1, 5, 64])
def test_layers_split_into_chunks_across_threads(monkeypatch, chunk, rng):
    """Small chunks make every layer run as many pass-1 tasks on the pool."""
    monkeypatch.setattr(step_schedule.Job, "CHUNK", chunk)
    shapes = [(9, 2, 3, 3), (50,), (12, 7), (), (3, 40)]
    grads = [(rng.standard_normal(s) * 4).astype(np.float32) for s in shapes]
    residuals = [rng.integers(-2**31, 2**31, s, dtype=np.int64).astype(np.int32) for s in shapes]
    refs = [compress.compress_layer(g, r, k=0.3, layer_id=i, lmax_log2=2)
            for i, (g, r) in enumerate(zip(grads, residuals))]
    rs = [r.copy() for r in residuals]
    message, infos = fast.compress_layers(grads, rs, k=0.3, lmax_log2=2, n_threads=3, min_parallel=0)
    assert np.array_equal(message, np.concatenate([s.frame for s in refs]))
    for ref, info, r in zip(refs, infos, rs):
        assert np.array_equal(r, ref.residual_out)
        assert (info.sat_quant, info.sat_feedback) == (ref.sat_quant, ref.sat_feedback)
    for i, (g, r0) in enumerate(zip(grads, residuals)):
        r = r0.copy()
        out = np.zeros(fast.max_step_words(g.size, refs[i].layout.block_size, refs[i].k_eff),
                       np.uint32)
        info = fast.compress_step(g, r, 10.0, 0.3, None, i, 2, out, parallel=3)
        assert np.array_equal(out[:info.n_words], refs[i].frame)
        assert np.array_equal(r, refs[i].residual_out)
    grads[1][-1] = np.nan                            # in the last chunk of layer 1
    rs = [r.copy() for r in residuals]
    with pytest.raises(NonFiniteError, match="layer 1") as e:
        fast.compress_layers(grads, rs, k=0.3, n_threads=2, min_parallel=0)
    assert e.value.first_index == 49
    assert all(np.array_equal(a, b) for a, b in zip(rs, residuals))


def test_compress_layers_block_size_per_layer(rng):
    grads = [rng.standard_normal(s).astype(np.float32) for s in [(40,), (6, 10)]]
    rs = [np.zeros(g.shape, np.int32) for g in grads]
    message, infos = fast.compress_layers(grads, rs, k=2, block_size=[8, None])
    refs = [compress.compress_layer(g, k=2, block_size=b, layer_id=i)
            for i, (g, b) in enumerate(zip(grads, [8, None]))]
    assert np.array_equal(message, np.concatenate([s.frame for s in refs]))
    assert [i.block_size for i in infos] == [8, 10]
    assert fast.compress_layers([], [])[0].size == 0


# ------------------------------------------------------------------------------ errors

def test_nan_reported_like_the_reference():
    g = np.zeros((4, 5), dtype=np.float32)
    g[2, 1] = np.nan
    g[3, 4] = np.nan
    for kwargs in (dict(), dict(residual=np.zeros(3, np.int32)), dict(block_size=0),
                   dict(k=0), dict(lmax_log2=30), dict(layer_id=-5)):
        errs = []
        for impl in (compress.compress_layer, fast.compress_layer):
            with pytest.raises(NonFiniteError) as e:
                impl(g, where="fc.weight", **kwargs)
            errs.append((e.value.count, e.value.first_index, str(e.value)))
        assert errs[0] == errs[1] == (2, 11, errs[0][2]) and "fc.weight" in errs[0][2]


@pytest.mark.parametrize("kwargs, exc", [
    (dict(residual=np.zeros(3, np.int32)), V.ShapeError), (dict(block_size=0), V.BlockSizeError),
    (dict(block_size=2**63), V.BlockSizeError), (dict(block_size=1e23), V.BlockSizeError),
    (dict(block_size=2**32), V.BlockSizeError), (dict(block_size=2.5), V.BlockSizeError),
    (dict(block_size=True), V.BlockSizeError), (dict(block_size="4"), V.BlockSizeError),
    (dict(k=0), V.KError), (dict(k=1.5), V.KError), (dict(k=float("nan")), V.KError),
    (dict(k=True), V.KError), (dict(k="1"), V.KError), (dict(lmax_log2=0), V.LmaxError),
    (dict(layer_id=2**32), V.LayerIdError), (dict(layer_id=-1), V.LayerIdError),
    (dict(R=0.0), V.RangeError), (dict(R=1e39), V.RangeError), (dict(R="10"), V.RangeError),
    (dict(residual=np.zeros((4, 5), np.int16)), TypeError),
    (dict(grad=np.zeros((4, 5), np.float64)), TypeError),
    # several faults: the first in the contract's order wins (refmodel/validation.py)
    (dict(R=0.0, block_size=0, residual=np.zeros((4, 5), np.int16)), V.RangeError),
    (dict(residual=np.zeros((4, 5), np.int16), grad=np.zeros((4, 5), np.float64)), TypeError),
    (dict(grad=np.full((4, 5), np.nan, np.float32), block_size=0, k=0), NonFiniteError),
    (dict(block_size=0, k=0, lmax_log2=0), V.BlockSizeError),
    (dict(k=0, lmax_log2=0, layer_id=-1), V.KError),
    (dict(lmax_log2=0, layer_id=-1), V.LmaxError),
])
def test_bad_arguments_raise_like_the_reference(kwargs, exc):
    args = dict(grad=np.ones((4, 5), np.float32)) | kwargs
    grad = args.pop("grad")
    errs = []
    for impl in (compress.compress_layer, fast.compress_layer):
        with pytest.raises(exc) as e:
            impl(grad, **args)
        errs.append((type(e.value), str(e.value)))
    assert errs[0] == errs[1]
    assert "\n" not in errs[0][1]                       # one line


@pytest.mark.parametrize("block_size", [2**63, 1e23, 2**32, -1])
def test_compress_step_refuses_block_sizes_the_kernel_would_misread(block_size):
    """Issue 9: 2**63 used to write uninitialised memory (CLI) or leave the residual at zero
    (API); 1e23 was a numba TypingError. Now a BlockSizeError before anything runs."""
    g = np.ones(16, np.float32)
    r = np.full(16, 5, np.int32)
    out = np.zeros(fast.max_step_words(16, 16, 1), np.uint32)
    for call in (lambda: fast.compress_step(g, r, 10.0, 1, block_size, 0, 8, out),
                 lambda: fast.compress_layers([g], [r], block_size=block_size, n_threads=1),
                 lambda: fast.compress_layers([g], [r], block_size=block_size, n_threads=2)):
        with pytest.raises(V.BlockSizeError):
            call()
        assert np.all(r == 5) and not out.any()


def test_compress_step_leaves_residual_untouched_on_error(rng):
    g = rng.standard_normal((8, 8)).astype(np.float32)
    r = rng.integers(-100, 100, (8, 8)).astype(np.int32)
    keep = r.copy()
    out = np.zeros(fast.max_step_words(64, 8, 1), np.uint32)
    g[7, 7] = np.nan
    with pytest.raises(NonFiniteError) as e:
        fast.compress_step(g, r, 10.0, 1, None, 0, 8, out)
    assert e.value.first_index == 63 and np.array_equal(r, keep)
    g[7, 7] = 0
    with pytest.raises(ValueError, match="max_step_words"):
        fast.compress_step(g, r, 10.0, 1, None, 0, 8, out[:-1])
    with pytest.raises(ValueError, match="residual"):
        fast.compress_step(g, r[:4], 10.0, 1, None, 0, 8, out)
    with pytest.raises(TypeError):
        fast.compress_step(g, r.astype(np.int64), 10.0, 1, None, 0, 8, out)
    with pytest.raises(ValueError, match="contiguous"):
        fast.compress_step(g, np.asfortranarray(r), 10.0, 1, None, 0, 8, out)
    frozen = r.copy()
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        fast.compress_step(g, frozen, 10.0, 1, None, 0, 8, out)
    assert np.array_equal(r, keep)
    info = fast.compress_step(g, r.reshape(-1), QuantConfig.from_range(10.0), 1, None, 0, 8, out)
    ref = compress.compress_layer(g, keep, k=1)
    assert np.array_equal(out[:info.n_words], ref.frame) and np.array_equal(r, ref.residual_out)


def test_compress_layers_validates_everything_first(rng):
    grads = [rng.standard_normal(s).astype(np.float32) for s in [(4, 4), (5,), (3, 3)]]
    rs = [np.full(g.shape, 7, np.int32) for g in grads]
    grads[2][1, 1] = np.nan
    for threads in (1, 2):
        with pytest.raises(NonFiniteError, match="layer 2") as e:
            fast.compress_layers(grads, rs, n_threads=threads, min_parallel=0)
        assert e.value.first_index == 4
        assert all(np.all(r == 7) for r in rs)        # no layer was touched
    grads[2][1, 1] = 0
    with pytest.raises(ValueError, match="k must be"):
        fast.compress_layers(grads, rs, k=[1, 1, 0])
    with pytest.raises(ValueError, match="entries"):
        fast.compress_layers(grads, rs, k=[1, 1])
    with pytest.raises(ValueError, match="residuals"):
        fast.compress_layers(grads, rs[:2])
    with pytest.raises(ValueError, match="n_threads"):
        fast.compress_layers(grads, rs, n_threads=0)
    assert all(np.all(r == 7) for r in rs)


# ------------------------------------------------------------------------------ real gradients

def load_digits(count: int):
    """sklearn's bundled 8x8 digits, read straight from its csv (importing sklearn.datasets
    takes seconds): (images, labels)."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or spec.origin is None:
        pytest.skip("scikit-learn (for its bundled digits data set) is not installed")
    path = Path(spec.origin).parent / "datasets" / "data" / "digits.csv.gz"
    if not path.exists():
        pytest.skip(f"{path} is missing from the scikit-learn install")
    data = np.loadtxt(path, delimiter=",", max_rows=count)
    return data[:, :64].reshape(-1, 1, 8, 8) / 16.0, data[:, 64].astype(np.int64)


@pytest.mark.torch
def test_small_cnn_gradients_on_digits():
    torch = pytest.importorskip("torch")
    images, labels = load_digits(192)
    x = torch.tensor(images, dtype=torch.float32)
    y = torch.tensor(labels)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 16, 3), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(16 * 4 * 4, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    params = list(model.parameters())
    ref_res = [np.zeros(tuple(p.shape), np.int32) for p in params]
    lean_res = [r.copy() for r in ref_res]
    saturated = 0
    for step in range(6):
        opt.zero_grad()
        batch = slice(32 * step, 32 * step + 32)
        torch.nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
        grads = [p.grad.detach().numpy().copy() for p in params]
        refs = []
        for i, (g, r) in enumerate(zip(grads, ref_res)):
            ref = compress.compress_layer(g, r, R=0.05, k=0.25, layer_id=i)
            assert_same_step(ref, fast.compress_layer(g, r, R=0.05, k=0.25, layer_id=i))
            refs.append(ref)
            ref_res[i] = ref.residual_out
            saturated += ref.sat_quant + ref.sat_feedback
        message, _ = fast.compress_layers(grads, lean_res, R=0.05, k=0.25)
        assert np.array_equal(message, np.concatenate([s.frame for s in refs]))
        assert all(np.array_equal(a, b) for a, b in zip(lean_res, ref_res))
        frames = zrle.decode_message(message, [g.size for g in grads])
        assert all(np.array_equal(f.values, s.payload.reshape(-1)) for f, s in zip(frames, refs))
        opt.step()
    assert saturated > 0            # R = 0.05 is small enough that the clamps are exercised


# ------------------------------------------------------------ one jitted call per message

MESSAGE_SHAPES = [(16, 3, 3, 3), (16,), (32, 16, 3, 3), (10, 32), (10,), (0, 4), (1,), (7, 5)]


def _message_case(rng, shapes=MESSAGE_SHAPES):
    grads = [(rng.standard_normal(s) * 0.3).astype(np.float32) for s in shapes]
    res = [rng.integers(-2**31 + 1, 2**31 - 1, s).astype(np.int32) for s in shapes]
    return grads, res


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("k", [1, 0.1, 3])
def test_compress_message_matches_the_reference(rng, threads, k):
    grads, res = _message_case(rng)
    ref = [compress.compress_layer(g, r, k=k, layer_id=i) for i, (g, r) in enumerate(zip(grads, res))]
    plan = fast.message_plan([g.shape for g in grads], k=k)
    assert plan is fast.message_plan([g.shape for g in grads], k=k)        # cached
    flat_g = np.concatenate([g.ravel() for g in grads])
    flat_r = np.concatenate([r.ravel() for r in res])
    message, info = fast.compress_message(flat_g, flat_r, plan, n_threads=threads, min_parallel=0)
    assert np.array_equal(message, np.concatenate([s.frame for s in ref]))
    assert np.array_equal(flat_r, np.concatenate([s.residual_out.ravel() for s in ref]))
    assert list(info.sat_quant) == [s.sat_quant for s in ref]
    assert list(info.sat_feedback) == [s.sat_feedback for s in ref]
    assert [i.k_eff for i in info.step_infos()] == [s.k_eff for s in ref]
    frames = zrle_numba.decode_message(message, [g.size for g in grads])
    assert all(np.array_equal(f.values, s.payload.ravel()) for f, s in zip(frames, ref))


def test_compress_message_nan_and_bad_arguments_touch_nothing(rng):
    grads, res = _message_case(rng)
    plan = fast.message_plan([g.shape for g in grads], k=2)
    flat_g = np.concatenate([g.ravel() for g in grads])
    flat_r = np.concatenate([r.ravel() for r in res])
    keep = flat_r.copy()
    at = int(plan.elem_offsets[3]) + 5
    flat_g[at] = np.nan
    for threads in (1, 2):
        with pytest.raises(NonFiniteError, match="layer 3") as e:
            fast.compress_message(flat_g, flat_r, plan, n_threads=threads, min_parallel=0)
        assert e.value.first_index == 5 and np.array_equal(flat_r, keep)
    flat_g[at] = 0
    with pytest.raises(V.ShapeError, match="plan"):
        fast.compress_message(flat_g[:-1], flat_r[:-1], plan)
    with pytest.raises(TypeError):
        fast.compress_message(flat_g, flat_r.astype(np.int64), plan)
    with pytest.raises(TypeError, match="MessagePlan"):
        fast.compress_message(flat_g, flat_r, [g.shape for g in grads])
    with pytest.raises(V.ShapeError, match="max_step_words"):
        fast.compress_message(flat_g, flat_r, plan, out=np.empty(plan.max_words - 1, np.uint32))
    with pytest.raises(V.KError):
        fast.message_plan([(4, 4), (3,)], k=[1, 0])
    with pytest.raises(V.ParameterError, match="entries"):
        fast.message_plan([(4, 4), (3,)], block_size=[2])
    with pytest.raises(V.BlockSizeError):
        fast.message_plan([(4, 4), (3,)], block_size=[2, 2**63])
    assert np.array_equal(flat_r, keep)


def test_compress_message_empty_and_layer_ids(rng):
    plan = fast.message_plan([])
    msg, info = fast.compress_message(np.zeros(0, np.float32), np.zeros(0, np.int32), plan)
    assert msg.size == 0 and info.n_words.size == 0
    g = rng.standard_normal(12).astype(np.float32)
    plan = fast.message_plan([(3, 4)], layer_ids=[77], k=1)
    msg, _ = fast.compress_message(g, np.zeros(12, np.int32), plan)
    assert np.array_equal(msg, compress.compress_layer(g.reshape(3, 4), layer_id=77).frame)


def _zrle_message(rng, sizes, density=0.3):
    layers = [np.where(rng.random(n) < density, rng.integers(-9, 9, n), 0).astype(np.int32)
              for n in sizes]
    return layers, np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


def test_zrle_message_one_call_matches_per_layer_frames(rng):
    sizes = [5, 0, 100, 1, 3000, 7, 600]
    layers, off = _zrle_message(rng, sizes)
    flat = np.concatenate(layers)
    ids = np.array([9, 8, 7, 6, 5, 4, 2**32 - 1])
    ref = np.concatenate([zrle.encode_frame(p, int(i), 2.0, 4) for p, i in zip(layers, ids)])
    out = np.empty(zrle_numba.message_words(off), np.uint32)
    n = zrle_numba.encode_message_into(flat, off, out, ids, 2.0, 4)
    assert np.array_equal(out[:n], ref)
    dec = np.full(flat.size, -1, np.int32)
    starts = zrle_numba.decode_message_into(out[:n], dec, off)
    assert np.array_equal(dec, flat) and starts[-1] == n
    with pytest.raises(ValueError, match="offsets"):
        zrle_numba.encode_message_into(flat, off[::-1], out)
    with pytest.raises(ValueError, match="layer_ids"):
        zrle_numba.encode_message_into(flat, off, out, ids[:-1])
    with pytest.raises(ValueError, match="may need"):
        zrle_numba.encode_message_into(flat, off, out[:-1])


@given(st.integers(0, 2**32 - 1), st.data())
def test_zrle_message_decode_raises_like_the_reference(seed, data):
    rng = np.random.default_rng(seed)
    sizes = data.draw(st.lists(st.integers(0, 40), min_size=1, max_size=5))
    layers, off = _zrle_message(rng, sizes)
    words = np.concatenate([zrle.encode_frame(p, i) for i, p in enumerate(layers)])
    cut = data.draw(st.integers(0, words.size + 3))
    mutated = np.concatenate([words, words[:3]])[:cut].copy()
    if mutated.size and data.draw(st.booleans()):
        at = data.draw(st.integers(0, mutated.size - 1))
        mutated[at] ^= np.uint32(1 << data.draw(st.integers(0, 31)))
    try:
        want = zrle.decode_message(mutated, sizes)
    except FrameError as e:
        with pytest.raises(type(e)) as got:
            zrle_numba.decode_message_into(mutated, np.zeros(int(off[-1]), np.int32), off)
        assert str(got.value) == str(e)
        return
    out = np.zeros(int(off[-1]), np.int32)
    zrle_numba.decode_message_into(mutated, out, off)
    assert np.array_equal(out, np.concatenate([f.values for f in want]) if want else out)


def test_numba_decode_frame_allocates_nothing_for_a_hostile_header():
    """Issue 9: an 8-word frame claiming n = 2**32 - 1 made the decoder reserve 16 GiB before
    reading the body. Frames above VALIDATE_FIRST elements are now validated first."""
    import tracemalloc
    header = np.array([zrle.MAGIC, zrle.VERSION | (8 << 8), 0, 2**32 - 1,
                       zrle.range_bits(10.0), 5, 0, 0], dtype=np.uint32)
    with pytest.raises(FrameError):               # compile (and cache) the kernels untraced
        zrle_numba.decode_frame(header)
    tracemalloc.start()
    try:
        with pytest.raises(FrameError) as got:
            zrle_numba.decode_frame(header)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    with pytest.raises(type(got.value)) as want:
        zrle.decode_frame(header)
    assert str(got.value) == str(want.value) and peak < 1 << 20
    big = np.zeros(zrle_numba.VALIDATE_FIRST + 5, np.int32)
    big[[0, -1]] = 3
    frame = zrle.encode_frame(big)
    assert np.array_equal(zrle_numba.decode_frame(frame).values, big)
    for cut in (frame[:-1], np.concatenate([frame[:-2], [frame[-2] + 1, frame[-1]]])):
        with pytest.raises(type(_error_of(zrle.decode_frame, cut))) as e:
            zrle_numba.decode_frame(cut)
        assert str(e.value) == str(_error_of(zrle.decode_frame, cut))


def _error_of(fn, *args):
    try:
        fn(*args)
    except FrameError as e:
        return e
    raise AssertionError("no error")
