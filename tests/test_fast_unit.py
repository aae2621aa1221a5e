"""The float64 pass 1 of the numba step (fastpath.step_kernels._unit_fast): exact wherever it
does not flag its unit, and every flagged unit redone by the integer kernel. The inputs that
float64 alone gets wrong are built here on purpose: a product g * M * 2**-k that rounds onto
a half-integer it is not (the only way one float64 rounding can change RNE), exact ties,
codes and sums at the edge of QMAX."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from gradblock.fastpath import fast
from gradblock.fastpath import step_kernels as K
from gradblock.refmodel import compress
from gradblock.refmodel.quantiser import QMAX, QuantConfig, quantise

RANGES = [10.0, 1.0, 0.37, 1e-3, 3e4]
L1 = -1


def _half_integer_products(cfg: QuantConfig, exact_ties: bool) -> list[float]:
    """float32 values g whose x = g * M / 2**k is within QMAX - 1 and whose float64 product
    fl(g * (M * 2**-k)) is a half-integer: x itself is not (exact_ties False: float64 rounds
    it the wrong way) or x is one (exact_ties True)."""
    out = []
    M, k = cfg.M, cfg.k
    z = (M & -M).bit_length() - 1                     # M = M_odd * 2**z
    for t in range(23, 57):
        for delta in ((0,) if exact_ties else (-4, -3, -2, -1, 1, 2, 3, 4)):
            target = (1 << (t - 1)) + delta           # P mod 2**t, P = m * M
            if target % (1 << z):
                continue
            mod = 1 << (t - z)
            if mod <= 1:
                continue
            m0 = (target >> z) * pow(M >> z, -1, mod) % mod
            for m in range(m0, 1 << 24, mod):
                if m == 0:
                    continue
                P = m * M
                x = Fraction(P, 1 << t)
                if x >= QMAX - 1:
                    break
                fl = float(P) / 2.0 ** t              # one correctly rounded product
                if fl != math.floor(fl) + 0.5 or (Fraction(fl) == x) != exact_ties:
                    continue
                g = np.float32(math.ldexp(m, k - t))
                if Fraction(float(g)) * M * Fraction(2) ** -k != x:   # not a float32
                    continue
                out.append(float(g))
                if len(out) >= 40:
                    return out
    return out


def _cases(cfg: QuantConfig) -> tuple[np.ndarray, np.ndarray]:
    wrong = _half_integer_products(cfg, exact_ties=False)
    ties = _half_integer_products(cfg, exact_ties=True)
    g = np.array(wrong + ties, dtype=np.float32)
    g = np.concatenate([g, -g])
    return g, wrong


@pytest.mark.parametrize("R", RANGES)
def test_float64_alone_would_round_these_wrong(R):
    """The cases are real: plain float64 rounding gives another code than the reference for
    some of them (the others land, by the tie rule, where x is), and the fast unit flags each
    one, so the integer kernel redoes its unit."""
    cfg = QuantConfig.from_range(R)
    g, wrong = _cases(cfg)
    assert len(wrong) >= 3, "too few float64 double-rounding cases found for this range"
    wrong = np.array(wrong, dtype=np.float32)
    Sd = math.ldexp(float(cfg.M), -cfg.k)
    naive = np.rint(wrong.astype(np.float64) * Sd)
    assert (naive != quantise(wrong, cfg).q).any()
    for v in wrong:
        r = np.zeros(1, np.int32)
        flag, _ = K._unit_fast(np.array([v], np.float32), r, 1, np.zeros(1, np.int64), 0, Sd,
                               np.empty(K.UNIT, np.int32), L1)
        assert flag


@pytest.mark.parametrize("R", RANGES)
@pytest.mark.parametrize("block", [1, 5, None])
def test_rounding_edge_cases_match_the_reference(rng, R, block):
    cfg = QuantConfig.from_range(R)
    g, _ = _cases(cfg)
    # among ordinary values, so that most units run the float64 path and a few are redone
    n = 6 * K.UNIT
    base = (rng.standard_normal(n) * R / 50).astype(np.float32)
    where = rng.choice(n, g.size, replace=False)
    base[where] = g
    r = rng.integers(-1000, 1000, n).astype(np.int32)
    ref = compress.compress_layer(base, r, R=cfg, k=3, block_size=block, layer_id=0)
    plan = fast.message_plan([(n,)], k=3, block_size=block)
    res = r.copy()
    msg, info = fast.compress_message(base, res, plan, cfg)
    assert np.array_equal(msg, ref.frame)
    assert np.array_equal(res, ref.residual_out)


def _edge_pairs(cfg: QuantConfig) -> tuple[np.ndarray, np.ndarray]:
    """|x| and |r + q| around QMAX (where the fast unit stops trusting float64): the float32
    values a few ulps either side of codes QMAX - 4 .. QMAX + 1 and of the half-integer cases,
    each with residuals that take the sum over QMAX, leave it just under, or pull a saturated
    code back (a code above QMAX with r = -1000 must still count as QMAX)."""
    Sd = math.ldexp(float(cfg.M), -cfg.k)
    bits = set()
    for c in range(QMAX - 4, QMAX + 2):
        b = int(np.float32(c / Sd).view(np.int32))
        bits.update(range(b - 3, b + 4))
    g = np.array(sorted(bits), dtype=np.int32).view(np.float32)
    g = np.concatenate([g, _cases(cfg)[0]])
    g = np.concatenate([g, -g])
    rs = np.array([0, 1, -1, 2, -2, 5, -5, 700, -700, 1000, -1000, QMAX, -QMAX, QMAX - 1,
                   -QMAX + 1], dtype=np.int32)
    gg, rr = (a.ravel() for a in np.meshgrid(g, rs))
    return gg, rr


@pytest.mark.parametrize("R", RANGES)
def test_an_unflagged_element_is_exact(R):
    """The fast unit's promise, element by element: where it does not flag, its a is
    r + Q(g) with no saturation and no clamp (so the counts it skips are 0); every other
    edge pair flags."""
    cfg = QuantConfig.from_range(R)
    Sd = math.ldexp(float(cfg.M), -cfg.k)
    gg, rr = _edge_pairs(cfg)
    q = quantise(gg, cfg).q.astype(np.int64)
    exact = q + rr
    flagged = 0
    for gv, rv, qv, ev in zip(gg, rr, q, exact):
        r = np.array([rv], np.int32)
        flag, _ = K._unit_fast(np.array([gv], np.float32), r, 1, np.zeros(1, np.int64), 0, Sd,
                               np.empty(K.UNIT, np.int32), L1)
        if flag:
            flagged += 1
            continue
        assert abs(qv) < QMAX and abs(ev) <= QMAX and abs(gv) <= cfg.range, (gv, rv)
        assert int(r[0]) == ev, (gv, rv)
    assert 0 < flagged < gg.size


@pytest.mark.parametrize("R", RANGES)
def test_codes_and_sums_at_the_edge_of_qmax(rng, R):
    """The edge pairs through compress_message (their units redone by the integer kernel)."""
    cfg = QuantConfig.from_range(R)
    gg, rr = _edge_pairs(cfg)
    n = 3 * K.UNIT
    base = (rng.standard_normal(n) * R / 50).astype(np.float32)
    r = rng.integers(-1000, 1000, n).astype(np.int32)
    where = rng.choice(n, gg.size, replace=False)
    base[where] = gg
    r[where] = rr
    ref = compress.compress_layer(base, r, R=cfg, k=2, block_size=7, layer_id=3)
    assert ref.sat_quant > 0 and ref.sat_feedback > 0
    plan = fast.message_plan([(n,)], k=2, block_size=7, layer_ids=[3])
    res = r.copy()
    msg, info = fast.compress_message(base, res, plan, cfg)
    assert np.array_equal(msg, ref.frame)
    assert np.array_equal(res, ref.residual_out)
    assert int(info.sat_quant[0]) == ref.sat_quant
    assert int(info.sat_feedback[0]) == ref.sat_feedback


def test_specials_and_subnormals_match_the_reference(rng):
    """Zeros of both signs, subnormals, the smallest normals, Inf: float64 takes them exactly
    (Inf flags its unit)."""
    cfg = QuantConfig.from_range(1e-30)               # subnormals give nonzero codes
    specials = np.array([0.0, -0.0, 1e-45, -1e-45, 1e-40, 1.17549435e-38, np.inf, -np.inf,
                         3e-39, 1e-30, -1e-30], dtype=np.float32)
    n = 2 * K.UNIT
    g = (rng.standard_normal(n) * 1e-33).astype(np.float32)
    g[rng.choice(n, specials.size, replace=False)] = specials
    g[K.UNIT:K.UNIT + 50] = rng.choice(specials[:6], 50)     # a unit with no Inf
    r = rng.integers(-50, 50, n).astype(np.int32)
    ref = compress.compress_layer(g, r, R=cfg, k=2, layer_id=0)
    plan = fast.message_plan([(n,)], k=2)
    res = r.copy()
    msg, _ = fast.compress_message(g, res, plan, cfg)
    assert np.array_equal(msg, ref.frame)
    assert np.array_equal(res, ref.residual_out)
