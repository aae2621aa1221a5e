"""The numba kernels of the compress step (spec §1–§4); no argument checks here.

Callers (fastpath.fast, fastpath.step_schedule) validate everything through
refmodel.validation first: these kernels trust B >= 1, B * n_blocks < 2**33, k_eff <=
n_blocks, and out having max_step_words words from base.

Pass 1 reads the float32 bits and the residual once and produces the code, the
error-feedback sum, both saturation counts, the block norms and the NaN test together (the
lean steps use the guarded pass 1, which can undo itself: a NaN costs no separate scan of
the gradient, and still leaves every residual as it was); selection is a
k-element heap with the exact tie rule; pass 2 visits only the selected blocks (everything
else is a zero run for the encoder and its residual already holds `a`), streaming them
through the ZRLE encoder of codec.zrle_numba, CRC included.
"""
from __future__ import annotations

import math

import numba as nb
import numpy as np
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic

from gradblock.codec.zrle_numba import enc_begin, enc_end, enc_feed, enc_feed_zeros
from gradblock.refmodel.plan import UNDO_UNIT
from gradblock.refmodel.quantiser import QMAX

ABS_MASK = 0x7FFFFFFF
INF_BITS = 0x7F800000


# ---------------------------------------------------------------------------------------------
# Element kernels
# ---------------------------------------------------------------------------------------------

@nb.njit(inline="always", nogil=True, cache=True)
def quantise_bits(b, M, k, tsat):
    """Q of the float32 with bits b (int64 holding a uint32), spec §1.2, where tsat is
    refmodel.quantiser.saturation_bits(cfg). NaN gives QMAX (callers reject NaN
    separately). All values stay below 2**63, so int64 is exact. Branch-free so LLVM
    vectorises the loops calling it."""
    ab = b & ABS_MASK
    e = ab >> 23
    m = (b & 0x7FFFFF) | (np.int64(e != 0) << 23)
    t = k - (max(e, 1) - 150)                     # t = k - E
    tc = min(max(t, 1), 60)                       # P < 2**56: any t >= 57 rounds to 0
    P = m * (M & 0xFFFFFFFF)                      # the mask lets LLVM use a 32x32->64 multiply
    # round half to even of P / 2**tc: add half - 1, plus 1 more when the quotient is odd
    q = (P + ((np.int64(1) << (tc - 1)) - 1) + ((P >> tc) & 1)) >> tc
    mag = QMAX if ab >= tsat else q               # below tsat: t >= 1 and q < QMAX
    s = b >> 31
    return (mag ^ -s) + s                         # apply the sign


@nb.njit(nogil=True, cache=True)
def nan_count(gbits):
    c = 0
    for i in range(gbits.size):
        c += (np.int64(gbits[i]) & ABS_MASK) > INF_BITS
    return c


@nb.njit(nogil=True, cache=True)
def quantise_kernel(gbits, q_out, M, k, rbits, tsat):
    satq = 0
    nan = 0
    for i in range(gbits.size):
        b = np.int64(gbits[i])
        ab = b & ABS_MASK
        satq += ab > rbits
        nan += ab > INF_BITS
        q_out[i] = quantise_bits(b, M, k, tsat)
    return satq, nan


@nb.njit(inline="always", nogil=True, cache=True)
def feedback(qv, r):
    """(a, |a|, clamped?) for a = clamp(r + q, -QMAX, QMAX) (spec §2.1): the clamp on the
    magnitude, which the block norm needs anyway."""
    a = qv + np.int64(r)
    mag = abs(a)
    c = min(mag, QMAX)
    return (c if a >= 0 else -c), c, mag > QMAX


@nb.njit(inline="always", nogil=True, cache=True)
def norm_term(mag, nsh):
    """One element's share of its block norm (spec §2.3): |a| for L1 (nsh < 0), else
    (|a| >> nsh)**2. Exact in int64: the block sums stay below 2**63."""
    if nsh < 0:
        return mag
    m = mag >> nsh
    return m * m


# ---------------------------------------------------------------------------------------------
# Pass 1: quantise + feedback + saturation counts + block norms, one read of g and r
# ---------------------------------------------------------------------------------------------

# Inner loops run over slice views from index 0: numba then knows the index is not negative,
# drops its wraparound test, and LLVM vectorises the loop (a ~10x difference).

@nb.njit(nogil=True, cache=True)
def pass1_keep(gbits, r, q_out, acc_out, B, norms, M, k, rbits, tsat, nsh):
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
            ab = b & ABS_MASK
            satq += ab > rbits
            nan += ab > INF_BITS
            qv = quantise_bits(b, M, k, tsat)
            q_blk[i] = qv
            a, mag, over = feedback(qv, r_blk[i])
            satfb += over
            a_blk[i] = a
            norm += norm_term(mag, nsh)
        norms[j] = norm
    return satq, satfb, nan


@nb.njit(inline="always", nogil=True, cache=True)
def quantise_lean(b, M, kc, vmin, tsat):
    """quantise_bits for b = the float32 bits sign-extended from int32 (a negative int64 for
    a negative float), in fewer vector operations for pass 1's hot loop: kc = k + 86 and
    vmin = max(1 - kc, 4) come from lean_constants, which folds max(e, 1) into the lower
    clamp (max(max(e, 1) - kc, 4) equals max(e - kc, 1 - kc, 4)); 2**(tc-1) - 1 is one shift
    of a constant; the sign is a select. restore must use this same function."""
    ab = b & ABS_MASK
    e = ab >> 23
    m = (b & 0x7FFFFF) | (np.int64(e != 0) << 23)
    v = min(max(e - kc, vmin), 63)                # v = 64 - tc, tc = clamp(k - E, 1, 60)
    P = m * (M & 0xFFFFFFFF)
    tc = 64 - v
    q = (P + (np.int64(0x7FFFFFFFFFFFFFFF) >> v) + ((P >> tc) & 1)) >> tc
    mag = QMAX if ab >= tsat else q
    return -mag if b < 0 else mag


@nb.njit(inline="always", nogil=True, cache=True)
def lean_constants(k):
    """(kc, vmin) of quantise_lean for the quantiser shift k."""
    kc = np.int64(k) + 86
    return kc, max(1 - kc, np.int64(4))


@nb.njit(nogil=True, cache=True)
def _recount(g_run, old_r, M, kc, vmin, rbits, tsat, count_q, count_fb):
    """The exact saturation counts of a unit whose pass 1 saw a |bits| above rbits
    (count_q) or a clamped feedback sum (count_fb): the hot loop only flags them. old_r is
    the unit's residual before pass 1 (the scratch copy). Returns (sat_q, sat_fb)."""
    satq = 0
    satfb = 0
    for i in range(g_run.size):
        b = np.int64(g_run[i])
        if count_q:
            satq += (b & ABS_MASK) > rbits
        if count_fb:
            satfb += abs(quantise_lean(b, M, kc, vmin, tsat) + np.int64(old_r[i])) > QMAX
    return satq, satfb


# ---------------------------------------------------------------------------------------------
# Guarded pass 1: NaNs counted in the same read, the old residual kept where it cannot be
# recomputed, so that a NaN found late is undone instead of pre-scanned for
# ---------------------------------------------------------------------------------------------

# Pass 1 runs in units of at most UNIT elements (whole blocks, or a slice of a larger block).
# Each unit's old residual is first copied to a scratch buffer that stays in L1; only a unit
# whose feedback saturated has it saved to `undo` (pages written only then) and logged as
# (lo, hi). Everywhere else the old residual is a - Q(g) exactly, so `restore` rebuilds it.
# This replaces a separate NaN pre-scan of the gradient (a second read of every element).
# The hot loop counts nothing per element: the largest |bits| (a max it needs for the NaN
# test anyway) says whether any |g| > R, and an OR of a ^ clamp(a) whether any feedback sum
# was clamped; only such a unit (rare: saturation is the exception) is recounted exactly.
# (UNIT lives in refmodel.plan, which sizes the log; the numba cache does not see a change
# to it: clear __pycache__ after editing it.)
UNIT = UNDO_UNIT


@nb.njit(inline="always", nogil=True, cache=True)
def _clamp_feedback(qv, rv):
    """a = clamp(r + q, -QMAX, QMAX) (spec §2.1) and a ^ (r + q): nonzero where it clamped."""
    s = qv + np.int64(rv)
    a = min(max(s, -QMAX), QMAX)
    return a, a ^ s


@nb.njit(inline="always", nogil=True, cache=True)
def _unit(g_run, r_run, B, norms, jn, M, kc, vmin, rbits, tsat, scratch, nsh):
    """Pass 1 over one unit: elements g_run/r_run, blocks of B from block jn on (B == 0: the
    unit is a slice of one block, its norm returned rather than stored); the old residual
    is copied to scratch in the same loop (a separate copy loop would stall on reading r).
    Returns (sat_q, sat_fb, nan, norm of a B == 0 slice)."""
    top = np.int64(0)               # the largest |bits|: above INF_BITS means a NaN
    clamped = np.int64(0)           # nonzero once a feedback sum was clamped
    norm = np.int64(0)
    if B == 1:
        n_run, keep = norms[jn:jn + g_run.size], scratch[:g_run.size]
        for i in range(g_run.size):
            b = np.int64(g_run[i])
            top = max(top, b & ABS_MASK)
            rv = r_run[i]
            keep[i] = rv
            a, diff = _clamp_feedback(quantise_lean(b, M, kc, vmin, tsat), rv)
            clamped |= diff
            r_run[i] = a
            n_run[i] = norm_term(abs(a), nsh)
    elif B == 0:
        keep = scratch[:g_run.size]
        for i in range(g_run.size):
            b = np.int64(g_run[i])
            top = max(top, b & ABS_MASK)
            rv = r_run[i]
            keep[i] = rv
            a, diff = _clamp_feedback(quantise_lean(b, M, kc, vmin, tsat), rv)
            clamped |= diff
            r_run[i] = a
            norm += norm_term(abs(a), nsh)
    else:
        n = g_run.size
        for j in range((n + B - 1) // B):
            lo = j * B
            hi = min(lo + B, n)
            g_blk, r_blk, k_blk = g_run[lo:hi], r_run[lo:hi], scratch[lo:hi]
            bnorm = np.int64(0)
            for i in range(g_blk.size):
                b = np.int64(g_blk[i])
                top = max(top, b & ABS_MASK)
                rv = r_blk[i]
                k_blk[i] = rv
                a, diff = _clamp_feedback(quantise_lean(b, M, kc, vmin, tsat), rv)
                clamped |= diff
                r_blk[i] = a
                bnorm += norm_term(abs(a), nsh)
            norms[jn + j] = bnorm
    satq = 0
    satfb = 0
    if top > rbits or clamped != 0:
        satq, satfb = _recount(g_run, scratch, M, kc, vmin, rbits, tsat, top > rbits,
                               clamped != 0)
    return satq, satfb, top > INF_BITS, norm


# ---------------------------------------------------------------------------------------------
# The fast unit: pass 1 in float64 lanes, exact where it does not flag the unit
# ---------------------------------------------------------------------------------------------

# Q(g) = RNE(P / 2**t) with P = m * M (spec §1.2) is RNE(x) for the real x = g * M * 2**-k. In
# float64, g (24-bit significand) and Sd = M * 2**-k (32-bit) are exact and x = fl(g * Sd) is
# one rounding of x; (x + MAGIC) - MAGIC rounds it to an integer, ties to even (for
# |x| < 2**51), and r + q is exact (|r + q| < 2**33). Every step is a plain float64 vector
# instruction on AVX2 (where int64 min, max, abs and arithmetic shifts are emulated), and the
# code comes out as an int32 conversion. Exact unless the unit is flagged:
#  * fl(x) == RNE(x) unless fl(x) is a half-integer that x is not (fl is monotone and every
#    half-integer below 2**31 is a float64): a unit where |x - q| == 0.5 is flagged (true
#    ties too: they are rare);
#  * |x| >= QMAX - 1 flags: below it Q = RNE(x) < QMAX (no saturation), and |g| > R (whose
#    x >= QMAX), Inf and NaN (x NaN, so s NaN) all flag;
#  * |r + q| >= QMAX - 1 flags, so an unflagged sum needs no clamp.
# A flagged unit gets its residual back from the scratch copy and is redone by the integer
# `_unit` above, which counts, saves and logs as before; an unflagged one has no saturation,
# no clamped sum and no NaN, by the bounds above.
MAGIC = 6755399441055744.0          # 1.5 * 2**52
QLIM = float(QMAX - 1)


@nb.njit(inline="always", nogil=True, cache=True)
def _fast_elem(gv, rv, Sd):
    """(code + residual as int32, 1 if the element flags its unit) for g = gv, r = rv."""
    x = np.float64(gv) * Sd
    qd = (x + MAGIC) - MAGIC
    s = qd + np.float64(rv)
    flag = np.int64(not (max(abs(x), abs(s)) < QLIM)) | np.int64(abs(x - qd) == 0.5)
    return np.int32(s), flag


@intrinsic
def prefetch(typingctx, arr, idx):
    """Hint the cache line of arr[idx] into the caches. The address is integer arithmetic on the
    data pointer, not an indexed load, so any idx is allowed (a prefetch never faults)."""
    if not isinstance(arr, types.Array) or not isinstance(idx, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        i32, i64 = ir.IntType(32), ir.IntType(64)
        size = context.get_abi_sizeof(context.get_data_type(sig.args[0].dtype))
        off = builder.mul(context.cast(builder, args[1], sig.args[1], types.int64),
                          ir.Constant(i64, size))
        ptr = builder.inttoptr(builder.add(builder.ptrtoint(ary.data, i64), off),
                               ir.IntType(8).as_pointer())
        fnty = ir.FunctionType(ir.VoidType(), [ptr.type, i32, i32, i32])
        name = "llvm.prefetch.p0i8"
        fn = builder.module.globals.get(name) or ir.Function(builder.module, fnty, name)
        # read, keep in all levels, data
        builder.call(fn, [ptr, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()
    return types.void(arr, idx), codegen


# The fast unit runs in spans of SPAN elements, each prefetching the lines AHEAD elements on
# (4 KiB of g and of r): the loop has too few loads per instruction for the out-of-order
# window to keep enough misses in flight on its own, and where the hardware prefetcher does
# not make up for it (this VM: 1.9 ns per element from memory against 0.55 from cache), the
# step ran at a third of the memory's rate. Distances 512-2048 and spans 128-512 were tried:
# ResNet-50's pass 1 at 0.62-0.75 ns per element, longer spans slower.
SPAN = 256
AHEAD = 1024
LINE = 16                           # 4-byte elements per 64-byte line


@nb.njit(inline="always", nogil=True, cache=True)
def _fast_span(g, r, keep, Sd, nsh, lo, hi):
    """Elements [lo, hi) of a unit (r <- a, the old r to keep): (flag, their norm terms' sum)."""
    for p in range(lo + AHEAD, hi + AHEAD, LINE):
        prefetch(g, p)
        prefetch(r, p)
    gs, rs, ks = g[lo:hi], r[lo:hi], keep[lo:hi]
    flag = np.int64(0)
    norm = np.int64(0)
    for i in range(gs.size):
        rv = rs[i]
        ks[i] = rv
        a, f = _fast_elem(gs[i], rv, Sd)
        flag |= f
        rs[i] = a
        norm += norm_term(abs(np.int64(a)), nsh)
    return flag, norm


@nb.njit(inline="always", nogil=True, cache=True)
def _fast_span_each(g, r, keep, norms, Sd, nsh, lo, hi):
    """_fast_span for blocks of one element: each norm term to norms (indexed like g)."""
    for p in range(lo + AHEAD, hi + AHEAD, LINE):
        prefetch(g, p)
        prefetch(r, p)
    gs, rs, ks, ns = g[lo:hi], r[lo:hi], keep[lo:hi], norms[lo:hi]
    flag = np.int64(0)
    for i in range(gs.size):
        rv = rs[i]
        ks[i] = rv
        a, f = _fast_elem(gs[i], rv, Sd)
        flag |= f
        rs[i] = a
        ns[i] = norm_term(abs(np.int64(a)), nsh)
    return flag


@nb.njit(inline="always", nogil=True, cache=True)
def _unit_fast(g_run, r_run, B, norms, jn, Sd, scratch, nsh):
    """`_unit` in float64 lanes (g_run: the float32 values): r_run <- a, norms from block jn
    on (B == 0: a slice of one block, its norm returned), old residual to scratch. Returns
    (flag, norm of a B == 0 slice); with flag nonzero nothing it wrote counts (see above)."""
    n = g_run.size
    flag = np.int64(0)
    norm = np.int64(0)
    if B == 1:
        n_run = norms[jn:jn + n]
        for c in range(0, n, SPAN):
            flag |= _fast_span_each(g_run, r_run, scratch, n_run, Sd, nsh, c, min(c + SPAN, n))
    elif B == 0:
        for c in range(0, n, SPAN):
            f, part = _fast_span(g_run, r_run, scratch, Sd, nsh, c, min(c + SPAN, n))
            flag |= f
            norm += part
    else:
        for j in range((n + B - 1) // B):
            lo = j * B
            hi = min(lo + B, n)
            bnorm = np.int64(0)
            for c in range(lo, hi, SPAN):
                f, part = _fast_span(g_run, r_run, scratch, Sd, nsh, c, min(c + SPAN, hi))
                flag |= f
                bnorm += part
            norms[jn + j] = bnorm
    return flag, norm


@nb.njit(inline="always", nogil=True, cache=True)
def _unit_checked(g_int, g_flt, r_run, B, norms, jn, M, kc, vmin, rbits, tsat, Sd, scratch, nsh):
    """The fast unit, redone by the integer `_unit` when it flags. Returns as `_unit`."""
    flag, norm = _unit_fast(g_flt, r_run, B, norms, jn, Sd, scratch, nsh)
    if flag == 0:
        return 0, 0, False, norm
    for i in range(r_run.size):
        r_run[i] = scratch[i]
    return _unit(g_int, r_run, B, norms, jn, M, kc, vmin, rbits, tsat, scratch, nsh)


@nb.njit(inline="always", nogil=True, cache=True)
def _save(r_lo, lo, hi, scratch, undo, log, nlog):
    """Unit [lo, hi) saturated: its old residual (in scratch) to undo[lo:hi], logged."""
    u = undo[lo:hi]
    for i in range(u.size):
        u[i] = scratch[i]
    log[nlog] = r_lo + lo
    log[nlog + 1] = r_lo + hi
    return nlog + 2


@nb.njit(nogil=True, cache=True)
def pass1_guarded(gbits, r, B, norms, M, k, rbits, tsat, jlo, jhi, undo, log, nlog, r_lo, nsh):
    """Pass 1 over blocks [jlo, jhi) (r <- a, norms filled), NaNs counted on the way and the
    old residual of every saturated unit saved (undo indexed like r; log entries are r_lo +
    offsets into r). Returns (sat_q, sat_fb, units holding a NaN, nlog)."""
    n = gbits.size
    gflt = gbits.view(np.float32)             # the fast unit's loads
    gbits = gbits.view(np.int32)              # sign-extending loads (quantise_lean)
    scratch = np.empty(UNIT, dtype=np.int32)
    kc, vmin = lean_constants(k)
    Sd = math.ldexp(np.float64(M), -k)        # M * 2**-k, exact (M < 2**32)
    satq = 0
    satfb = 0
    nan = 0
    if B <= UNIT:
        per = UNIT // B
        for j0 in range(jlo, jhi, per):
            lo = j0 * B
            hi = min(min(j0 + per, jhi) * B, n)
            sq, sf, nn, _ = _unit_checked(gbits[lo:hi], gflt[lo:hi], r[lo:hi], B, norms, j0, M,
                                          kc, vmin, rbits, tsat, Sd, scratch, nsh)
            satq += sq
            nan += nn
            if sf:
                satfb += sf
                nlog = _save(r_lo, lo, hi, scratch, undo, log, nlog)
        return satq, satfb, nan, nlog
    step = -(-B // -(-B // UNIT))          # equal slices of at most UNIT (4608 -> 2 x 2304)
    for j in range(jlo, jhi):
        blo = j * B
        bhi = min(blo + B, n)
        norm = np.int64(0)
        for lo in range(blo, bhi, step):
            hi = min(lo + step, bhi)
            sq, sf, nn, part = _unit_checked(gbits[lo:hi], gflt[lo:hi], r[lo:hi], 0, norms, j,
                                             M, kc, vmin, rbits, tsat, Sd, scratch, nsh)
            satq += sq
            nan += nn
            norm += part
            if sf:
                satfb += sf
                nlog = _save(r_lo, lo, hi, scratch, undo, log, nlog)
        norms[j] = norm
    return satq, satfb, nan, nlog


@nb.njit(nogil=True, cache=True)
def restore(gbits, r, undo, log, nlog, r_lo, M, k, tsat):
    """Undo pass1_guarded over all of r (r_lo: r's offset in the log's numbering): a - Q(g)
    everywhere, then the saved units back."""
    gbits = gbits.view(np.int32)
    kc, vmin = lean_constants(k)
    for i in range(r.size):
        r[i] = r[i] - quantise_lean(np.int64(gbits[i]), M, kc, vmin, tsat)
    for t in range(0, nlog, 2):
        lo = log[t] - r_lo
        hi = log[t + 1] - r_lo
        dst = r[lo:hi]
        src = undo[lo:hi]
        for i in range(dst.size):
            dst[i] = src[i]


# ---------------------------------------------------------------------------------------------
# Top-k selection: a heap of the k best blocks seen so far, its root the worst of them
# ---------------------------------------------------------------------------------------------

@nb.njit(inline="always", nogil=True, cache=True)
def worse(na, ia, nb_, ib):
    """Block a ranks below block b: smaller norm, or equal norm and higher index."""
    return na < nb_ or (na == nb_ and ia > ib)


@nb.njit(inline="always", nogil=True, cache=True)
def sift_down(hn, hi, size, pos):
    n0 = hn[pos]
    i0 = hi[pos]
    while True:
        child = 2 * pos + 1
        if child >= size:
            break
        if child + 1 < size and worse(hn[child + 1], hi[child + 1], hn[child], hi[child]):
            child += 1
        if not worse(hn[child], hi[child], n0, i0):
            break
        hn[pos] = hn[child]
        hi[pos] = hi[child]
        pos = child
    hn[pos] = n0
    hi[pos] = i0


@nb.njit(nogil=True, cache=True)
def select_top_k(norms, k_eff, selected):
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
        sift_down(hn, hi, k_eff, p)
    for j in range(k_eff, norms.size):
        # every index in the heap is lower than j, so only a strictly larger norm beats the root
        if norms[j] > hn[0]:
            hn[0] = norms[j]
            hi[0] = j
            sift_down(hn, hi, k_eff, 0)
    size = k_eff
    while size > 0:                    # pop the worst first: it is ranked last
        size -= 1
        selected[size] = hi[0]
        hn[0] = hn[size]
        hi[0] = hi[size]
        sift_down(hn, hi, size, 0)


@nb.njit(nogil=True, cache=True)
def block_norms_kernel(acc, B, norms, nsh):
    n = acc.size
    for j in range(norms.size):
        blk = acc[j * B:min(j * B + B, n)]
        s = np.int64(0)
        for i in range(blk.size):
            s += norm_term(abs(np.int64(blk[i])), nsh)
        norms[j] = s


@nb.njit(inline="always", nogil=True, cache=True)
def selected_mask(selected, n_blocks):
    mask = np.zeros(n_blocks, dtype=np.uint8)
    for t in range(selected.size):
        mask[selected[t]] = 1
    return mask


# ---------------------------------------------------------------------------------------------
# Pass 2: mask -> payload -> ZRLE frame, and the new residual
# ---------------------------------------------------------------------------------------------

@nb.njit(nogil=True, cache=True)
def pass2_keep(acc, B, mask, payload, res_out, out, base, layer_id, rbits, lmax_log2):
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
def pass2_inplace(r, B, mask, out, base, layer_id, rbits, lmax_log2):
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
def layer_kernel(gbits, r, B, n_blocks, k_eff, M, k, rbits, tsat, out, base, layer_id, lmax_log2,
                 undo, log, nsh):
    """One layer's lean step with the guarded pass 1 (no separate NaN scan): on a NaN the
    residual is restored and n_words is -1. Returns (n_words, sat_q, sat_fb)."""
    norms = np.empty(n_blocks, dtype=np.int64)
    satq, satfb, nan, nlog = pass1_guarded(gbits, r, B, norms, M, k, rbits, tsat, 0, n_blocks,
                                           undo, log, 0, 0, nsh)
    if nan:
        restore(gbits, r, undo, log, nlog, 0, M, k, tsat)
        return np.int64(-1), satq, satfb
    return step_tail(r, B, norms, k_eff, out, base, layer_id, rbits, lmax_log2), satq, satfb


@nb.njit(nogil=True, cache=True)
def step_tail(r, B, norms, k_eff, out, base, layer_id, rbits, lmax_log2):
    """Selection and pass 2 once pass 1 has filled `norms` (and r holds a)."""
    selected = np.empty(k_eff, dtype=np.int64)
    select_top_k(norms, k_eff, selected)
    mask = selected_mask(selected, norms.size)
    return pass2_inplace(r, B, mask, out, base, layer_id, rbits, lmax_log2)




@nb.njit(nogil=True, cache=True)
def message_kernel(gbits, r, g_off, block, n_blocks, k_eff, layer_id, lmax_log2, M, k, rbits, tsat,
                   out, base, n_words, satq, satfb, undo, log, nsh):
    """Every layer of a message in one call: layer i is gbits/r[g_off[i]:g_off[i + 1]].

    Pass 1 of every layer first (pass1_guarded, NaNs counted in the same read). At the first
    layer i holding a NaN, every residual is restored (undo: r's size, log: the plan's
    undo_log_size entries) and (i, -1) returned. Otherwise each layer's selection and pass 2,
    its frame written right after the previous one from out[base] on (out needs sum of
    max_step_words from base); returns (n_layers, total words), n_words/satq/satfb filled."""
    count = g_off.size - 1
    b_off = np.zeros(count + 1, dtype=np.int64)
    for i in range(count):
        b_off[i + 1] = b_off[i] + n_blocks[i]
    norms = np.empty(b_off[count], dtype=np.int64)
    nlog = 0
    for i in range(count):
        lo = g_off[i]
        hi = g_off[i + 1]
        sq, sf, nan, nlog = pass1_guarded(gbits[lo:hi], r[lo:hi], block[i],
                                          norms[b_off[i]:b_off[i + 1]], M, k, rbits, tsat, 0,
                                          n_blocks[i], undo[lo:hi], log, nlog, lo, nsh[i])
        if nan:
            restore(gbits[:hi], r[:hi], undo[:hi], log, nlog, 0, M, k, tsat)
            return i, np.int64(-1)
        satq[i] = sq
        satfb[i] = sf
    at = base
    for i in range(count):
        nw = step_tail(r[g_off[i]:g_off[i + 1]], block[i], norms[b_off[i]:b_off[i + 1]], k_eff[i],
                       out, at, layer_id[i], rbits, lmax_log2[i])
        n_words[i] = nw
        at += nw
    return count, at - base


@nb.njit(nogil=True, cache=True)
def compact_frames(out, offsets, n_words, dst):
    """dst <- the frames out[offsets[i]:offsets[i] + n_words[i]] back to back; returns the length."""
    at = 0
    for i in range(offsets.size):
        src = out[offsets[i]:offsets[i] + n_words[i]]
        d = dst[at:at + n_words[i]]
        for j in range(src.size):
            d[j] = src[j]
        at += n_words[i]
    return at


# ---------------------------------------------------------------------------------------------
# A message on several threads: each thread's share of tasks in ONE call per phase
# ---------------------------------------------------------------------------------------------

@nb.njit(nogil=True, cache=True)
def pass1_group(gbits, r, undo, log, tasks, t_elo, t_ehi, t_B, t_nblk, t_noff, t_logoff, norms,
                M, k, rbits, tsat, t_satq, t_satfb, t_nan, t_nlog, t_nsh):
    """Guarded pass 1 of the tasks listed in `tasks` (indices into the t_* tables): task t is
    message elements [t_elo, t_ehi) in blocks of t_B (t_nblk of them, their norms at
    norms[t_noff:]), its undo log at log[t_logoff:]. Results per task, so that threads
    running disjoint task lists never write the same entry."""
    for x in range(tasks.size):
        t = tasks[x]
        lo = t_elo[t]
        hi = t_ehi[t]
        sq, sf, nan, nl = pass1_guarded(gbits[lo:hi], r[lo:hi], t_B[t],
                                        norms[t_noff[t]:t_noff[t] + t_nblk[t]], M, k, rbits, tsat,
                                        0, t_nblk[t], undo[lo:hi], log[t_logoff[t]:], 0, 0,
                                        t_nsh[t])
        t_satq[t] = sq
        t_satfb[t] = sf
        t_nan[t] = nan
        t_nlog[t] = nl


@nb.njit(nogil=True, cache=True)
def restore_tasks(gbits, r, undo, log, t_elo, t_ehi, t_logoff, t_nlog, M, k, tsat):
    """Undo pass1_group for every task (the error path after a NaN)."""
    for t in range(t_elo.size):
        lo = t_elo[t]
        hi = t_ehi[t]
        restore(gbits[lo:hi], r[lo:hi], undo[lo:hi], log[t_logoff[t]:], t_nlog[t], 0, M, k,
                tsat)


@nb.njit(nogil=True, cache=True)
def tail_group(r, layers, g_off, block, norms, b_off, k_eff, out, w_off, layer_id, rbits,
               lmax_log2, n_words):
    """Selection and pass 2 of the listed layers, each frame at out[w_off[i]:]."""
    for x in range(layers.size):
        i = layers[x]
        n_words[i] = step_tail(r[g_off[i]:g_off[i + 1]], block[i], norms[b_off[i]:b_off[i + 1]],
                               k_eff[i], out, w_off[i], layer_id[i], rbits, lmax_log2[i])
