"""The guarded pass 1 of the numba message step (fastpath.step_kernels.pass1_guarded): NaNs
are found in the same read as the step, so a NaN found late must be undone exactly, the
residuals of saturated units included; and the step's thread count follows the message size."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gradblock.fastpath import fast, step_schedule
from gradblock.refmodel import compress
from gradblock.fastpath import step_kernels as K
from gradblock.refmodel.plan import UNDO_UNIT, undo_log_size
from gradblock.refmodel.quantiser import QMAX, NonFiniteError, QuantConfig, saturation_bits

L1 = -1            # the kernels' norm shift for the L1 norm (step_kernels.norm_term)

# blocks of one element, small blocks, blocks larger than an undo unit (sliced), a short tail
SHAPES = [(40,), (6, 3, 3, 3), (3, UNDO_UNIT + 517), (2 * UNDO_UNIT + 3,), (5, 7)]
BLOCKS = [None, None, None, UNDO_UNIT + 100, None]


def _case(rng, shapes=SHAPES):
    n = sum(int(np.prod(s)) for s in shapes)
    g = (rng.standard_normal(n) * 3).astype(np.float32)
    # extreme residuals: r + Q(g) leaves [-QMAX, QMAX] for many elements, in many units
    r = rng.choice(np.array([QMAX, -QMAX, QMAX - 5, -QMAX + 5, 0, 7], np.int32), n)
    r[::3] = rng.integers(-2**31 + 1, 2**31 - 1, r[::3].size)
    return g, r


def _plan(shapes=SHAPES, block_size=BLOCKS, k=2):
    return fast.message_plan(shapes, k=k, block_size=block_size)


@pytest.mark.parametrize("threads", [1, 2])
def test_saturating_message_matches_the_reference(rng, threads):
    g, r = _case(rng)
    plan = _plan()
    eo = plan.elem_offsets
    ref = [compress.compress_layer(g[eo[i]:eo[i + 1]].reshape(s), r[eo[i]:eo[i + 1]].reshape(s),
                                   k=2, block_size=BLOCKS[i], layer_id=i)
           for i, s in enumerate(SHAPES)]
    assert sum(s.sat_feedback for s in ref) > 100          # the undo log is exercised
    res = r.copy()
    msg, info = fast.compress_message(g, res, plan, n_threads=threads, min_parallel=0)
    assert np.array_equal(msg, np.concatenate([s.frame for s in ref]))
    assert np.array_equal(res, np.concatenate([s.residual_out.ravel() for s in ref]))
    assert list(info.sat_feedback) == [s.sat_feedback for s in ref]
    assert list(info.sat_quant) == [s.sat_quant for s in ref]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("layer,at", [(0, 39), (2, 5), (2, 3 * (UNDO_UNIT + 517) - 1),
                                      (3, UNDO_UNIT + 101), (4, 34)])
def test_late_nan_restores_every_residual(rng, threads, layer, at):
    g, r = _case(rng)
    plan = _plan()
    where = int(plan.elem_offsets[layer]) + at
    g[where] = np.nan
    g[where + 1:] = np.where(rng.random(g.size - where - 1) < 0.01, np.nan, g[where + 1:])
    res = r.copy()
    with pytest.raises(NonFiniteError, match=f"layer {layer}") as e:
        fast.compress_message(g, res, plan, n_threads=threads, min_parallel=0)
    assert e.value.first_index == at
    assert np.array_equal(res, r)


def test_restore_is_exact_on_random_bits(rng):
    """pass1_guarded then restore gives back the residual for any float bits and residual,
    with a range that saturates most elements; with residuals at ±QMAX beside them every
    unit saturates, which fills the undo log exactly to the size refmodel.plan gives it."""
    cfg = QuantConfig.from_range(1e-3)
    tsat = saturation_bits(cfg)
    # (UNDO_UNIT + 1, 2050): slices of 2049, so a short last block of 2050 takes two
    for B, tail in ((1, 0), (3, 2), (700, 2), (UNDO_UNIT, 2), (UNDO_UNIT + 1, 2),
                    (UNDO_UNIT + 1, 2050), (3 * UNDO_UNIT + 11, 2), (3 * UNDO_UNIT + 11, 9000)):
        n = 5 * B + tail
        n_blocks = -(-n // B)
        gbits = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
        gbits[n // 2] = 0x7FC00001                            # a NaN mid-layer
        random_r = rng.integers(-2**31 + 1, 2**31, n).astype(np.int32)
        same_sign = np.where(gbits >> 31, -QMAX, QMAX).astype(np.int32)
        same_sign[gbits & 0x7FFFFFFF < 0x3F800000] = QMAX     # |g| < 1 may quantise to 0
        gbits[gbits & 0x7FFFFFFF < 0x3F800000] |= 0x3F800000  # so make every |g| >= 1
        for r0, full in ((random_r, False), (same_sign, True)):
            r = r0.copy()
            undo = np.empty(n, np.int32)
            log = np.empty(undo_log_size(n, n_blocks, B), np.int64)
            norms = np.empty(n_blocks, np.int64)
            satq, satfb, nan, nlog = K.pass1_guarded(gbits, r, B, norms, cfg.M, cfg.k,
                                                     cfg.range_bits, tsat, 0, n_blocks, undo,
                                                     log, 0, 0, L1)
            assert nan > 0 and satfb > 0
            assert nlog == log.size if full else nlog <= log.size, (B, tail)
            K.restore(gbits, r, undo, log, nlog, 0, cfg.M, cfg.k, tsat)
            assert np.array_equal(r, r0), (B, tail)


def test_thread_count_follows_message_size(rng):
    """Below min_parallel elements a message runs on one thread whatever n_threads asks."""
    assert fast.message_threads(_plan(), 2, min_parallel=10**9) == 1
    assert fast.message_threads(_plan(), 2, min_parallel=0) == 2
    assert fast.message_threads(_plan(), 1, min_parallel=0) == 1
    with pytest.raises(ValueError):
        fast.message_threads(_plan(), 0)


RANGES = [10.0, 1.0, 1e-3, 3e38, 1e-40, float(QMAX), 0.1]


@given(st.sampled_from(RANGES), st.integers(0, 2**32 - 1), st.sampled_from([1, 5, 64]))
def test_message_on_random_bits_matches_the_reference(R, seed, B):
    """Any float32 bits but NaN (±0, subnormals, ±Inf, huge), any residual, several ranges:
    the guarded message step's frames, residuals and counts are the reference's."""
    rng = np.random.default_rng(seed)
    shapes = [(3, B), (7,), (2, B + 1)]
    n = sum(int(np.prod(s)) for s in shapes)
    bits = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    nan = (bits & 0x7FFFFFFF) > 0x7F800000
    bits[nan] &= 0xFF800000                                   # NaN -> ±Inf
    g = bits.view(np.float32)
    r = rng.integers(-2**31 + 1, 2**31, n).astype(np.int32)
    plan = fast.message_plan(shapes, k=1)
    eo = plan.elem_offsets
    ref = [compress.compress_layer(g[eo[i]:eo[i + 1]].reshape(s), r[eo[i]:eo[i + 1]].reshape(s),
                                   R=R, k=1, layer_id=i) for i, s in enumerate(shapes)]
    res = r.copy()
    msg, info = fast.compress_message(g, res, plan, R)
    assert np.array_equal(msg, np.concatenate([s.frame for s in ref]))
    assert np.array_equal(res, np.concatenate([s.residual_out.ravel() for s in ref]))
    assert list(info.sat_quant) == [s.sat_quant for s in ref]
    assert list(info.sat_feedback) == [s.sat_feedback for s in ref]


@pytest.mark.parametrize("chunk", [1, 700, UNDO_UNIT + 1])
def test_message_split_into_small_tasks(monkeypatch, rng, chunk):
    """Layers cut into many pass-1 tasks on the pool: same frames and residuals as one
    thread, and a NaN in the last task of a split layer restores everything."""
    monkeypatch.setattr(step_schedule.Job, "CHUNK", chunk)
    g, r = _case(rng)
    plan = _plan()
    res1, res2 = r.copy(), r.copy()
    msg1, info1 = fast.compress_message(g, res1, plan)
    msg2, info2 = fast.compress_message(g, res2, plan, n_threads=2, min_parallel=0)
    assert np.array_equal(msg1, msg2) and np.array_equal(res1, res2)
    assert np.array_equal(info1.sat_quant, info2.sat_quant)
    assert np.array_equal(info1.sat_feedback, info2.sat_feedback)
    at = int(plan.elem_offsets[3]) - 1                      # last element of layer 2
    g[at] = np.nan
    res = r.copy()
    with pytest.raises(NonFiniteError, match="layer 2"):
        fast.compress_message(g, res, plan, n_threads=2, min_parallel=0)
    assert np.array_equal(res, r)


@pytest.mark.parametrize("B", [1, 3, 700, UNDO_UNIT + 1, 3 * UNDO_UNIT + 11])
def test_isolated_saturation_is_counted_and_logged_exactly(rng, B):
    """Pass 1's loop only flags a unit holding a |g| > R or a clamped feedback sum and then
    recounts that unit: one such element in one unit each (and a unit with both) must give
    the reference's counts, and only the clamped units are saved to the undo log."""
    cfg = QuantConfig.from_range(10.0)
    tsat = saturation_bits(cfg)
    n = 4 * max(B, UNDO_UNIT) + 5
    n_blocks = -(-n // B)
    g = (rng.standard_normal(n) * 0.5).astype(np.float32)
    r = rng.integers(-1000, 1000, n).astype(np.int32)
    g[7], r[7] = 11.0, 0                           # |g| > R only: QMAX + 0 fits
    r[n // 2] = QMAX                               # a clamped sum only (g >= 0 there)
    g[n // 2] = abs(g[n // 2]) + 0.25
    g[n - 2], r[n - 2] = -np.inf, -QMAX            # both, in the last unit
    ref = compress.compress_layer(g, r, R=cfg, k=1, block_size=B)
    assert (ref.sat_quant, ref.sat_feedback) == (2, 2)
    res = r.copy()
    undo = np.empty(n, np.int32)
    log = np.empty(undo_log_size(n, n_blocks, B), np.int64)
    norms = np.empty(n_blocks, np.int64)
    satq, satfb, nan, nlog = K.pass1_guarded(g.view(np.uint32), res, B, norms, cfg.M, cfg.k,
                                             cfg.range_bits, tsat, 0, n_blocks, undo, log, 0, 0,
                                             L1)
    assert (satq, satfb, nan) == (2, 2, 0)
    assert np.array_equal(res, ref.acc) and np.array_equal(norms.view(np.uint64), ref.norms)
    logged = [(int(log[t]), int(log[t + 1])) for t in range(0, nlog, 2)]
    assert len(logged) == 2                        # the two clamped units, not the |g| > R one
    assert all(lo <= i < hi for i, (lo, hi) in zip((n // 2, n - 2), logged))
    for lo, hi in logged:
        assert np.array_equal(undo[lo:hi], r[lo:hi])
