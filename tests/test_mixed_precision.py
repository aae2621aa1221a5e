"""bfloat16 and float16 gradients through every backend's array API (docs/spec.md §1.2).

The rule: a half-precision gradient is widened exactly to float32 and the contract runs as it
is, so every result (codes, residual, frame words, counts, errors) equals the float32 run on
the widened array bit for bit; a float32 result written in the gradient's dtype is rounded by
round-to-nearest-even (refmodel.precision.round_to, checked against torch's conversions).
Other dtypes are refused with the same class (TypeError) by numpy, numba and torch.

numpy has no bfloat16: the numpy / numba rows use ml_dtypes' (skipped, saying so, where it is
not installed); the torch rows also take torch's own bfloat16 tensors, with or without it.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gradblock.backends import BACKEND_NAMES, available_backends, get_backend
from gradblock.refmodel import precision
from gradblock.refmodel.quantiser import QMAX, NonFiniteError, average
from gradblock.refmodel.validation import check_gradient

BF16 = precision.bfloat16_dtype()
NO_BF16 = "ml_dtypes is not installed: numpy has no bfloat16 without it"
HALF = [pytest.param(np.dtype(np.float16), id="float16"),
        pytest.param(BF16, id="bfloat16", marks=pytest.mark.skipif(BF16 is None, reason=NO_BF16))]

# per dtype: +Inf, largest finite, smallest normal, largest and smallest subnormal, 1.0, a NaN
EDGES = {"float16": [0x7C00, 0x7BFF, 0x0400, 0x03FF, 0x0001, 0x3C00, 0x7E00, 0x7C01],
         "bfloat16": [0x7F80, 0x7F7F, 0x0080, 0x007F, 0x0001, 0x3F80, 0x7FC0, 0x7F81]}
RANGES = [10.0, 1.0, 1e-6, 65504.0, 3.0e38, 1e-40]


# the torch backend on a GPU too, where one is here (a GPU check runs these rows)
BACKENDS = [*BACKEND_NAMES, "torch-cuda"]


def _backend(name):
    reason = available_backends()[name.split("-")[0]]
    if reason:
        pytest.skip(reason)
    if name == "torch-cuda":
        import torch
        if not torch.cuda.is_available():
            pytest.skip("no CUDA device (torch.cuda.is_available() is False): the CPU torch "
                        "rows run the same ops")
        return get_backend("torch", device="cuda")
    return get_backend(name)


def _is_nan16(bits: np.ndarray, dtype: np.dtype) -> np.ndarray:
    exp_mask = 0x7C00 if dtype == np.float16 else 0x7F80
    return ((bits & exp_mask) == exp_mask) & ((bits & (0x7FFF ^ exp_mask)) != 0)


@st.composite
def half_cases(draw, dtype_name: str):
    rows, cols = draw(st.integers(1, 5)), draw(st.integers(1, 6))
    n = rows * cols
    word = st.one_of(st.integers(0, 0xFFFF),
                     st.sampled_from(EDGES[dtype_name]).flatmap(
                         lambda b: st.sampled_from([b, b | 0x8000])))
    bits = np.array(draw(st.lists(word, min_size=n, max_size=n)), dtype=np.uint16)
    if not draw(st.booleans()):                      # most cases run the step, not the NaN error
        dt = np.dtype(np.float16) if dtype_name == "float16" else BF16
        bits[_is_nan16(bits, dt)] = 0
    res = draw(st.lists(st.one_of(st.integers(-QMAX, QMAX), st.sampled_from([QMAX, -QMAX, 0])),
                        min_size=n, max_size=n))
    k = draw(st.one_of(st.integers(1, rows + 1), st.sampled_from([0.25, 0.5])))
    return (bits.reshape(rows, cols), np.array(res, dtype=np.int32).reshape(rows, cols),
            draw(st.sampled_from(RANGES)), k, draw(st.sampled_from(["l1", "l2"])))


def _step_or_error(b, grad, residual, **kw):
    try:
        r = b.compress_layer(b.asarray(grad), b.asarray(residual), **kw)
    except NonFiniteError as e:
        return ("NonFiniteError", str(e))
    return (b.to_numpy(r.payload), b.to_numpy(r.residual_out), b.frame_to_numpy(r.frame),
            np.asarray(b.to_numpy(r.selected) if not isinstance(r.selected, np.ndarray)
                       else r.selected), r.k_eff, r.sat_quant, r.sat_feedback)


def _same(a, b) -> bool:
    if isinstance(a[0], str) or isinstance(b[0], str):   # a NonFiniteError on either side
        return a == b
    return all(np.array_equal(x, y) for x, y in zip(a[:4], b[:4])) and a[4:] == b[4:]


@pytest.mark.parametrize("name", BACKENDS)
@pytest.mark.parametrize("dtype", HALF)
def test_compress_layer_of_a_half_gradient_is_the_widened_float32_step(name, dtype):
    """Random bit patterns (Inf, NaN, subnormals, the extremes among them), random residuals,
    ranges from 1e-40 to 3e38: every output of the half-precision step equals the float32
    step on the widened array, in this backend and in the numpy reference."""
    b, ref = _backend(name), get_backend("numpy")

    @settings(max_examples=30)
    @given(half_cases(dtype.name))
    def check(case):
        bits, residual, R, k, norm = case
        grad = bits.view(dtype)
        wide = grad.astype(np.float32)               # ml_dtypes' / numpy's own widening
        kw = dict(R=R, k=k, layer_id=3, where="w", norm=norm)
        got = _step_or_error(b, grad, residual, **kw)
        assert _same(got, _step_or_error(b, wide, residual, **kw))
        assert _same(got, _step_or_error(ref, wide, residual, **kw))

    check()


@pytest.mark.parametrize("name", BACKENDS)
@pytest.mark.parametrize("dtype", HALF)
def test_quantise_of_a_half_gradient_and_the_nonfinite_rules(name, dtype):
    """±Inf saturates to ±QMAX and counts (as in float32); a NaN raises the float32 error,
    count and first index included."""
    b = _backend(name)
    wide = np.array([np.inf, -np.inf, 1.0, -0.0, 12.0], dtype=np.float32)
    q, sat = b.quantise(b.asarray(wide.astype(dtype)), 10.0)
    assert np.array_equal(b.to_numpy(q), get_backend("numpy").quantise(wide, 10.0)[0])
    assert b.to_numpy(q)[:2].tolist() == [QMAX, -QMAX] and sat == 3
    bits = np.array(EDGES[dtype.name] * 3, dtype=np.uint16)
    grad = bits.view(dtype)
    with pytest.raises(NonFiniteError) as half:
        b.quantise(b.asarray(grad), 10.0, where="x")
    with pytest.raises(NonFiniteError) as wide:
        b.quantise(b.asarray(grad.astype(np.float32)), 10.0, where="x")
    assert str(half.value) == str(wide.value) and half.value.count == 6
    clean = grad[~_is_nan16(bits, dtype)]
    for R in RANGES:
        got, want = b.quantise(b.asarray(clean), R), b.quantise(b.asarray(clean.astype(np.float32)), R)
        assert np.array_equal(b.to_numpy(got[0]), b.to_numpy(want[0])) and got[1] == want[1]


@pytest.mark.parametrize("dtype", HALF)
def test_numba_lean_entry_points_widen_too(dtype, rng):
    """compress_step, compress_layers and compress_message (the in-place numba API) on half
    gradients: the residuals and frames of the widened float32 arrays."""
    from gradblock.fastpath import fast
    shapes = [(4, 3), (7,), (2, 2, 3)]
    grads = []
    for s in shapes:
        bits = rng.integers(0, 0x10000, size=s).astype(np.uint16)
        bits[_is_nan16(bits, dtype)] = 0x0001
        grads.append(bits.view(dtype))
    wides = [g.astype(np.float32) for g in grads]
    res0 = [rng.integers(-QMAX, QMAX, size=s, dtype=np.int64).astype(np.int32) for s in shapes]

    r_half, r_wide = [r.copy() for r in res0], [r.copy() for r in res0]
    m_half, _ = fast.compress_layers(grads, r_half, R=1.0, k=[1, 2, 1])
    m_wide, _ = fast.compress_layers(wides, r_wide, R=1.0, k=[1, 2, 1])
    assert np.array_equal(m_half, m_wide) and all(map(np.array_equal, r_half, r_wide))

    out_h, out_w = (np.zeros(256, dtype=np.uint32) for _ in range(2))
    rh, rw = res0[0].copy(), res0[0].copy()
    ih = fast.compress_step(grads[0], rh, 1.0, 1, None, 0, 8, out_h)
    iw = fast.compress_step(wides[0], rw, 1.0, 1, None, 0, 8, out_w)
    assert ih == iw and np.array_equal(out_h, out_w) and np.array_equal(rh, rw)

    plan = fast.message_plan(shapes, 1, None, None, 8)
    flat_h = np.concatenate([g.reshape(-1) for g in grads])
    flat_w = np.concatenate([w.reshape(-1) for w in wides])
    rh, rw = (np.concatenate([r.reshape(-1) for r in res0]) for _ in range(2))
    mh, _ = fast.compress_message(flat_h, rh, plan, 1.0)
    mw, _ = fast.compress_message(flat_w, rw, plan, 1.0)
    assert np.array_equal(mh, mw) and np.array_equal(rh, rw)


@pytest.mark.parametrize("dtype", HALF)
def test_momentum_layer_widens_in_every_backend(dtype, rng):
    """§7's step takes half gradients as well (it quantises through the same entry points)."""
    from gradblock.fastpath import momentum_numba
    from gradblock.refmodel import momentum
    g = (rng.standard_normal((5, 4)) * 3).astype(np.float32).astype(dtype)
    u = rng.integers(-2**20, 2**20, size=(5, 4)).astype(np.int32)
    want = momentum.momentum_layer(g.astype(np.float32), None, u, 0.9, R=10.0, k=2)
    impls = [momentum.momentum_layer, momentum_numba.momentum_layer]
    for impl in impls:
        got = impl(g, None, u, 0.9, R=10.0, k=2)
        assert np.array_equal(got.frame, want.frame)
        assert np.array_equal(got.velocity_out, want.velocity_out)
        assert np.array_equal(got.residual_out, want.residual_out)
    if available_backends()["torch"] is None:
        from gradblock.torchstep import momentum as tm
        t = get_backend("torch")
        got = tm.momentum_layer(t.asarray(g), None, t.asarray(u), 0.9, R=10.0, k=2)
        assert np.array_equal(t.frame_to_numpy(got.frame), want.frame)
        assert np.array_equal(t.to_numpy(got.velocity_out), want.velocity_out)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_torch_takes_its_own_half_tensors(device):
    """torch.bfloat16 / torch.float16 tensors (no ml_dtypes needed): the step of .float()."""
    torch = pytest.importorskip("torch", reason="the torch backend needs torch")
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device (torch.cuda.is_available() is False)")
    from gradblock import torchstep
    g = torch.Generator().manual_seed(5)
    for dtype in (torch.bfloat16, torch.float16):
        x = (torch.randn(6, 5, generator=g) * 4).to(dtype).to(device)
        x[0, 0], x[1, 1] = float("inf"), -float("inf")
        a = torchstep.compress_layer(x, None, R=10.0, k=2)
        b = torchstep.compress_layer(x.float(), None, R=10.0, k=2)
        assert torch.equal(a.frame, b.frame) and torch.equal(a.residual_out, b.residual_out)
        assert a.sat_quant == b.sat_quant == 2
        x[2, 3] = float("nan")
        with pytest.raises(NonFiniteError, match="1 NaN value.* first at flat index 13"):
            torchstep.quantise(x, 10.0)


def test_torch_group_and_global_paths_widen():
    torch = pytest.importorskip("torch", reason="the torch backend needs torch")
    from gradblock.torchstep import group
    g = torch.Generator().manual_seed(6)
    shapes = [(4, 3), (5,)]
    grads = [(torch.randn(s, generator=g) * 2).bfloat16() for s in shapes]
    plan = group.plan_group(shapes, k=[1, 2], layer_ids=[0, 1], R=10.0)
    a = group.compress_group(plan, grads, [None, None], R=10.0)
    b = group.compress_group(plan, [x.float() for x in grads], [None, None], R=10.0)
    assert torch.equal(a.message, b.message)
    assert all(torch.equal(x, y) for x, y in zip(a.residuals, b.residuals))


# ---------------------------------------------------------------- dtypes that are refused

BAD = [np.float64, np.int32, np.int64, np.uint16, np.complex64, np.bool_, object]


@pytest.mark.parametrize("bad", BAD, ids=lambda d: np.dtype(d).name)
def test_other_dtypes_raise_the_same_class_everywhere(bad):
    """numpy, numba and torch refuse the same input with TypeError naming the accepted dtypes."""
    a = np.zeros((2, 3), dtype=bad)
    raised = {}
    for name in BACKEND_NAMES:
        if available_backends()[name]:
            continue
        b = get_backend(name)
        if name == "torch":
            if bad in (object, np.uint16):
                continue                            # no torch tensor of these to pass
            import torch
            x = torch.from_numpy(a)
        else:
            x = a
        for call in (lambda: b.quantise(x, 10.0), lambda: b.compress_layer(x, None, R=10.0)):
            with pytest.raises(Exception) as e:
                call()
            raised.setdefault(name, set()).add(type(e.value))
            assert "must be float32, float16 or bfloat16" in str(e.value), str(e.value)
            assert "\n" not in str(e.value)
    assert all(v == {TypeError} for v in raised.values()), raised
    with pytest.raises(TypeError, match="must be float32, float16 or bfloat16, got"):
        check_gradient(a)


def test_cli_takes_float16_and_refuses_the_rest(tmp_path, capsys):
    """`gradblock step` on a float16 .npy writes the frame and residual of the widened float32
    file; float64 (and a '<V2' file, which is what a bfloat16 .npy is) exit 2, one line."""
    from gradblock import cli
    rng = np.random.default_rng(9)
    g16 = (rng.standard_normal((6, 4)) * 5).astype(np.float16)
    np.save(tmp_path / "g16.npy", g16)
    np.save(tmp_path / "g32.npy", g16.astype(np.float32))
    for tag in ("16", "32"):
        assert cli.main(["step", str(tmp_path / f"g{tag}.npy"), "-", "--k", "2", "--frame",
                         str(tmp_path / f"f{tag}.bin"), "--residual-out",
                         str(tmp_path / f"r{tag}.npy")]) == 0
    assert (tmp_path / "f16.bin").read_bytes() == (tmp_path / "f32.bin").read_bytes()
    assert np.array_equal(np.load(tmp_path / "r16.npy"), np.load(tmp_path / "r32.npy"))
    capsys.readouterr()
    for bad in (np.float64, "V2"):
        np.save(tmp_path / "bad.npy", np.zeros(3, dtype=bad))
        assert cli.main(["quantise", str(tmp_path / "bad.npy"), str(tmp_path / "q.npy")]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "must be float32 or float16" in err, err
        assert not (tmp_path / "q.npy").exists()


# ------------------------------------------------------------------ the conversions themselves

def _edge_f32_bits() -> np.ndarray:
    """Every high half with the low halves that decide a bfloat16 rounding (0, just below a
    tie, the tie, just above, all ones): ties, subnormals, overflow to Inf, NaN, for both signs."""
    hi = np.arange(0x10000, dtype=np.uint32) << np.uint32(16)
    lows = np.array([0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF], dtype=np.uint32)
    return (hi[:, None] | lows[None, :]).reshape(-1)


def _torch_bf16_bits(f32: np.ndarray) -> np.ndarray:
    import torch
    return torch.from_numpy(f32).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)


def _check_bf16_against_torch(bits: np.ndarray) -> None:
    f32 = bits.view(np.float32)
    want = _torch_bf16_bits(f32)
    got = precision.bf16_bits_from_f32_bits(bits)
    nan_in = (bits & 0x7FFFFFFF) > 0x7F800000
    nan_got = ((got & 0x7F80) == 0x7F80) & ((got & 0x7F) != 0)
    nan_want = ((want & 0x7F80) == 0x7F80) & ((want & 0x7F) != 0)
    assert np.array_equal(nan_got, nan_in) and np.array_equal(nan_want, nan_in)
    ok = nan_in | (got == want)                      # NaN: any NaN (torch's sign varies by path)
    assert ok.all(), [hex(int(b)) for b in bits[~ok][:5]]
    assert np.array_equal(got[nan_in] & 0x8000, (bits[nan_in] >> 16).astype(np.uint16) & 0x8000)


def test_bfloat16_rounding_matches_torch_on_sampled_and_edge_patterns():
    pytest.importorskip("torch", reason="torch's bfloat16 conversion is the reference here")
    rng = np.random.default_rng(1)
    bits = np.concatenate([_edge_f32_bits(),
                           rng.integers(0, 2**32, size=1 << 20, dtype=np.uint64).astype(np.uint32)])
    _check_bf16_against_torch(bits)
    # the cases by hand: ties to even, the largest finite rounding to Inf, NaN never Inf
    cases = {0x3F808000: 0x3F80, 0x3F818000: 0x3F82, 0x3F808001: 0x3F81, 0x00008000: 0x0000,
             0x00018000: 0x0002, 0x7F7F7FFF: 0x7F7F, 0x7F7F8000: 0x7F80, 0xFF7FFFFF: 0xFF80,
             0x7F800000: 0x7F80, 0x7F800001: 0x7FC0, 0xFFC00000: 0xFFC0, 0x80000000: 0x8000}
    got = precision.bf16_bits_from_f32_bits(np.array(list(cases), dtype=np.uint32))
    assert [hex(int(v)) for v in got] == [hex(v) for v in cases.values()]


@pytest.mark.slow
def test_bfloat16_rounding_matches_torch_on_every_float32():
    """All 2^32 float32 bit patterns, 2^24 at a time (about a minute on 2 cores)."""
    pytest.importorskip("torch", reason="torch's bfloat16 conversion is the reference here")
    step = 1 << 24
    base = np.arange(step, dtype=np.uint32)
    for start in range(0, 1 << 32, step):
        _check_bf16_against_torch(base + np.uint32(start))


@pytest.mark.skipif(BF16 is None, reason=NO_BF16)
def test_round_to_and_widen_agree_with_ml_dtypes_and_torch():
    torch = pytest.importorskip("torch", reason="torch's conversions are a reference here")
    rng = np.random.default_rng(2)
    bits = np.concatenate([_edge_f32_bits(),
                           rng.integers(0, 2**32, size=1 << 18, dtype=np.uint64).astype(np.uint32)])
    x = bits.view(np.float32)
    not_nan = ~np.isnan(x)
    ours = precision.round_to(x, BF16)
    assert ours.dtype == BF16
    assert np.array_equal(ours[not_nan].view(np.uint16), x[not_nan].astype(BF16).view(np.uint16))
    h = precision.round_to(x, np.float16)
    assert np.array_equal(h[not_nan].view(np.uint16),
                          torch.from_numpy(x[not_nan]).half().numpy().view(np.uint16))
    assert np.isnan(h[~not_nan]).all() and np.isnan(ours[~not_nan].astype(np.float32)).all()
    # widening: all 65536 patterns of each, against torch's .float() (NaN: NaN of the same sign)
    all16 = np.arange(0x10000, dtype=np.uint32).astype(np.uint16)
    for dt, tdt in ((np.dtype(np.float16), torch.float16), (BF16, torch.bfloat16)):
        w = precision.widen(all16.view(dt))
        t = torch.from_numpy(all16.view(np.int16)).view(tdt).float().numpy()
        nan = np.isnan(t)
        assert np.array_equal(np.isnan(w), nan)
        assert np.array_equal(w[~nan].view(np.uint32), t[~nan].view(np.uint32))
        assert np.array_equal(np.signbit(w[nan]), np.signbit(t[nan]))
        assert np.array_equal(precision.round_to(w, dt)[~nan].view(np.uint16), all16[~nan])


@pytest.mark.parametrize("name", BACKENDS)
@pytest.mark.parametrize("dtype", HALF)
def test_average_rounds_the_float32_mean_to_the_parameters_dtype(name, dtype):
    """§1.2 / §5: average(s, N, R, dtype) is the float32 mean rounded to dtype (RNE), the same
    bits in every backend; overflow past the dtype's largest value is ±Inf, tiny means are
    its subnormals or 0."""
    b = _backend(name)
    rng = np.random.default_rng(3)
    n = 3
    s = np.concatenate([rng.integers(-n * QMAX, n * QMAX, size=4000),
                        [n * QMAX, -n * QMAX, 0, 1, -1, QMAX, 12345]]).astype(np.int64)
    for R in (10.0, 1e5, 3.0e38, 1e-30):
        want = precision.round_to(average(s, n, R), dtype)
        tdt = dtype
        if name.startswith("torch"):
            import torch
            tdt = torch.float16 if dtype == np.float16 else torch.bfloat16
        got = b.to_numpy(b.average(b.asarray(s), n, R, dtype=tdt))
        assert got.dtype == dtype
        assert np.array_equal(got.view(np.uint16), want.view(np.uint16)), (name, R)
    top = precision.round_to(average(np.array([n * QMAX]), n, 1e5), dtype).astype(np.float32)
    assert np.isinf(top[0]) == (dtype == np.float16)     # 1e5 > 65504, < bfloat16's largest
