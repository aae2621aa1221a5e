"""Error feedback and coarse block selection (docs/spec.md §2), numpy and numba."""
from __future__ import annotations

import argparse

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gradblock.fastpath import fast
from gradblock.refmodel import compress
from gradblock.refmodel import selection as S
from gradblock.refmodel import validation as V
from gradblock.refmodel.quantiser import QMAX
from gradblock.refmodel.selection import block_layout

STEPS = {"numpy": compress.compress_layer, "numba": fast.compress_layer}
steps = pytest.mark.parametrize("compress_layer", list(STEPS.values()), ids=list(STEPS))
SELECTS = {"numpy": S.select_blocks, "numba": fast.select_blocks}
selects = pytest.mark.parametrize("select_blocks", list(SELECTS.values()), ids=list(SELECTS))


# ------------------------------------------------------------------------------ layouts

@pytest.mark.parametrize("shape, block_size, expect", [
    ((64, 3, 7, 7), None, (9408, 147, 64)),          # conv: one filter C*K*K per block
    ((10, 20), None, (200, 20, 10)),                 # fc: one row per block
    ((7,), None, (7, 1, 7)),                         # 1-D: blocks of one
    ((), None, (1, 1, 1)),                           # scalar
    ((10,), 4, (10, 4, 3)),                          # override: last block short
    ((3, 5), 4, (15, 4, 4)),
    ((0, 3), None, (0, 3, 0)),                       # empty layer: no blocks
    ((0,), None, (0, 1, 0)),
])
@steps
def test_block_layout(compress_layer, shape, block_size, expect):
    lay = S.block_layout(shape, block_size)
    assert (lay.n, lay.block_size, lay.n_blocks) == expect
    step = compress_layer(np.ones(shape, dtype=np.float32), block_size=block_size)
    assert step.layout == lay


def test_last_block_bounds():
    lay = S.block_layout((10,), 4)
    assert [lay.bounds(b) for b in range(3)] == [(0, 4), (4, 8), (8, 10)]


@steps
@pytest.mark.parametrize("shape, block_size", [((4,), 0), ((4,), -2), ((4,), 2.5), ((4,), True)])
def test_bad_block_size(compress_layer, shape, block_size):
    with pytest.raises(ValueError, match="block_size"):
        compress_layer(np.ones(shape, dtype=np.float32), block_size=block_size)


@steps
def test_zero_dimension_is_an_empty_layer(compress_layer):
    step = compress_layer(np.ones((3, 0), dtype=np.float32))
    assert (step.layout.n, step.layout.n_blocks, step.k_eff) == (0, 0, 0)
    assert step.frame.size == 7 and step.frame[3] == 0 and step.frame[5] == 0   # n = 0, T = 0


# ------------------------------------------------------------------------------ k

@pytest.mark.parametrize("k, n_blocks, expect", [
    (1, 64, 1), (3, 64, 3), (100, 64, 64), (2.0, 64, 2),
    (0.1, 64, 7),                                    # ceil(6.4)
    (0.001, 64, 1),                                  # at least one
    (0.5, 1, 1), (0.999, 3, 3),
    (0.1, 10, 1),                                    # float64 0.1 * 10 == 1.0 exactly
    (0.07, 100, 8),                                  # float64 0.07 * 100 == 7.000000000000001
    (5, 0, 0), (0.5, 0, 0),                          # no blocks, nothing to send
])
def test_resolve_k(k, n_blocks, expect):
    assert S.resolve_k(k, n_blocks) == expect


@pytest.mark.parametrize("k", [0, -1, 1.5, 0.0, -0.5, float("nan"), float("inf"), False])
def test_bad_k(k):
    with pytest.raises(ValueError, match="k must be"):
        S.resolve_k(k, 10)
    with pytest.raises(ValueError, match="k must be"):
        S.resolve_k(k, 0)                  # checked even when the layer has no blocks
    with pytest.raises(ValueError, match="k must be"):
        fast.compress_layer(np.ones((10, 2), dtype=np.float32), k=k)


@steps
def test_fraction_k_matches_float64_product(compress_layer):
    g = np.arange(1, 101, dtype=np.float32).reshape(100, 1) / 10
    assert compress_layer(g, k=0.07).k_eff == 8      # exact rational: ceil(7) = 7
    assert compress_layer(g[:10], k=0.1).k_eff == 1  # exact rational: ceil(1.00...0555) = 2


# ------------------------------------------------------------------------------ selection

def brute_force_select(norms: np.ndarray, k: int) -> list[int]:
    return sorted(range(norms.size), key=lambda j: (-int(norms[j]), j))[:k]


@selects
@given(norms=st.lists(st.integers(0, 6), max_size=60), data=st.data())
def test_selection_rank_order_and_ties(select_blocks, norms, data):
    norms = np.array(norms, dtype=np.uint64)
    k = data.draw(st.integers(0, norms.size))
    assert select_blocks(norms, k).tolist() == brute_force_select(norms, k)


@selects
@given(norms=st.lists(st.integers(0, 2**62), max_size=40), data=st.data())
def test_selection_large_norms(select_blocks, norms, data):
    norms = np.array(norms, dtype=np.uint64)
    k = data.draw(st.integers(0, norms.size))
    assert select_blocks(norms, k).tolist() == brute_force_select(norms, k)


@selects
def test_ties_go_to_lower_index(select_blocks):
    norms = np.array([5, 7, 7, 3, 7, 9, 7], dtype=np.uint64)
    assert select_blocks(norms, 3).tolist() == [5, 1, 2]
    assert select_blocks(norms, 5).tolist() == [5, 1, 2, 4, 6]
    assert select_blocks(np.zeros(6, dtype=np.uint64), 3).tolist() == [0, 1, 2]


@steps
def test_selected_blocks_carry_the_largest_norms(compress_layer):
    g = np.zeros((6, 4), dtype=np.float32)
    g[1] = 0.5
    g[4] = -0.5                                      # same |norm| as row 1
    g[2, 0] = 3.0                                    # largest norm
    step = compress_layer(g, k=3)
    assert step.selected.tolist() == [2, 1, 4]
    assert step.norms.dtype == np.uint64
    assert step.norms.tolist() == [int(np.abs(step.acc[j].astype(np.int64)).sum()) for j in range(6)]


@steps
def test_norms_of_full_scale_blocks_are_exact(compress_layer):
    g = np.full((2, 3000), -10.0, dtype=np.float32)   # every code -QMAX
    step = compress_layer(g)
    assert step.norms.tolist() == [3000 * QMAX, 3000 * QMAX]


# ------------------------------------------------------------------------------ payload/residual

@steps
@given(seed=st.integers(0, 2**32 - 1), k=st.sampled_from([1, 2, 5, 0.25, 0.5, 0.9]),
       block_size=st.sampled_from([None, 1, 3, 7]))
def test_payload_plus_residual_is_accumulated(compress_layer, seed, k, block_size):
    rng = np.random.default_rng(seed)
    g = (rng.standard_normal((9, 5)) * rng.choice([1e-3, 1.0, 20.0])).astype(np.float32)
    r = rng.integers(-2**31, 2**31, (9, 5), dtype=np.int64).astype(np.int32)
    step = compress_layer(g, r, k=k, block_size=block_size)
    assert np.array_equal(step.payload.astype(np.int64) + step.residual_out, step.acc)
    lay = step.layout
    mask = np.zeros(lay.n, dtype=bool)
    for b in step.selected:
        lo, hi = lay.bounds(int(b))
        mask[lo:hi] = True
    assert np.all(step.payload.reshape(-1)[~mask] == 0)
    assert np.all(step.residual_out.reshape(-1)[mask] == 0)
    assert len(set(step.selected.tolist())) == step.k_eff == S.resolve_k(k, lay.n_blocks)
    expect = np.clip(r.astype(np.int64) + step.q, -QMAX, QMAX)
    assert np.array_equal(step.acc, expect)


@steps
def test_feedback_saturation_is_counted(compress_layer):
    g = np.array([5.0, -5.0, 0.0, 0.0, 10.0], dtype=np.float32)
    r = np.array([QMAX, -QMAX, -2**31, QMAX, -1], dtype=np.int32)
    step = compress_layer(g, r, k=5)
    # QMAX + Q(5) and -QMAX + Q(-5) clamp; -2**31 + 0 is below -QMAX and clamps too
    assert step.acc.tolist() == [QMAX, -QMAX, -QMAX, QMAX, QMAX - 1]
    assert step.sat_feedback == 3
    assert step.sat_quant == 0


@steps
def test_residual_shape_and_dtype_checked(compress_layer):
    g = np.ones((3, 4), dtype=np.float32)
    with pytest.raises(ValueError, match="shape"):
        compress_layer(g, np.zeros(12, dtype=np.int32))
    with pytest.raises(TypeError, match="int32"):
        compress_layer(g, np.zeros((3, 4), dtype=np.int64))


@steps
def test_empty_layer(compress_layer):
    step = compress_layer(np.zeros((0, 5), dtype=np.float32), k=0.5)
    assert step.k_eff == 0 and step.selected.size == 0 and step.norms.size == 0
    assert step.frame.tolist()[3] == 0 and step.frame.size == 7


def test_numba_block_norms_match_reference(rng):
    acc = rng.integers(-QMAX, QMAX + 1, (17, 9), dtype=np.int64).astype(np.int32)
    for bs in (None, 1, 4, 9, 200):
        lay = S.block_layout(acc.shape, bs)
        assert np.array_equal(fast.block_norms(acc, lay), S.block_norms(acc, lay))
    with pytest.raises(ValueError):
        fast.block_norms(acc.astype(np.int64), lay)


def test_numba_select_blocks_rejects_bad_input():
    with pytest.raises(ValueError):
        fast.select_blocks(np.zeros(3, dtype=np.int64), 1)
    with pytest.raises(ValueError):
        fast.select_blocks(np.zeros(3, dtype=np.uint64), 4)
    with pytest.raises(ValueError):
        fast.select_blocks(np.array([2**63], dtype=np.uint64), 1)


# ------------------------------------------------------------------ the one validator (refmodel/validation.py)

@pytest.mark.parametrize("text, want", [("4", 4), (" 7 ", 7), ("0.25", 0.25), ("1.0", 1), ("3e0", 3),
                                        ("1", 1), ("0.999", 0.999)])
def test_parse_k_accepts_the_spec_range(text, want):
    got = V.parse_k(text)
    assert got == want and type(got) is type(want)


@pytest.mark.parametrize("text", ["0", "-1", "0.0", "1.5", "nan", "inf", "-0.5", "abc", "", "1e400"])
def test_parse_k_refuses_with_one_named_error(text):
    with pytest.raises(V.KError, match="k must be") as e:
        V.parse_k(text)
    assert isinstance(e.value, argparse.ArgumentTypeError) and "\n" not in str(e.value)


def test_parse_k_is_an_argparse_type():
    p = argparse.ArgumentParser(exit_on_error=False)
    p.add_argument("--k", type=V.parse_k)
    assert p.parse_args(["--k", "0.5"]).k == 0.5
    with pytest.raises(argparse.ArgumentError, match="k must be"):
        p.parse_args(["--k", "1.5"])


@pytest.mark.parametrize("value, want", [(None, None), (1, 1), (np.int64(9), 9), (7.0, 7),
                                         (2**32 - 1, 2**32 - 1)])
def test_check_block_size_accepts(value, want):
    assert V.check_block_size(value) == want


@pytest.mark.parametrize("value", [0, -3, 2**32, 2**63, 1e23, 2.5, float("inf"), float("nan"), True,
                                   "8", [8]])
def test_check_block_size_refuses(value):
    with pytest.raises(V.BlockSizeError, match="block_size"):
        V.check_block_size(value)
    with pytest.raises(V.BlockSizeError):
        block_layout((4, 4), value)


@pytest.mark.parametrize("value", [-1, 2**32, 99999999999999999999, 5.0, "5", True])
def test_check_expected_n_refuses(value):
    with pytest.raises(V.ExpectedSizeError, match="expected n"):
        V.check_expected_n(value)


def test_check_expected_n_and_limits():
    assert V.check_expected_n(None) is None and V.check_expected_n(np.uint32(5)) == 5
    assert V.check_layer_size(2**32 - 1) == 2**32 - 1
    with pytest.raises(V.SizeLimitError, match="32-bit"):
        V.check_layer_size(2**32)
    with pytest.raises(V.SizeLimitError, match="limit of 100"):
        V.check_layer_size(101, max_elements=100)


def test_named_errors_are_value_errors():
    for cls in (V.BlockSizeError, V.KError, V.ShapeError, V.SizeLimitError, V.LayerIdError,
                V.LmaxError, V.ExpectedSizeError, V.RangeError, V.NonFiniteError):
        assert issubclass(cls, ValueError)
