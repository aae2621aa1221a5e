"""The compress step in numba: bit-exact with `refmodel.compress.compress_layer` (spec §1–§4).

Three entry points, from most to least complete:

* `compress_layer(grad, residual=None, *, R, k, block_size, layer_id, lmax_log2, where)`
  returns the same `LayerStep` as the numpy reference, every intermediate included
  (for testing and inspection).
* `compress_step(grad, residual, cfg, k, block_size, layer_id, lmax_log2, out_words, ...)`
  is the lean per-layer step for the torch shim and the benchmarks: it updates `residual`
  in place, writes the frame into `out_words` and returns a `StepInfo`; nothing of size n is
  allocated.
* `compress_layers(grads, residuals, ...)` runs `compress_step` over many layers on a
  thread pool (the kernels release the GIL) and returns the concatenated message.

Plus `quantise(x, R)` -> `QuantResult`, `block_norms(acc, layout)` and
`select_blocks(norms, k_eff)`, as their namesakes in `refmodel.quantiser` / `.selection`.

How it is fast: pass 1 reads the float32 bits and the residual once and produces the code,
the error-feedback sum, both saturation counts and the block norms together; selection is a
k-element heap (O(n_blocks log k)) with the exact tie rule; pass 2 visits only the selected
blocks (everything else is a zero run for the encoder, and its residual already holds `a`),
streaming them through the ZRLE encoder of `codec.zrle_numba`, CRC included.

Bad input raises the same exception types as the reference, in the same order (a NaN in
the gradient is reported before any problem the reference finds later), and the in-place
step validates everything, NaN included, before it modifies the residual.
"""
from __future__ import annotations

import concurrent.futures as cf
import functools
import operator
import threading
from dataclasses import dataclass
from typing import Sequence

import numba as nb
import numpy as np

from gradblock.codec.zrle import DEFAULT_LMAX_LOG2, HEADER_WORDS, TRAILER_WORDS, check_lmax_log2, max_frame_words
from gradblock.codec.zrle_numba import enc_begin, enc_end, enc_feed, enc_feed_zeros

from .compress import LayerStep
from .quantiser import DEFAULT_RANGE, QMAX, NonFiniteError, QuantConfig, QuantResult
from .selection import BlockLayout, block_layout, resolve_k

__all__ = ["compress_layer", "compress_step", "compress_layers", "quantise", "block_norms",
           "select_blocks", "StepInfo", "max_step_words", "LayerStep", "QuantResult"]

_F32, _I32, _U32 = np.dtype(np.float32), np.dtype(np.int32), np.dtype(np.uint32)
_ABS_MASK = 0x7FFFFFFF
_INF_BITS = 0x7F800000


# ---------------------------------------------------------------------------------------------
# Element kernels
# ---------------------------------------------------------------------------------------------

@nb.njit(inline="always", nogil=True, cache=True)
def _quantise_bits(b, M, k):
    """Q of the float32 with bits b (int64 holding a uint32), spec §1.2. NaN gives QMAX
    (callers reject NaN separately). All values stay below 2**63, so int64 is exact.
    Written branch-free so LLVM vectorises the loops that call it."""
    e = (b >> 23) & 0xFF
    m = (b & 0x7FFFFF) | (np.int64(e != 0) << 23)
    t = k - (max(e, 1) - 150)                     # t = k - E
    tc = min(max(t, 1), 60)                       # P < 2**56: any t >= 57 rounds to 0
    P = m * (M & 0xFFFFFFFF)                      # the mask lets LLVM use a 32x32->64 multiply
    # round half to even of P / 2**tc: add half - 1, plus 1 more when the quotient is odd
    q = (P + ((np.int64(1) << (tc - 1)) - 1) + ((P >> tc) & 1)) >> tc
    saturate = ((t <= 0) & (m != 0)) | (e == 255)  # P * 2**-t >= 2**31, or +-Inf
    mag = QMAX if saturate else min(q, QMAX)
    s = b >> 31
    return (mag ^ -s) + s                         # apply the sign


@nb.njit(nogil=True, cache=True)
def _nan_count(gbits):
    c = 0
    for i in range(gbits.size):
        c += (np.int64(gbits[i]) & _ABS_MASK) > _INF_BITS
    return c


@nb.njit(nogil=True, cache=True)
def _quantise_kernel(gbits, q_out, M, k, rbits):
    satq = 0
    nan = 0
    for i in range(gbits.size):
        b = np.int64(gbits[i])
        ab = b & _ABS_MASK
        satq += ab > rbits
        nan += ab > _INF_BITS
        q_out[i] = _quantise_bits(b, M, k)
    return satq, nan


@nb.njit(inline="always", nogil=True, cache=True)
def _feedback(qv, r):
    """a = clamp(r + q, -QMAX, QMAX) and whether it clamped (spec §2.1)."""
    a = qv + np.int64(r)
    over = (a > QMAX) | (a < -QMAX)
    return min(max(a, -QMAX), QMAX), over


# ---------------------------------------------------------------------------------------------
# Pass 1: quantise + feedback + saturation counts + block norms, one read of g and r
# ---------------------------------------------------------------------------------------------

# Inner loops run over slice views from index 0: numba then knows the index is not negative,
# drops its wraparound test, and LLVM vectorises the loop (a ~10x difference).

@nb.njit(nogil=True, cache=True)
def _pass1_keep(gbits, r, q_out, acc_out, B, norms, M, k, rbits):
    """Keeps q and a in their own arrays (r is read only). Returns (sat_q, sat_fb, nan)."""
    n = gbits.size
    satq = 0
    satfb = 0
    nan = 0
    for j in range(norms.size):
        lo = j * B
        hi = min(lo + B, n)
        g_blk, r_blk, q_blk, a_blk = gbits[lo:hi], r[lo:hi], q_out[lo:hi], acc_out[lo:hi]
        norm = np.int64(0)
        for i in range(g_blk.size):
            b = np.int64(g_blk[i])
            ab = b & _ABS_MASK
            satq += ab > rbits
            nan += ab > _INF_BITS
            qv = _quantise_bits(b, M, k)
            q_blk[i] = qv
            a, over = _feedback(qv, r_blk[i])
            satfb += over
            a_blk[i] = a
            norm += abs(a)
        norms[j] = norm
    return satq, satfb, nan


@nb.njit(inline="always", nogil=True, cache=True)
def _pass1_inplace_blocks(gbits, r, B, norms, M, k, rbits, jlo, jhi):
    """Blocks [jlo, jhi): r <- a in place, norms filled. Returns (sat_q, sat_fb)."""
    n = gbits.size
    satq = 0
    satfb = 0
    if B == 1:                          # blocks of one element (1-D tensors): a flat loop
        g_run, r_run, n_run = gbits[jlo:jhi], r[jlo:jhi], norms[jlo:jhi]
        for i in range(g_run.size):
            b = np.int64(g_run[i])
            satq += (b & _ABS_MASK) > rbits
            a, over = _feedback(_quantise_bits(b, M, k), r_run[i])
            satfb += over
            r_run[i] = a
            n_run[i] = abs(a)
        return satq, satfb
    for j in range(jlo, jhi):
        lo = j * B
        hi = min(lo + B, n)
        g_blk, r_blk = gbits[lo:hi], r[lo:hi]
        norm = np.int64(0)
        for i in range(g_blk.size):
            b = np.int64(g_blk[i])
            satq += (b & _ABS_MASK) > rbits
            a, over = _feedback(_quantise_bits(b, M, k), r_blk[i])
            satfb += over
            r_blk[i] = a
            norm += abs(a)
        norms[j] = norm
    return satq, satfb


@nb.njit(nogil=True, cache=True)
def _pass1_range(gbits, r, B, norms, M, k, rbits, jlo, jhi):
    """Pass 1 over blocks [jlo, jhi) only: one task of a layer split across threads."""
    return _pass1_inplace_blocks(gbits, r, B, norms, M, k, rbits, jlo, jhi)


# ---------------------------------------------------------------------------------------------
# Top-k selection: a heap of the k best blocks seen so far, its root the worst of them
# ---------------------------------------------------------------------------------------------

@nb.njit(inline="always", nogil=True, cache=True)
def _worse(na, ia, nb_, ib):
    """Block a ranks below block b: smaller norm, or equal norm and higher index."""
    return na < nb_ or (na == nb_ and ia > ib)


@nb.njit(inline="always", nogil=True, cache=True)
def _sift_down(hn, hi, size, pos):
    n0 = hn[pos]
    i0 = hi[pos]
    while True:
        child = 2 * pos + 1
        if child >= size:
            break
        if child + 1 < size and _worse(hn[child + 1], hi[child + 1], hn[child], hi[child]):
            child += 1
        if not _worse(hn[child], hi[child], n0, i0):
            break
        hn[pos] = hn[child]
        hi[pos] = hi[child]
        pos = child
    hn[pos] = n0
    hi[pos] = i0


@nb.njit(nogil=True, cache=True)
def _select_top_k(norms, k_eff, selected):
    """selected[:k_eff] <- the k_eff largest norms in rank order (norm descending, lower
    index first among equals), as refmodel.selection.select_blocks."""
    if k_eff == 0:
        return
    hn = np.empty(k_eff, dtype=np.int64)
    hi = np.empty(k_eff, dtype=np.int64)
    for j in range(k_eff):
        hn[j] = norms[j]
        hi[j] = j
    for p in range(k_eff // 2 - 1, -1, -1):
        _sift_down(hn, hi, k_eff, p)
    for j in range(k_eff, norms.size):
        # every index in the heap is lower than j, so only a strictly larger norm beats the root
        if norms[j] > hn[0]:
            hn[0] = norms[j]
            hi[0] = j
            _sift_down(hn, hi, k_eff, 0)
    size = k_eff
    while size > 0:                    # pop the worst first: it is ranked last
        size -= 1
        selected[size] = hi[0]
        hn[0] = hn[size]
        hi[0] = hi[size]
        _sift_down(hn, hi, size, 0)


@nb.njit(nogil=True, cache=True)
def _block_norms_kernel(acc, B, norms):
    n = acc.size
    for j in range(norms.size):
        blk = acc[j * B:min(j * B + B, n)]
        s = np.int64(0)
        for i in range(blk.size):
            s += abs(np.int64(blk[i]))
        norms[j] = s


@nb.njit(inline="always", nogil=True, cache=True)
def _selected_mask(selected, n_blocks):
    mask = np.zeros(n_blocks, dtype=np.uint8)
    for t in range(selected.size):
        mask[selected[t]] = 1
    return mask


# ---------------------------------------------------------------------------------------------
# Pass 2: mask -> payload -> ZRLE frame, and the new residual
# ---------------------------------------------------------------------------------------------

@nb.njit(nogil=True, cache=True)
def _pass2_keep(acc, B, mask, payload, res_out, out, base, layer_id, rbits, lmax_log2):
    """Materialises payload and residual_out; returns the frame length."""
    n = acc.size
    lmax = np.int64(1) << lmax_log2
    state = enc_begin(out, base, n, layer_id, rbits, lmax_log2)
    for j in range(mask.size):
        lo = j * B
        hi = min(lo + B, n)
        a_blk, p_blk, r_blk = acc[lo:hi], payload[lo:hi], res_out[lo:hi]
        if mask[j]:
            state = enc_feed(acc, lo, hi, out, state, lmax)
            for i in range(a_blk.size):
                p_blk[i] = a_blk[i]
                r_blk[i] = 0
        else:
            state = enc_feed_zeros(a_blk.size, out, state)
            for i in range(a_blk.size):
                p_blk[i] = 0
                r_blk[i] = a_blk[i]
    return enc_end(out, base, state)


@nb.njit(inline="always", nogil=True, cache=True)
def _pass2_inplace(r, B, mask, out, base, layer_id, rbits, lmax_log2):
    """r holds a. Selected blocks go to the encoder and become 0; runs of unselected
    blocks are one zero run each (their residual already is a). Returns the frame length."""
    n = r.size
    n_blocks = mask.size
    lmax = np.int64(1) << lmax_log2
    state = enc_begin(out, base, n, layer_id, rbits, lmax_log2)
    j = 0
    while j < n_blocks:
        if mask[j]:
            lo = j * B
            hi = min(lo + B, n)
            state = enc_feed(r, lo, hi, out, state, lmax)
            for i in range(np.uint64(lo), np.uint64(hi)):
                r[i] = 0
            j += 1
        else:
            j2 = j + 1
            while j2 < n_blocks and mask[j2] == 0:
                j2 += 1
            state = enc_feed_zeros(min(j2 * B, n) - j * B, out, state)
            j = j2
    return enc_end(out, base, state)


@nb.njit(nogil=True, cache=True)
def _step_kernel(gbits, r, B, n_blocks, k_eff, M, k, rbits, out, base, layer_id, lmax_log2):
    """The whole lean step for one layer, GIL released. Returns (n_words, sat_q, sat_fb)."""
    norms = np.empty(n_blocks, dtype=np.int64)
    satq, satfb = _pass1_inplace_blocks(gbits, r, B, norms, M, k, rbits, 0, n_blocks)
    selected = np.empty(k_eff, dtype=np.int64)
    _select_top_k(norms, k_eff, selected)
    mask = _selected_mask(selected, n_blocks)
    n_words = _pass2_inplace(r, B, mask, out, base, layer_id, rbits, lmax_log2)
    return n_words, satq, satfb


@nb.njit(nogil=True, cache=True)
def _step_tail(r, B, norms, k_eff, out, base, layer_id, rbits, lmax_log2):
    """Selection and pass 2 once pass 1 has filled `norms` (and r holds a)."""
    selected = np.empty(k_eff, dtype=np.int64)
    _select_top_k(norms, k_eff, selected)
    mask = _selected_mask(selected, norms.size)
    return _pass2_inplace(r, B, mask, out, base, layer_id, rbits, lmax_log2)


# ---------------------------------------------------------------------------------------------
# Python API
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class StepInfo:
    """What one lean step reports; the frame is out_words[offset:offset + n_words]."""
    n_words: int
    k_eff: int
    n_blocks: int
    block_size: int
    sat_quant: int       # |g| > R (incl. +-Inf)
    sat_feedback: int    # |r + q| > QMAX


def max_step_words(n: int, block_size: int, k_eff: int) -> int:
    """Most words a step's frame can take when k_eff blocks of block_size are selected:
    at most s = min(n, k_eff*B) literals, at most s tokens carrying them plus one zero token."""
    sel = min(n, k_eff * block_size)
    return min(max_frame_words(n), HEADER_WORDS + 3 * sel + 2 + TRAILER_WORDS)


def block_norms(acc: np.ndarray, layout: BlockLayout) -> np.ndarray:
    """Exact L1 norm of every block (uint64), as refmodel.selection.block_norms."""
    acc = np.asarray(acc)
    if acc.dtype != np.int32 or acc.size != layout.n:
        raise ValueError(f"acc must be int32 with {layout.n} elements, got {acc.dtype} "
                         f"with {acc.size}")
    norms = np.empty(layout.n_blocks, dtype=np.uint64)
    _block_norms_kernel(np.ascontiguousarray(acc).reshape(-1), layout.block_size,
                        norms.view(np.int64))
    return norms


def select_blocks(norms: np.ndarray, k_eff: int) -> np.ndarray:
    """The k_eff largest norms' indices in rank order (norm descending, lower index first
    among equals), as refmodel.selection.select_blocks, in O(n_blocks log k_eff)."""
    norms = np.asarray(norms)
    if norms.dtype != np.uint64 or norms.ndim != 1:
        raise ValueError(f"norms must be a 1-D uint64 array, got {norms.dtype} {norms.shape}")
    k_eff = operator.index(k_eff)
    if not 0 <= k_eff <= norms.size:
        raise ValueError(f"k_eff must be in 0..{norms.size}, got {k_eff}")
    if norms.size and int(norms.max()) >= 2**63:
        raise ValueError("norms must be below 2**63 (a block norm is at most n * QMAX)")
    selected = np.empty(k_eff, dtype=np.int64)
    _select_top_k(np.ascontiguousarray(norms).view(np.int64), k_eff, selected)
    return selected


def _config(R) -> QuantConfig:
    return R if isinstance(R, QuantConfig) else QuantConfig.from_range(R)


def _float_bits(x: np.ndarray, what: str = "quantise") -> np.ndarray:
    if x.dtype != np.float32:
        raise TypeError(f"{what} expects float32, got {x.dtype}")
    return np.ascontiguousarray(x).reshape(-1).view(np.uint32)


def _nan_error(gbits: np.ndarray, where: str) -> NonFiniteError | None:
    count = int(_nan_count(gbits))
    if count == 0:
        return None
    is_nan = (gbits & np.uint32(_ABS_MASK)) > np.uint32(_INF_BITS)
    return NonFiniteError(count, int(np.argmax(is_nan)), where)


def quantise(x, R: float | QuantConfig = DEFAULT_RANGE, where: str = "") -> QuantResult:
    """float32 -> int32 codes (spec §1), as refmodel.quantiser.quantise. NaN raises
    NonFiniteError naming the count and the first flat index."""
    cfg = _config(R)
    x = np.asarray(x)
    gbits = _float_bits(x)
    q = np.empty(gbits.size, dtype=np.int32)
    satq, nan = _quantise_kernel(gbits, q, cfg.M, cfg.k, cfg.range_bits)
    if nan:
        raise _nan_error(gbits, where)
    return QuantResult(q.reshape(x.shape), int(satq))


@dataclass(frozen=True)
class _Plan:
    """A validated step: everything the kernels need besides the arrays."""
    layout: BlockLayout
    k_eff: int
    layer_id: int
    lmax_log2: int


def _make_plan(shape, k, block_size, layer_id, lmax_log2) -> _Plan:
    """The argument checks the reference makes after quantising, in its order."""
    layout = block_layout(shape, block_size)
    k_eff = resolve_k(k, layout.n_blocks)
    lmax_log2 = check_lmax_log2(lmax_log2)
    if layout.n >= 2**32:
        raise ValueError(f"layer of {layout.n} elements does not fit the 32-bit n field")
    if not (0 <= int(layer_id) < 2**32):
        raise ValueError(f"layer id must fit 32 bits, got {layer_id}")
    return _Plan(layout, k_eff, int(layer_id), lmax_log2)


# A training loop asks for the same plans every step: cache them (validation costs more
# than a small layer's kernels). Failures are not cached, so errors are always re-raised.
_cached_plan = functools.lru_cache(maxsize=4096)(_make_plan)


def _plan(shape, residual_shape, k, block_size, layer_id, lmax_log2, gbits, where,
          same_shape=True) -> _Plan:
    """_make_plan, with a NaN in the gradient reported first, as the reference's quantiser
    (which runs before these checks) would."""
    try:
        if same_shape and residual_shape != shape:
            raise ValueError(f"residual shape {residual_shape} != gradient shape {shape}")
        try:
            return _cached_plan(shape, k, block_size, layer_id, lmax_log2)
        except TypeError as unhashable:         # e.g. a numpy array as k: check uncached
            if "unhashable" not in str(unhashable):
                raise
            return _make_plan(shape, k, block_size, layer_id, lmax_log2)
    except (ValueError, TypeError) as late:
        nan = _nan_error(gbits, where)
        if nan is not None:
            raise nan from None
        raise late


def compress_layer(grad, residual: np.ndarray | None = None, *,
                   R: float | QuantConfig = DEFAULT_RANGE, k: int | float = 1,
                   block_size: int | None = None, layer_id: int = 0,
                   lmax_log2: int = DEFAULT_LMAX_LOG2, where: str = "") -> LayerStep:
    """quantise -> error feedback -> block norms -> top-k -> mask -> ZRLE frame, every
    intermediate kept; the same bits as refmodel.compress.compress_layer."""
    cfg = _config(R)
    grad = np.asarray(grad)
    if residual is None:
        residual = np.zeros(grad.shape, dtype=np.int32)
    if not isinstance(residual, np.ndarray) or residual.dtype != np.int32:
        raise TypeError(f"residual must be int32, got {getattr(residual, 'dtype', type(residual))}")
    gbits = _float_bits(grad)
    plan = _plan(grad.shape, residual.shape, k, block_size, layer_id, lmax_log2, gbits, where)
    layout = plan.layout
    n = layout.n
    r = np.ascontiguousarray(residual).reshape(-1)
    q = np.empty(n, dtype=np.int32)
    acc = np.empty(n, dtype=np.int32)
    norms = np.empty(layout.n_blocks, dtype=np.uint64)
    satq, satfb, nan = _pass1_keep(gbits, r, q, acc, layout.block_size, norms.view(np.int64),
                                   cfg.M, cfg.k, cfg.range_bits)
    if nan:
        raise _nan_error(gbits, where)
    selected = np.empty(plan.k_eff, dtype=np.int64)
    _select_top_k(norms.view(np.int64), plan.k_eff, selected)
    payload = np.empty(n, dtype=np.int32)
    res_out = np.empty(n, dtype=np.int32)
    frame = np.empty(max_step_words(n, layout.block_size, plan.k_eff), dtype=np.uint32)
    mask = np.zeros(layout.n_blocks, dtype=np.uint8)
    mask[selected] = 1
    used = _pass2_keep(acc, layout.block_size, mask, payload, res_out, frame, 0, plan.layer_id,
                       cfg.range_bits, plan.lmax_log2)
    shape = grad.shape
    return LayerStep(layout, plan.k_eff, q.reshape(shape), acc.reshape(shape), norms, selected,
                     payload.reshape(shape), res_out.reshape(shape), frame[:used].copy(),
                     int(satq), int(satfb))


def _check_array(a, dtype: np.dtype, name, writeable=False):
    if not isinstance(a, np.ndarray) or a.dtype != dtype:
        raise TypeError(f"{name} must be a numpy {dtype.name} array, got "
                        f"{getattr(a, 'dtype', type(a).__name__)}")
    flags = a.flags
    if not flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous")
    if writeable and not flags.writeable:
        raise ValueError(f"{name} must be writeable")


def _validate_layer(grad, residual, k, block_size, layer_id, lmax_log2, where):
    """All checks of one in-place step except NaN and the output size.
    Returns (float bits, flat residual view, plan)."""
    grad = np.asarray(grad)
    _check_array(grad, _F32, "grad")
    _check_array(residual, _I32, "residual", writeable=True)
    gbits = grad.reshape(-1).view(np.uint32)
    if residual.size != grad.size:
        late = ValueError(f"residual has {residual.size} elements, gradient {grad.size}")
        raise _nan_error(gbits, where) or late
    plan = _plan(grad.shape, None, k, block_size, layer_id, lmax_log2, gbits, where,
                 same_shape=False)
    return gbits, residual.reshape(-1), plan


def compress_step(grad: np.ndarray, residual: np.ndarray, cfg: QuantConfig | float,
                  k: int | float, block_size: int | None, layer_id: int, lmax_log2: int,
                  out_words: np.ndarray, offset: int = 0, *, parallel: bool | int = False,
                  where: str = "") -> StepInfo:
    """One layer's compress step, lean and in place.

    grad: float32, C-contiguous, the layer's shape (it decides the blocks).
    residual: int32, C-contiguous, writeable, grad.size elements (any shape); replaced by
        the new residual (0 on the selected blocks, clamp(r + Q(g)) elsewhere).
    out_words: uint32 1-D; the frame is written at out_words[offset:offset + n_words] and
        needs max_step_words(n, B, k_eff) words from offset (checked first).
    parallel: False, True (numba.get_num_threads() threads) or a thread count: split pass 1
        of this layer (and, for a large layer, its NaN check) across a thread pool; worth
        it from about a million elements on. Selection and encoding stay on one thread.

    Everything, NaN included, is checked before the residual is touched."""
    cfg = _config(cfg)
    gbits, r, plan = _validate_layer(grad, residual, k, block_size, layer_id, lmax_log2, where)
    _check_array(out_words, _U32, "out_words", writeable=True)
    if out_words.ndim != 1:
        raise ValueError("out_words must be 1-D")
    lay = plan.layout
    offset = operator.index(offset)
    need = max_step_words(lay.n, lay.block_size, plan.k_eff)
    if offset < 0 or out_words.size - offset < need:
        raise ValueError(f"out_words has {out_words.size - offset} words from offset {offset}; "
                         f"this step may need {need} (see max_step_words)")
    threads = _thread_count(parallel, "parallel")
    if threads > 1 and lay.n_blocks > 1:
        job = _Job(cfg, [(gbits, r, plan)], out_words, [offset])
        return job.run(threads, where_of=lambda i: where)[0]
    nan = _nan_error(gbits, where)
    if nan is not None:
        raise nan
    n_words, satq, satfb = _step_kernel(gbits, r, lay.block_size, lay.n_blocks, plan.k_eff,
                                        cfg.M, cfg.k, cfg.range_bits, out_words, offset,
                                        plan.layer_id, plan.lmax_log2)
    return StepInfo(int(n_words), plan.k_eff, lay.n_blocks, lay.block_size, int(satq), int(satfb))


def _thread_count(value, name: str) -> int:
    """True -> numba's thread count; False/None -> 1; else a positive integer."""
    if value is True:
        return nb.get_num_threads()
    if value is False or value is None:
        return 1
    threads = operator.index(value)
    if threads < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return threads


_pool_lock = threading.Lock()
_pools: dict[int, cf.ThreadPoolExecutor] = {}


def _thread_pool(workers: int) -> cf.ThreadPoolExecutor:
    """A pool of exactly `workers` threads, kept for the process (starting threads costs
    more than a small layer); one pool per size, so a call never runs on more threads
    than it asked for."""
    with _pool_lock:
        pool = _pools.get(workers)
        if pool is None:
            pool = _pools[workers] = cf.ThreadPoolExecutor(max_workers=workers,
                                                           thread_name_prefix="gradblock")
        return pool


def _balanced_groups(tasks: list, cost, groups: int) -> list[list]:
    """Longest-processing-time-first: each task (costliest first) to the lightest group."""
    load = [0] * groups
    out: list[list] = [[] for _ in range(groups)]
    for t in sorted(tasks, key=lambda t: -cost(t)):
        g = load.index(min(load))
        out[g].append(t)
        load[g] += cost(t) + 2048          # a per-task overhead, so tiny tasks spread too
    return [g for g in out if g]


class _Job:
    """Validated layers run on a thread pool, the work cut into tasks of about CHUNK
    elements (a layer larger than that is split by block ranges) and balanced over the
    threads, in phases:

    1. count NaNs (nothing has been modified yet, so a NaN can still be reported cleanly);
    2. a layer that fits one chunk runs its whole step (_step_kernel) as one task; a split
       layer runs pass 1 per block range: residual <- a, block norms, saturation counts;
    3. per split layer: selection, then pass 2 (encode the selected blocks, zero their
       residual).
    """
    CHUNK = 1 << 18
    GROUPS_PER_THREAD = 4

    def __init__(self, cfg: QuantConfig, layers, out: np.ndarray, offsets: list[int]):
        self.cfg, self.layers, self.out, self.offsets = cfg, layers, out, offsets
        self.lays = [p.layout for _, _, p in layers]

    def _block_ranges(self, i):
        lay = self.lays[i]
        per = max(1, self.CHUNK // lay.block_size)
        return [(i, j, min(j + per, lay.n_blocks)) for j in range(0, lay.n_blocks, per)]

    def _elems(self, task):
        i, jlo, jhi = task
        lay = self.lays[i]
        return min(jhi * lay.block_size, lay.n) - jlo * lay.block_size

    def run(self, threads: int, where_of) -> list[StepInfo]:
        cfg, layers, lays = self.cfg, self.layers, self.lays
        count = len(layers)
        ranges = [self._block_ranges(i) for i in range(count)]
        split = [i for i in range(count) if len(ranges[i]) > 1]
        whole = [i for i in range(count) if len(ranges[i]) <= 1]
        chunks = [t for i in split for t in ranges[i]]
        pool = _thread_pool(threads)

        def spread(fn, tasks, cost, inline_below):
            # A phase whose work is below `inline_below` runs on this thread: a round trip
            # through the pool costs about as much. Otherwise make more groups than threads:
            # the pool hands them out as threads come free, so a thread that the OS runs
            # slowly takes fewer of them.
            if sum(cost(t) for t in tasks) < inline_below:
                return [fn(t) for t in tasks]
            groups = _balanced_groups(tasks, cost, self.GROUPS_PER_THREAD * threads)
            return [x for part in pool.map(lambda g: [fn(t) for t in g], groups) for x in part]

        def nan_task(t):
            i, jlo, _ = t
            lo = jlo * lays[i].block_size
            return i, int(_nan_count(layers[i][0][lo:lo + self._elems(t)]))

        whole_tasks = [(i, 0, lays[i].n_blocks) for i in whole]
        # the NaN scan only reads (about 4x cheaper per element than pass 1)
        bad = sorted(i for i, c in spread(nan_task, chunks + whole_tasks, self._elems,
                                          4 * self.CHUNK * threads) if c)
        if bad:
            raise _nan_error(layers[bad[0]][0], where_of(bad[0]))

        norms = {i: np.empty(lays[i].n_blocks, dtype=np.int64) for i in split}
        n_words, satq, satfb = [0] * count, [0] * count, [0] * count

        def pass1_task(t):
            i, jlo, jhi = t
            gbits, r, plan = layers[i]
            if i in norms:
                sq, sf = _pass1_range(gbits, r, plan.layout.block_size, norms[i], cfg.M, cfg.k,
                                      cfg.range_bits, jlo, jhi)
                return i, 0, int(sq), int(sf)
            nw, sq, sf = _step_kernel(gbits, r, plan.layout.block_size, plan.layout.n_blocks,
                                      plan.k_eff, cfg.M, cfg.k, cfg.range_bits, self.out,
                                      self.offsets[i], plan.layer_id, plan.lmax_log2)
            return i, int(nw), int(sq), int(sf)

        for i, nw, sq, sf in spread(pass1_task, chunks + whole_tasks, self._elems, self.CHUNK):
            n_words[i] = nw
            satq[i] += sq
            satfb[i] += sf

        def finish_task(i):
            _, r, plan = layers[i]
            return i, int(_step_tail(r, plan.layout.block_size, norms[i], plan.k_eff, self.out,
                                     self.offsets[i], plan.layer_id, cfg.range_bits,
                                     plan.lmax_log2))

        def finish_cost(i):          # the mask scan plus the selected elements
            return lays[i].n_blocks + min(lays[i].n, layers[i][2].k_eff * lays[i].block_size)

        for i, nw in spread(finish_task, split, finish_cost, self.CHUNK):
            n_words[i] = nw
        return [StepInfo(n_words[i], layers[i][2].k_eff, lays[i].n_blocks, lays[i].block_size,
                         satq[i], satfb[i]) for i in range(count)]


def _per_layer(value, count, name):
    if isinstance(value, (list, tuple)):
        if len(value) != count:
            raise ValueError(f"{name} has {len(value)} entries for {count} layers")
        return list(value)
    return [value] * count


def compress_layers(grads: Sequence[np.ndarray], residuals: Sequence[np.ndarray], *,
                    R: float | QuantConfig = DEFAULT_RANGE, k: int | float = 1,
                    block_size: int | None | Sequence[int | None] = None,
                    layer_ids: Sequence[int] | None = None, lmax_log2: int = DEFAULT_LMAX_LOG2,
                    n_threads: int | None = None) -> tuple[np.ndarray, list[StepInfo]]:
    """compress_step over every layer (residuals updated in place) -> (message, infos).

    The message is the layers' frames concatenated in the order given. `k` and
    `block_size` may be one value or a list with one entry per layer; `layer_ids`
    defaults to 0, 1, 2, ... With n_threads > 1 (default: numba's thread count) the work
    is cut into chunks of about 256K elements, large layers included, and balanced over a
    thread pool (the kernels release the GIL). Every layer is validated, NaN included,
    before any residual is modified; a NaN is reported for the first layer (in the order
    given) that has one."""
    grads, residuals = list(grads), list(residuals)
    count = len(grads)
    if len(residuals) != count:
        raise ValueError(f"{count} gradients but {len(residuals)} residuals")
    cfg = _config(R)
    ks = _per_layer(k, count, "k")
    bss = _per_layer(block_size, count, "block_size")
    ids = list(range(count)) if layer_ids is None else _per_layer(layer_ids, count, "layer_ids")
    threads = nb.get_num_threads() if n_threads is None else _thread_count(n_threads, "n_threads")

    layers, offsets, total = [], [], 0
    for i in range(count):
        gbits, r, plan = _validate_layer(grads[i], residuals[i], ks[i], bss[i], ids[i], lmax_log2,
                                         f"layer {i}")
        layers.append((gbits, r, plan))
        offsets.append(total)
        total += max_step_words(plan.layout.n, plan.layout.block_size, plan.k_eff)
    scratch = np.empty(total, dtype=np.uint32)      # pages never written cost nothing

    if threads > 1 and count:
        infos = _Job(cfg, layers, scratch, offsets).run(threads, where_of=lambda i: f"layer {i}")
    else:
        for i, (gbits, _, _) in enumerate(layers):
            nan = _nan_error(gbits, f"layer {i}")
            if nan is not None:
                raise nan
        infos = []
        for (gbits, r, plan), off in zip(layers, offsets):
            lay = plan.layout
            n_words, satq, satfb = _step_kernel(gbits, r, lay.block_size, lay.n_blocks,
                                                plan.k_eff, cfg.M, cfg.k, cfg.range_bits,
                                                scratch, off, plan.layer_id, plan.lmax_log2)
            infos.append(StepInfo(int(n_words), plan.k_eff, lay.n_blocks, lay.block_size,
                                  int(satq), int(satfb)))
    pieces = [scratch[o:o + info.n_words] for o, info in zip(offsets, infos)]
    message = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.uint32)
    return message, infos
