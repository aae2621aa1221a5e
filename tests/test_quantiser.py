"""The quantiser (docs/spec.md §1) against exact rational arithmetic, on both implementations."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gradblock.fastpath import fast
from gradblock.refmodel import quantiser as Q
from gradblock.refmodel.quantiser import QMAX, NonFiniteError, QuantConfig, RangeError

IMPLS = {"numpy": Q.quantise, "numba": fast.quantise}
impls = pytest.mark.parametrize("quantise", list(IMPLS.values()), ids=list(IMPLS))

f32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
pos_f32 = st.floats(width=32, min_value=0.0, exclude_min=True, allow_infinity=False)


def bits_to_f32(bits) -> np.ndarray:
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def exact_code(x: float, R: float) -> Fraction:
    """x * QMAX / R as an exact rational."""
    return Fraction(float(x)) * QMAX / Fraction(float(R))


def rel_excess(cfg: QuantConfig) -> Fraction:
    """(M - S 2^k) / (S 2^k): how much larger the hardware multiplier is than S."""
    S2k = Fraction(float(QMAX) / float(np.float32(cfg.range))) * Fraction(2) ** cfg.k
    return (cfg.M - S2k) / S2k


def spec_code(x: float, cfg: QuantConfig) -> int:
    """Q by its definition: clamp(rhe(x * M / 2**k)); Python's round() on a Fraction rounds
    half to even."""
    if math.isinf(x):
        return int(math.copysign(QMAX, x))
    mag = min(QMAX, round(abs(Fraction(x)) * cfg.M / Fraction(2) ** cfg.k))
    return -mag if math.copysign(1.0, x) < 0 else mag


def q1(quantise, x, R) -> int:
    return int(quantise(np.array([x], dtype=np.float32), R).q[0])


# ------------------------------------------------------------------------------ accuracy

@impls
@given(x=st.floats(width=32, min_value=-10.0, max_value=10.0))
def test_r10_within_one_lsb_of_exact(quantise, x):
    got = q1(quantise, x, 10.0)
    assert abs(got - exact_code(x, 10.0)) <= 1


@impls
@given(R=pos_f32, frac=st.floats(min_value=-1.0, max_value=1.0))
def test_any_range_within_spec_bound(quantise, R, frac):
    x = float(np.float32(frac * R))
    if not np.isfinite(x) or abs(x) > R:
        x = float(np.copysign(R, frac))
    cfg = QuantConfig.from_range(R)
    v = exact_code(x, R)
    err = abs(q1(quantise, x, cfg) - v)
    # spec §1.2 bound, plus 2**-21 for S itself being one rounded division
    assert err < Fraction(1, 2) + abs(v) * rel_excess(cfg) + Fraction(1, 2**21)
    assert err < Fraction(3, 2)


@impls
@given(x=st.floats(width=32, allow_nan=False), R=pos_f32)
def test_matches_definition_exactly(quantise, x, R):
    cfg = QuantConfig.from_range(R)
    assert q1(quantise, x, cfg) == spec_code(x, cfg)


def test_r10_excess_matches_spec():
    cfg = QuantConfig.from_range(10.0)
    excess = cfg.M - Fraction(float(QMAX) / 10.0) * 16
    assert abs(excess - Fraction(8, 10)) < Fraction(1, 10**6)
    assert abs(float(rel_excess(cfg)) - 2.3e-10) < 0.1e-10


@impls
@given(x=f32, R=pos_f32)
def test_outside_range_saturates_and_is_counted(quantise, x, R):
    res = quantise(np.array([x], dtype=np.float32), R)
    if abs(x) > R:
        assert int(res.q[0]) == (QMAX if x > 0 else -QMAX)
        assert res.saturated == 1
    else:
        assert res.saturated == 0
        assert abs(int(res.q[0])) <= QMAX


@impls
@given(x=f32)
def test_odd_symmetry(quantise, x):
    assert q1(quantise, -x, 10.0) == -q1(quantise, x, 10.0)


@impls
@given(xs=st.lists(st.floats(width=32, min_value=-10, max_value=10), min_size=2, max_size=2))
def test_monotone(quantise, xs):
    a, b = sorted(xs)
    assert q1(quantise, a, 10.0) <= q1(quantise, b, 10.0)


# ------------------------------------------------------------------------------ Q(+-R)

R_SWEEP = ([2.0**e for e in range(-149, 128)] + [10.0, 1e-30, 3e38, 1.0, 0.1, 7.0, 1e-45,
           float(np.finfo(np.float32).max), float(np.finfo(np.float32).tiny)]
           + [float(v) for v in np.random.default_rng(7).uniform(1e-6, 1e6, 200).astype(np.float32)]
           + [float(v) for v in np.random.default_rng(8).integers(1, 0x7F800000, 200, dtype=np.uint32)
              .view(np.float32)])


@impls
def test_plus_minus_range_is_plus_minus_qmax(quantise):
    Rs = np.array(R_SWEEP, dtype=np.float32)
    for R in Rs:
        res = quantise(np.array([R, -R], dtype=np.float32), float(R))
        assert res.q.tolist() == [QMAX, -QMAX], f"R = {R!r}"
        assert res.saturated == 0, f"R = {R!r}: |x| = R is not outside the range"
        with np.errstate(over="ignore"):             # above the largest finite R is +Inf
            above = np.nextafter(R, np.float32(np.inf))
        res = quantise(np.array([above, -above], dtype=np.float32), float(R))
        assert res.q.tolist() == [QMAX, -QMAX] and res.saturated == 2, f"R = {R!r}"


# ------------------------------------------------------------------------------ float classes

@impls
def test_float32_classes(quantise):
    cases = {  # bits: expected code for R = 10
        0x00000000: 0, 0x80000000: 0,                # +-0
        0x00000001: 0, 0x807FFFFF: 0,                # smallest / largest subnormal
        0x00800000: 0,                               # smallest normal
        0x7F7FFFFF: QMAX, 0xFF7FFFFF: -QMAX,         # largest finite: saturates
        0x7F800000: QMAX, 0xFF800000: -QMAX,         # +-Inf
    }
    x = bits_to_f32(list(cases))
    res = quantise(x, 10.0)
    assert res.q.tolist() == list(cases.values())
    assert res.saturated == 4


@impls
def test_subnormals_with_a_tiny_range(quantise):
    R = float(bits_to_f32([0x00000010])[0])           # 16 * 2**-149
    cfg = QuantConfig.from_range(R)
    x = bits_to_f32([0x00000001, 0x00000008, 0x00000010, 0x80000010, 0x00000011])
    res = quantise(x, R)
    small = [spec_code(float(v), cfg) for v in x[:2]]
    assert all(abs(c - Fraction(b, 16) * QMAX) <= 1 for c, b in zip(small, (1, 8)))
    assert res.q.tolist() == small + [QMAX, -QMAX, QMAX]
    assert res.saturated == 1


@impls
def test_nan_raises_naming_count_and_first_index(quantise):
    x = np.zeros((3, 4), dtype=np.float32)
    x[1, 2] = np.nan
    x[2, 3] = bits_to_f32([0xFFC00001])[0]             # a negative NaN with another payload
    x[0, 0] = np.inf                                 # Inf is not NaN
    with pytest.raises(NonFiniteError) as e:
        quantise(x, 10.0, where="conv1.weight")
    assert (e.value.count, e.value.first_index) == (2, 6)
    assert "conv1.weight" in str(e.value) and "2 NaN" in str(e.value)


@impls
def test_every_nan_pattern_is_rejected(quantise):
    for bits in (0x7F800001, 0x7FC00000, 0x7FFFFFFF, 0xFF800001, 0xFFFFFFFF):
        with pytest.raises(NonFiniteError):
            quantise(bits_to_f32([bits]), 10.0)


@impls
def test_non_float32_is_a_type_error(quantise):
    with pytest.raises(TypeError, match="float32"):
        quantise(np.zeros(3, dtype=np.float64), 10.0)


@impls
def test_shape_is_kept(quantise):
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 10
    assert quantise(x, 10.0).q.shape == (2, 3, 4)
    assert quantise(np.float32(1.5), 10.0).q.shape == ()


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
@pytest.mark.parametrize("R", [0.0, -1.0, float("inf"), float("nan"), 1e39, -0.0])
def test_bad_range_rejected(R):
    with pytest.raises(RangeError):
        QuantConfig.from_range(R)
    with pytest.raises(RangeError):
        fast.quantise(np.zeros(2, np.float32), R)


# ------------------------------------------------------------------------------ (M, k)

@given(R=pos_f32)
def test_multiplier_properties(R):
    M, k = Q.multiplier(float(np.float32(R)))
    S = Fraction(float(QMAX) / float(np.float32(R)))   # one IEEE division, then exact
    assert 2**31 <= M <= 2**32 - 2
    assert S * Fraction(2) ** k > QMAX >= S * Fraction(2) ** (k - 1)   # k minimal
    assert M == math.ceil(S * Fraction(2) ** k)


def test_multiplier_for_r10():
    cfg = QuantConfig.from_range(10.0)
    assert (cfg.M, cfg.k, cfg.range_bits) == (0xCCCCCCCC, 4, 0x41200000)


# ------------------------------------------------------------------------------ spec §6

SPEC_TABLE = [(0x41200000, 0x7FFFFFFF), (0xC1200000, -0x7FFFFFFF), (0x40A00000, 0x40000000),
              (0x3A83126F, 0x000346DC), (0x00000001, 0), (0x7F800000, 0x7FFFFFFF)]


@impls
def test_spec_worked_examples(quantise):
    bits, codes = zip(*SPEC_TABLE)
    res = quantise(bits_to_f32(list(bits)), 10.0)
    assert res.q.tolist() == list(codes)
    assert res.saturated == 1                        # +Inf only: |+-10| is not above R
    assert float(bits_to_f32([0x3A83126F])[0]) == pytest.approx(0.001)


def test_spec_rounding_detail():
    """10.0: m = 10485760, E = -20, t = 24: rhe(2147483647.5) = 2147483648 (even), clamped."""
    P = 10485760 * 0xCCCCCCCC
    assert Fraction(P, 2**24) == Fraction(4294967295, 2)
    assert q1(Q.quantise, 10.0, 10.0) == QMAX


@impls
def test_round_half_to_even(quantise):
    # R = 10: M = 0xCCCCCCCC has two trailing zero bits, so x = 2 and x = 6 land exactly
    # on halves: 2M/16 = 429496729.5 rounds up to even, 6M/16 = 1288490188.5 rounds down.
    assert Fraction(2 * 0xCCCCCCCC, 16) == Fraction(858993459, 2)
    assert Fraction(6 * 0xCCCCCCCC, 16) == Fraction(2576980377, 2)
    assert [q1(quantise, x, 10.0) for x in (2.0, 6.0, -2.0, -6.0)] == \
        [429496730, 1288490188, -429496730, -1288490188]


# ------------------------------------------------------------------------------ §1.3

@given(v=st.integers(-QMAX, QMAX), R=pos_f32)
def test_dequantise_formula(v, R):
    R32 = float(np.float32(R))
    got = Q.dequantise(np.array([v], dtype=np.int32), R32)[0]
    assert got.dtype == np.float32
    assert got == np.float32(float(v) * (R32 / float(QMAX)))     # one multiply, one rounding


@given(s=st.integers(-(2**40), 2**40), n=st.integers(1, 2**21))
def test_average_formula(s, n):
    s = max(-n * QMAX, min(n * QMAX, s))
    got = Q.average(np.array([s], dtype=np.int64), n, 10.0)[0]
    assert got == np.float32(float(s) * (10.0 / (float(QMAX) * float(n))))
    # float64(s) is exact, so the only roundings are c, the product and the float32 cast
    exact = Fraction(s) * 10 / (QMAX * n)
    assert abs(Fraction(float(got)) - exact) <= abs(exact) * Fraction(1, 2**23) + Fraction(1, 2**149)


def test_dequantise_inverts_quantise_within_one_code():
    x = np.linspace(-10, 10, 10001, dtype=np.float32)
    back = Q.dequantise(Q.quantise(x, 10.0).q, 10.0)
    lsb = 10.0 / QMAX                                # |Q - exact| <= 1 code, then one rounding
    err = np.abs(back.astype(np.float64) - x.astype(np.float64))
    assert np.all(err <= 1.0001 * lsb + np.spacing(np.abs(x)).astype(np.float64) / 2)


def test_average_of_identical_codes_is_their_dequantised_value():
    v = np.array([QMAX, -QMAX, 12345, 0, -1], dtype=np.int64)
    one = Q.dequantise(v, 10.0)
    assert np.array_equal(Q.average(v, 1, 10.0), one)
    for n in (3, 8, 1000):                           # c differs by one rounding: <= 1 ulp apart
        got = Q.average(v * n, n, 10.0)
        assert np.all(np.abs(got - one) <= np.spacing(np.abs(one)))
    with pytest.raises(ValueError):
        Q.average(v, 0, 10.0)


@given(st.floats(min_value=2.0**-149, max_value=float(np.finfo(np.float32).max), allow_nan=False,
                 allow_infinity=False, width=32))
def test_saturation_threshold_splits_the_codes(R):
    """The numba kernels replace the saturation logic by one comparison of |x|'s bits
    against quantiser.saturation_bits(cfg): exactly the patterns coded QMAX."""
    cfg = QuantConfig.from_range(R)
    t = Q.saturation_bits(cfg)
    assert t <= cfg.range_bits                       # R itself saturates
    around = np.arange(max(t - 2, 0), min(t + 3, 0x7F800001), dtype=np.uint32)
    x = np.concatenate([around, around | np.uint32(0x80000000)]).view(np.float32)
    ref = Q.quantise(x, cfg).q
    assert np.array_equal(np.abs(ref) == 2**31 - 1, np.concatenate([around, around]) >= t)
    assert np.array_equal(fast.quantise(x, cfg).q, ref)
